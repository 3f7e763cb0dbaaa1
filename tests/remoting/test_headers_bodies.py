"""Headers and bodies: lenient decoding of what real clients send, strict string/upstream-name output."""

from __future__ import annotations

import orjson
import pytest
from ferrymq.remoting import fastjson
from ferrymq.remoting.bodies import (
    BodyError,
    BrokerData,
    ConsumeFromWhere,
    ConsumerData,
    ConsumeStats,
    ConsumeType,
    HeartbeatData,
    MessageModel,
    MessageQueue,
    OffsetWrapper,
    QueueData,
    TopicRouteData,
)
from ferrymq.remoting.command import RemotingCommand, decode_command
from ferrymq.remoting.headers import (
    HeaderError,
    PullMessageRequestHeader,
    PullMessageResponseHeader,
    SendMessageRequestHeader,
    UnregisterClientRequestHeader,
)
from hypothesis import given
from hypothesis import strategies as st


def test_send_v2_short_names_map_to_long_names() -> None:
    ext = {
        "a": "pg",
        "b": "T",
        "c": "TBW102",
        "d": "4",
        "e": "2",
        "f": "0",
        "g": "17",
        "h": "0",
        "i": "TAGS\x01x\x02",
        "j": "0",
        "k": "false",
        "m": "true",
    }
    h = SendMessageRequestHeader.from_ext(ext)
    assert (h.producer_group, h.topic, h.queue_id, h.born_timestamp) == ("pg", "T", 2, 17)
    assert h.batch is True and h.unit_mode is False and h.properties == "TAGS\x01x\x02"
    assert SendMessageRequestHeader.from_ext(h.to_ext()) == h
    assert SendMessageRequestHeader.from_ext(h.to_ext_v2()) == h


def test_numbers_and_booleans_from_json_header_are_accepted() -> None:
    # a client writing extFields as JSON numbers/booleans, plus empty auth fields
    header = orjson.dumps(
        {
            "code": 11,
            "opaque": 5,
            "flag": 0,
            "language": "CPP",
            "extFields": {
                "consumerGroup": "g",
                "topic": "t",
                "queueId": 3,
                "queueOffset": 10,
                "maxMsgNums": 32,
                "sysFlag": 2,
                "commitOffset": 0,
                "suspendTimeoutMillis": 15000,
                "subVersion": 1,
                "AccessKey": "",
                "Signature": "",
            },
        }
    )
    frame = len(header).to_bytes(4, "big") + header
    cmd = decode_command(frame)
    h = PullMessageRequestHeader.from_ext(cmd.ext_fields)
    assert h.queue_id == 3 and h.queue_offset == 10 and h.suspend_timeout_millis == 15000


def test_missing_or_bad_field_names_the_field() -> None:
    with pytest.raises(HeaderError, match="'queueId'"):
        PullMessageRequestHeader.from_ext({"consumerGroup": "g", "topic": "t", "queueOffset": "0"})
    with pytest.raises(HeaderError, match="'queueOffset'"):
        PullMessageRequestHeader.from_ext(
            {"consumerGroup": "g", "topic": "t", "queueId": "1", "queueOffset": "ten"}
        )


def test_response_ext_values_are_strings() -> None:
    req = RemotingCommand.request(11)
    resp = req.response(0, None, PullMessageResponseHeader(5, 0, 9).to_ext())
    obj = orjson.loads(resp.encode_header())
    assert obj["extFields"] == {
        "nextBeginOffset": "5",
        "minOffset": "0",
        "maxOffset": "9",
        "suggestWhichBrokerId": "0",
    }
    assert UnregisterClientRequestHeader("c1").to_ext() == {"clientID": "c1"}


@given(st.integers(-(2**63), 2**63 - 1), st.integers(0, 2**31 - 1))
def test_pull_header_roundtrip(offset: int, qid: int) -> None:
    h = PullMessageRequestHeader("g", "t", qid, offset, sys_flag=7, subscription="a || b")
    assert PullMessageRequestHeader.from_ext(h.to_ext()) == h


