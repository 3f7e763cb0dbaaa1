"""Pure decisions of the broker: status -> response code tables, topic auto-creation, config loading."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from ferrymq.broker.broker_conf import load_broker_conf
from ferrymq.broker.config import BrokerConfig
from ferrymq.broker.consumer_offsets import ConsumerOffsetManager
from ferrymq.broker.long_polling import PullRequestHoldService
from ferrymq.broker.processors.pull import pull_response_code
from ferrymq.broker.processors.send import send_response_code
from ferrymq.broker.topic_config import TopicConfigManager, check_topic_name
from ferrymq.filter import build_message_filter
from ferrymq.message import tags_string_to_tags_code
from ferrymq.properties import ConfigError
from ferrymq.remoting.bodies import PERM_INHERIT
from ferrymq.remoting.codes import ResponseCode
from ferrymq.store.config import FlushDiskType
from ferrymq.store.results import GetMessageStatus, PutMessageResult, PutMessageStatus


@pytest.mark.parametrize(
    ("status", "offset", "code"),
    [
        (GetMessageStatus.FOUND, 5, ResponseCode.SUCCESS),
        (GetMessageStatus.NO_MATCHED_MESSAGE, 5, ResponseCode.PULL_RETRY_IMMEDIATELY),
        (GetMessageStatus.MESSAGE_WAS_REMOVING, 5, ResponseCode.PULL_RETRY_IMMEDIATELY),
        (GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, 0, ResponseCode.PULL_NOT_FOUND),
        (GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, 3, ResponseCode.PULL_OFFSET_MOVED),
        (GetMessageStatus.NO_MESSAGE_IN_QUEUE, 0, ResponseCode.PULL_NOT_FOUND),
        (GetMessageStatus.OFFSET_OVERFLOW_ONE, 9, ResponseCode.PULL_NOT_FOUND),
        (GetMessageStatus.OFFSET_FOUND_NULL, 9, ResponseCode.PULL_NOT_FOUND),
        (GetMessageStatus.OFFSET_OVERFLOW_BADLY, 99, ResponseCode.PULL_OFFSET_MOVED),
        (GetMessageStatus.OFFSET_TOO_SMALL, 0, ResponseCode.PULL_OFFSET_MOVED),
    ],
)
def test_pull_response_code(status: GetMessageStatus, offset: int, code: ResponseCode) -> None:
    assert pull_response_code(status, offset) is code


def test_every_put_status_has_a_code() -> None:
    for status in PutMessageStatus:
        code, remark = send_response_code(PutMessageResult(status, remark="why"))
        if status is PutMessageStatus.PUT_OK:
            assert code is ResponseCode.SUCCESS and remark is None
        else:
            assert code is not ResponseCode.SUCCESS and remark and "why" in remark
    assert send_response_code(PutMessageResult(PutMessageStatus.FLUSH_DISK_TIMEOUT))[0] == 10


def manager(auto: bool = True) -> TopicConfigManager:
    return TopicConfigManager(
        cluster_name="C", broker_name="b", auto_create_topic_enable=auto, default_topic_queue_nums=8
    )


def test_auto_create_through_tbw102() -> None:
    topics = manager()
    assert topics.get("TBW102") is not None and topics.get("TBW102").perm & PERM_INHERIT  # type: ignore[union-attr]
    created = topics.create_in_send("New", "TBW102", 4)
    assert created is not None and created.write_queue_nums == 4
    assert not created.perm & PERM_INHERIT
    assert topics.create_in_send("Big", "TBW102", 64).write_queue_nums == 8  # type: ignore[union-attr]
    # a template that does not allow inheriting, or auto-creation disabled
    assert topics.create_in_send("X", "SELF_TEST_TOPIC", 4) is None
    assert manager(auto=False).create_in_send("New", "TBW102", 4) is None
    assert manager(auto=False).get("TBW102") is None


def test_topic_config_snapshot_roundtrip() -> None:
    topics = manager()
    topics.create_in_send("Kept", "TBW102", 2)
    again = manager()
    again.restore(topics.snapshot())
    assert again.get("Kept") == topics.get("Kept")
    assert again.data_version == topics.data_version
    with pytest.raises(ValueError, match=r"topics\.json"):
        again.restore(b"{broken")


def test_topic_names() -> None:
    assert check_topic_name("Good_Topic-1%|") is None
    assert "illegal" in (check_topic_name("a b") or "")
    assert "longer" in (check_topic_name("x" * 128) or "")
    assert "empty" in (check_topic_name("") or "")


def test_consumer_offsets_roundtrip() -> None:
    offsets = ConsumerOffsetManager()
    assert offsets.query_offset("g", "t", 0) == -1
    offsets.commit_offset("g", "t", 0, 10)
    offsets.commit_offset("g2", "t", 1, 3)
    again = ConsumerOffsetManager()
    again.restore(offsets.snapshot())
    assert again.query_offset("g", "t", 0) == 10
    assert again.groups_of_topic("t") == {"g", "g2"} and again.topics_of_group("g") == {"t"}
    again.remove_topic("t")
    assert again.query_offset("g", "t", 0) == -1


def test_broker_conf_feeds_both_models(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "brokerClusterName = DefaultCluster\n"
        "brokerName=broker-x\nbrokerId=0\nlistenPort=10999\nbrokerIP1=10.1.2.3\n"
        "storePathRootDir=/data/store\nflushDiskType=SYNC_FLUSH\nmappedFileSizeCommitLog=1048576\n"
        "autoCreateTopicEnable=false\ndeleteWhen=04\nsomeFutureKey=1\n"
    )
    parsed = load_broker_conf(conf, env={"NAMESRV_ADDR": "a:9876;b:9876"})
    broker, store = parsed.broker, parsed.store
    assert (broker.broker_name, broker.listen_port, broker.broker_ip1) == (
        "broker-x",
        10999,
        "10.1.2.3",
    )
    assert broker.namesrv_addrs == ["a:9876", "b:9876"] and not broker.auto_create_topic_enable
    assert store.flush_disk_type is FlushDiskType.SYNC_FLUSH
    assert store.mapped_file_size_commit_log == 1048576
    assert str(store.store_path_root_dir) == "/data/store"
    # the environment overrides the file
    broker2 = load_broker_conf(conf, env={"FERRYMQ_brokerName": "broker-y"}).broker
    assert broker2.broker_name == "broker-y"


def test_broker_conf_accepts_the_pre_4_5_maped_spelling(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("mapedFileSizeCommitLog=65536\nmapedFileSizeConsumeQueue=6000\n")
    store = load_broker_conf(conf, env={}).store
    assert store.mapped_file_size_commit_log == 65536
    assert store.mapped_file_size_consume_queue == 6000
    conf.write_text("mapedFileSizeCommitLog=12\n")
    with pytest.raises(ConfigError, match=r"mapp?edFileSizeCommitLog"):
        load_broker_conf(conf, env={})


def test_bad_broker_conf_names_the_key(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("listenPort=ninety\n")
    with pytest.raises(ConfigError, match="listenPort"):
        load_broker_conf(conf, env={})
    conf.write_text("namesrvAddr=nohostport\n")
    with pytest.raises(ConfigError, match="namesrvAddr"):
        load_broker_conf(conf, env={})
    conf.write_text("flushDiskType=SOMETIMES\n")
    with pytest.raises(ConfigError, match="flushDiskType"):
        load_broker_conf(conf, env={})
    with pytest.raises(ConfigError, match="no such"):
        load_broker_conf(tmp_path / "missing.conf", env={})
    assert BrokerConfig(broker_ip1="h", listen_port=1).broker_addr == "h:1"


async def test_hold_service_wakes_only_matching_pulls() -> None:
    hold = PullRequestHoldService()
    tag_a = build_message_filter("TAG", "A", enable_property_filter=False)
    waiting_a = asyncio.ensure_future(hold.hold("t", 0, 5, 10, tag_a))
    waiting_any = asyncio.ensure_future(hold.hold("t", 0, 5, 10, None))
    waiting_other_queue = asyncio.ensure_future(hold.hold("t", 1, 5, 0.2, None))
    while hold.held_count < 3:
        await asyncio.sleep(0)
    # a message below the waiting offset wakes nobody; one with tag B wakes only the "*" pull
    assert hold.notify_message_arriving("t", 0, 5, tags_string_to_tags_code("A")) == 0
    assert hold.notify_message_arriving("t", 0, 6, tags_string_to_tags_code("B")) == 1
    assert await waiting_any is True
    assert not waiting_a.done()
    assert hold.notify_message_arriving("t", 0, 7, tags_string_to_tags_code("A")) == 1
    assert await waiting_a is True
    assert await waiting_other_queue is False  # timed out
    assert hold.held_count == 0
    hold.wake_all()
    assert await hold.hold("t", 0, 0, 10) is False  # closed: no new waits


def test_silent_clients_expire_after_channel_expired_timeout() -> None:
    from ferrymq.broker.client_registry import ClientChannelInfo, ConsumerManager, ProducerManager
    from ferrymq.remoting.bodies import ConsumeFromWhere, ConsumeType, MessageModel

    consumers = ConsumerManager(channel_expired_ms=120_000)
    producers = ProducerManager(channel_expired_ms=120_000)
    # channels are opaque to the tables; plain objects stand for two connections
    old_conn, new_conn = object(), object()
    for conn, cid, ts in ((old_conn, "old", 0), (new_conn, "new", 100_000)):
        info = ClientChannelInfo(conn, cid, "JAVA", 399, ts)
        consumers.register_consumer(
            "G",
            info,
            ConsumeType.CONSUME_PASSIVELY,
            MessageModel.CLUSTERING,
            ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
            [],
            notify=False,
        )
        producers.register_producer("P", info)
    assert consumers.scan_not_active(120_000) == []
    assert consumers.scan_not_active(120_001) == ["old"]
    assert consumers.get("G").client_ids() == ["new"]  # type: ignore[union-attr]
    assert producers.scan_not_active(120_001) == ["old"]
    assert consumers.scan_not_active(300_000) == ["new"] and consumers.get("G") is None


@pytest.mark.parametrize(
    ("status", "code"),
    [
        # behind its master: held like a pull at the queue's end, the offset kept
        (GetMessageStatus.OFFSET_OVERFLOW_BADLY, ResponseCode.PULL_NOT_FOUND),
        (GetMessageStatus.NO_MESSAGE_IN_QUEUE, ResponseCode.PULL_NOT_FOUND),
        (GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, ResponseCode.PULL_NOT_FOUND),
        (GetMessageStatus.OFFSET_TOO_SMALL, ResponseCode.PULL_RETRY_IMMEDIATELY),
        (GetMessageStatus.OFFSET_OVERFLOW_ONE, ResponseCode.PULL_NOT_FOUND),
        (GetMessageStatus.FOUND, ResponseCode.SUCCESS),
    ],
)
def test_a_slave_never_moves_a_consumer_offset(
    status: GetMessageStatus, code: ResponseCode
) -> None:
    assert pull_response_code(status, 744, offset_check=False) is code
