"""The proxy's pure parts: configuration, receipt handles, queue choice, message types, the
v2 <-> broker message mapping, and the generated stubs' codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from ferrymq.broker.pop.extra_info import build_extra_info
from ferrymq.message import MessageConst, MessageExt, java_string_hash
from ferrymq.properties import ConfigError
from ferrymq.proxy import message_type as mt
from ferrymq.proxy import receipt_handle as rh
from ferrymq.proxy.config import ProxyConfig, load_proxy_config
from ferrymq.proxy.errors import Code, ProxyError
from ferrymq.proxy.grpc import converter
from ferrymq.proxy.queue_selector import consistent_hash
from ferrymq.proxy.v2 import definition_pb2 as pb
from hypothesis import given
from hypothesis import strategies as st


# --- configuration ------------------------------------------------------------------------------
def test_rmq_proxy_json_with_upstream_keys(tmp_path: Path) -> None:
    conf = tmp_path / "rmq-proxy.json"
    conf.write_text(
        json.dumps(
            {
                "rocketMQClusterName": "C1",
                "namesrvAddr": "127.0.0.1:9876;127.0.0.2:9876",
                "grpcServerPort": 18081,
                "remotingListenPort": 18080,
                "enableProxyAutoRenew": False,
                "someFutureKey": 1,
            }
        )
    )
    cfg, unknown = load_proxy_config(conf, env={})
    assert cfg.rocket_mq_cluster_name == "C1"
    assert cfg.grpc_server_port == 18081
    assert cfg.namesrv_addrs() == ["127.0.0.1:9876", "127.0.0.2:9876"]
    assert cfg.enable_proxy_auto_renew is False
    assert unknown == ["someFutureKey (" + str(conf) + ")"]
    # upstream's defaults
    assert ProxyConfig().grpc_server_port == 8081
    assert ProxyConfig().max_invisible_time_mills == 12 * 3600 * 1000


def test_bad_proxy_config_names_the_key(tmp_path: Path) -> None:
    conf = tmp_path / "rmq-proxy.json"
    conf.write_text(json.dumps({"grpcServerPort": "eighty"}))
    with pytest.raises(ConfigError, match="grpcServerPort"):
        load_proxy_config(conf, env={})
    conf.write_text("{not json")
    with pytest.raises(ConfigError, match="cannot be read as JSON"):
        load_proxy_config(conf, env={})
    with pytest.raises(ConfigError, match="namesrvAddr is not set"):
        ProxyConfig().namesrv_addrs()


def test_cli_refuses_bad_config_with_exit_code_2(tmp_path: Path) -> None:
    conf = tmp_path / "rmq-proxy.json"
    conf.write_text(json.dumps({"grpcServerPort": -5, "namesrvAddr": "127.0.0.1:1"}))
    done = subprocess.run(
        [sys.executable, "-m", "ferrymq.cli.main", "proxy", "-pc", str(conf), "-pm", "cluster"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "grpcServerPort" in done.stderr
    done = subprocess.run(
        [sys.executable, "-m", "ferrymq.cli.main", "proxy", "-pm", "sideways"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2
    assert "expected cluster or local" in done.stderr


# --- receipt handles ----------------------------------------------------------------------------
def test_handle_decode_as_upstream() -> None:
    h = rh.decode("5 1000 2000 3 1 broker-a 2 7 4096")
    assert (h.start_offset, h.retrieve_time, h.invisible_time, h.revive_queue_id) == (
        5,
        1000,
        2000,
        3,
    )
    assert (h.broker_name, h.queue_id, h.offset, h.commit_log_offset) == ("broker-a", 2, 7, 4096)
    assert h.real_topic("T", "G") == "%RETRY%G_T"
    assert h.is_expired(3000) and not h.is_expired(2999)
    with pytest.raises(rh.ReceiptHandleError, match="Parse failed, dataList size 1"):
        rh.decode("forged-handle")
    with pytest.raises(rh.ReceiptHandleError):
        rh.decode("a b c d e f g h")


def _popped(topic: str, queue_id: int, offset: int, clo: int) -> MessageExt:
    return MessageExt(
        topic=topic, body=b"x", properties={}, queue_id=queue_id, queue_offset=offset,
        commit_log_offset=clo,
    )  # fmt: skip


def test_handles_rebuilt_from_a_pop_answer() -> None:
    msgs = [_popped("T", 1, 10, 100), _popped("T", 1, 11, 200), _popped("%RETRY%G_T", 0, 3, 300)]
    info = rh.PopInfo(
        pop_time=1000,
        invisible_time=60000,
        revive_qid=2,
        start_offset_info="0 1 10;1 0 3",
        msg_offset_info="0 1 10,11;1 0 3",
        order_count_info=None,
    )
    rh.assign_handles(msgs, info, "broker-a", "T", order=False)
    handles = [m.properties[rh.PROPERTY_POP_CK] for m in msgs]
    assert handles == [
        "10 1000 60000 2 0 broker-a 1 10 100",
        "10 1000 60000 2 0 broker-a 1 11 200",
        "3 1000 60000 2 1 broker-a 0 3 300",
    ]
    assert {m.topic for m in msgs} == {"T"}
    assert all(m.properties[rh.PROPERTY_FIRST_POP_TIME] == "1000" for m in msgs)


def test_fifo_pop_answer_sets_delivery_counts() -> None:
    msgs = [_popped("T", 0, 4, 1)]
    info = rh.PopInfo(1000, 10000, 999, "0 0 4", "0 0 4", "0 qo0%4 2")
    rh.assign_handles(msgs, info, "b", "T", order=True)
    assert msgs[0].reconsume_times == 2
    assert rh.decode(msgs[0].properties[rh.PROPERTY_POP_CK]).is_order


@given(
    st.integers(0, 2**40), st.integers(0, 2**41), st.integers(0, 2**31), st.integers(0, 999),
    st.sampled_from(["T", "%RETRY%G_T", "%RETRY%G+T"]), st.integers(0, 64), st.integers(0, 2**40),
)  # fmt: skip
def test_handle_round_trip(
    start: int, pop: int, inv: int, qid: int, topic: str, queue: int, offset: int
) -> None:
    text = rh.with_commit_log_offset(
        build_extra_info(start, pop, inv, qid, topic, "broker-x", queue, offset), 77
    )
    h = rh.decode(text)
    assert (h.start_offset, h.retrieve_time, h.invisible_time) == (start, pop, inv)
    assert (h.revive_queue_id, h.queue_id, h.offset, h.commit_log_offset) == (
        qid,
        queue,
        offset,
        77,
    )
    assert h.real_topic("T", "G") == topic


# --- queue choice -------------------------------------------------------------------------------
# Guava 32's Hashing.consistentHash(String.hashCode(), n), printed by a Java run on the Apache
# RocketMQ 5.4.0 classpath: the queue upstream's proxy gives a message group
GUAVA = [
    ("g1", 4, 0), ("g1", 8, 6), ("g1", 16, 9), ("order-42", 4, 3), ("order-42", 16, 10),
    ("", 16, 0), ("用户", 4, 3), ("用户", 16, 10), ("a-much-longer-message-group-name", 4, 2),
    ("a-much-longer-message-group-name", 8, 6),
]  # fmt: skip


@pytest.mark.parametrize(("group", "buckets", "expected"), GUAVA)
def test_message_group_queue_as_guava(group: str, buckets: int, expected: int) -> None:
    assert consistent_hash(java_string_hash(group), buckets) == expected


def test_consistent_hash_of_longs_as_guava() -> None:
    assert [consistent_hash(v, 7) for v in (0, -1, 123456789, -(2**63))] == [0, 2, 0, 5]


# --- message types ------------------------------------------------------------------------------
def test_message_type_validation() -> None:
    assert mt.of_attributes({"message.type": "FIFO"}) is mt.TopicMessageType.FIFO
    assert mt.of_attributes({}) is mt.TopicMessageType.NORMAL
    assert mt.of_properties({MessageConst.PROPERTY_SHARDING_KEY: "g"}) is mt.TopicMessageType.FIFO
    assert mt.of_properties({"TIMER_DELIVER_MS": "1"}) is mt.TopicMessageType.DELAY
    assert mt.of_properties({"TRAN_MSG": "true"}) is mt.TopicMessageType.TRANSACTION
    mt.validate(mt.TopicMessageType.MIXED, mt.TopicMessageType.FIFO)
    with pytest.raises(ProxyError) as err:
        mt.validate(mt.TopicMessageType.NORMAL, mt.TopicMessageType.FIFO)
    assert err.value.code is Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
    assert err.value.message == (
        "TopicMessageType validate failed, the expected type is NORMAL, but actual type is FIFO"
    )
    assert len(mt.accepted(mt.TopicMessageType.MIXED)) == 4


# --- message mapping ----------------------------------------------------------------------------
def _v2(**sp: object) -> pb.Message:
    return pb.Message(
        topic=pb.Resource(name="T"),
        body=b"body",
        user_properties={"pk": "pv"},
        system_properties=pb.SystemProperties(message_id="01AB", **sp),  # type: ignore[arg-type]
    )


def test_send_properties_as_upstream() -> None:
    props = converter.build_properties(
        _v2(tag="TagA", keys=["k1", "k2"], message_group="g1"), "T", ProxyConfig(), "1.2.3.4:5", 0
    )
    assert props["pk"] == "pv"
    assert props["TAGS"] == "TagA"
    assert props["KEYS"] == "k1 k2"
    assert props["UNIQ_KEY"] == "01AB"
    assert props["__SHARDINGKEY"] == "g1"
    assert props["PGROUP"] == "T"
    assert props["__BORNHOST"] == "1.2.3.4:5"


@pytest.mark.parametrize(
    ("message", "code"),
    [
        (pb.Message(topic=pb.Resource(name="T"), body=b"", system_properties=pb.SystemProperties(message_id="1")), Code.MESSAGE_BODY_EMPTY),
        (pb.Message(topic=pb.Resource(name="T"), body=b"x", user_properties={"TAGS": "x"}, system_properties=pb.SystemProperties(message_id="1")), Code.ILLEGAL_MESSAGE_PROPERTY_KEY),
        (pb.Message(topic=pb.Resource(name="T"), body=b"x", system_properties=pb.SystemProperties(message_id=" ")), Code.ILLEGAL_MESSAGE_ID),
        (pb.Message(topic=pb.Resource(name="T"), body=b"x", system_properties=pb.SystemProperties(message_id="1", tag="a|b")), Code.ILLEGAL_MESSAGE_TAG),
        (pb.Message(topic=pb.Resource(name="T"), body=b"x", system_properties=pb.SystemProperties(message_id="1", message_group="g" * 64)), Code.ILLEGAL_MESSAGE_GROUP),
    ],
)  # fmt: skip
def test_bad_messages_refused_with_upstreams_codes(message: pb.Message, code: Code) -> None:
    with pytest.raises(ProxyError) as err:
        converter.build_properties(message, "T", ProxyConfig(), "", 0)
    assert err.value.code is code


def test_delivery_time_beyond_a_day_refused() -> None:
    msg = _v2()
    msg.system_properties.delivery_timestamp.FromMilliseconds(2 * 86_400_000)
    with pytest.raises(ProxyError) as err:
        converter.build_properties(msg, "T", ProxyConfig(), "", 0)
    assert err.value.code is Code.ILLEGAL_DELIVERY_TIME


def test_received_message_mapping() -> None:
    msg = MessageExt(
        topic="T",
        body=b"hello",
        properties={
            "TAGS": "TagA", "KEYS": "a b", "UNIQ_KEY": "01FF", "pk": "pv", "ORIGIN_GROUP": "G",
            "__SHARDINGKEY": "g1", "POP_CK": "1 2 3 4 0 b 0 1 9", "TIMER_DELIVER_MS": "5000",
        },
        reconsume_times=1,
    )  # fmt: skip
    v2 = converter.to_v2_message(msg, 0)
    sp = v2.system_properties
    assert (sp.tag, list(sp.keys), sp.message_id, sp.delivery_attempt) == (
        "TagA",
        ["a", "b"],
        "01FF",
        2,
    )
    assert sp.message_type == pb.DELAY
    assert sp.receipt_handle == "1 2 3 4 0 b 0 1 9"
    assert sp.delivery_timestamp.ToMilliseconds() == 5000
    assert dict(v2.user_properties) == {"pk": "pv", "__SHARDINGKEY": "g1"}
    assert sp.body_digest.checksum == "5D41402ABC4B2A76B9719D911017C592"


def test_codes_are_the_generated_enums() -> None:
    """ferrymq's Code enum is the published definition's (a renumbering would fail here)."""
    for code in Code:
        assert pb.Code.Value(code.name) == code.value