def test_heartbeat_enums_by_name_or_ordinal_and_missing_lists() -> None:
    java = {
        "clientID": "c@1",
        "producerDataSet": [{"groupName": "p"}],
        "consumerDataSet": [
            {
                "groupName": "g",
                "consumeType": "CONSUME_PASSIVELY",
                "messageModel": "CLUSTERING",
                "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
                "subscriptionDataSet": [
                    {
                        "topic": "t",
                        "subString": "a || b",
                        "tagsSet": ["a", "b"],
                        "codeSet": [97, 98],
                        "subVersion": 12,
                    }
                ],
                "unitMode": False,
            }
        ],
    }
    cpp = {
        "clientID": "c@2",
        "consumerDataSet": [
            {
                "groupName": "g",
                "consumeType": 1,
                "messageModel": 1,
                "consumeFromWhere": 4,
                "subscriptionDataSet": [{"topic": "t", "subString": "*", "subVersion": 3}],
            }
        ],
    }
    for raw in (java, cpp):
        hb = HeartbeatData.decode(orjson.dumps(raw))
        c = hb.consumer_data_set[0]
        assert c.consume_type is ConsumeType.CONSUME_PASSIVELY
        assert c.message_model is MessageModel.CLUSTERING
        assert c.consume_from_where is ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
    out = orjson.loads(HeartbeatData.decode(orjson.dumps(cpp)).encode())
    assert out["clientID"] == "c@2"
    assert out["consumerDataSet"][0]["messageModel"] == "CLUSTERING"
    assert out["consumerDataSet"][0]["subscriptionDataSet"][0]["tagsSet"] == []


def test_bad_bodies_raise_body_error_naming_field() -> None:
    with pytest.raises(BodyError, match="clientID"):
        HeartbeatData.decode(b'{"producerDataSet": []}')
    with pytest.raises(BodyError, match="messageModel"):
        ConsumerData.from_json_obj({"groupName": "g", "messageModel": "SIDEWAYS"})
    with pytest.raises(BodyError, match="not JSON"):
        HeartbeatData.decode(b"{nope")
    with pytest.raises(BodyError):
        HeartbeatData.decode(b"")


def test_route_data_wire_form() -> None:
    route = TopicRouteData(
        queue_datas=[QueueData(broker_name="b", read_queue_nums=4, write_queue_nums=4)],
        broker_datas=[BrokerData(cluster="c", broker_name="b", broker_addrs={0: "127.0.0.1:1"})],
    )
    obj = orjson.loads(route.encode())
    assert obj == {
        "queueDatas": [
            {
                "brokerName": "b",
                "readQueueNums": 4,
                "writeQueueNums": 4,
                "perm": 6,
                "topicSysFlag": 0,
            }
        ],
        "brokerDatas": [{"cluster": "c", "brokerName": "b", "brokerAddrs": {"0": "127.0.0.1:1"}}],
        "filterServerTable": {},
    }
    back = TopicRouteData.decode(route.encode())
    assert back.broker_datas[0].master_addr() == "127.0.0.1:1"
    # fastjson's bare integer keys and the old topicSynFlag spelling are read too
    old = (
        b'{"brokerDatas":[{"cluster":"c","brokerName":"b","brokerAddrs":{0:"x:1",1:"y:2"}}],'
        b'"queueDatas":[{"brokerName":"b","readQueueNums":2,"writeQueueNums":2,"perm":6,'
        b'"topicSynFlag":3}]}'
    )
    parsed = TopicRouteData.decode(old)
    assert parsed.broker_datas[0].broker_addrs == {0: "x:1", 1: "y:2"}
    assert parsed.queue_datas[0].topic_sys_flag == 3


def test_consume_stats_uses_fastjson_object_keys() -> None:
    mq = MessageQueue(topic="t", broker_name="b", queue_id=1)
    stats = ConsumeStats(offset_table={mq: OffsetWrapper(broker_offset=10, consumer_offset=4)})
    raw = stats.encode()
    assert raw.startswith(b'{"offsetTable":{{"brokerName":"b","queueId":1,"topic":"t"}:')
    back = ConsumeStats.decode(raw)
    assert back.offset_table[mq].broker_offset == 10
    assert back.compute_total_diff() == 6
    assert isinstance(fastjson.loads(raw), dict)
