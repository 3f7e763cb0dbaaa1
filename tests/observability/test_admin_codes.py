"""The admin codes of issue 18 against a live broker: each answer's JSON fields as upstream's
(field names from upstream's body/header classes), upstream's codes and remarks for bad input,
and reset-offset moving a live push consumer back."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from ferrymq.client import Message, Producer
from ferrymq.client.admin import AdminClient
from ferrymq.remoting import fastjson
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand

from .obs_helpers import Consumer, ObsCluster, produce, wait_for

pytestmark = pytest.mark.timeout(120)

MQ_FIELDS = {"brokerName", "queueId", "topic"}


@pytest.fixture
async def raw() -> AsyncIterator[RemotingClient]:
    client = RemotingClient(name="obs-test")
    try:
        yield client
    finally:
        await client.close()


async def ask(
    raw: RemotingClient, addr: str, code: int, ext: dict[str, Any] | None = None
) -> RemotingCommand:
    return await raw.invoke(addr, RemotingCommand.request(code, ext), 10.0)


def body(response: RemotingCommand) -> Any:
    assert response.code == ResponseCode.SUCCESS, response.remark
    return fastjson.loads(response.body_bytes())


def mq_keys(table: dict[Any, Any]) -> list[dict[str, Any]]:
    """The MessageQueue keys of a fastjson map, as dicts (they are JSON objects on the wire)."""
    out = []
    for key in table:
        as_dict = key.as_dict() if hasattr(key, "as_dict") else key
        assert set(as_dict) == MQ_FIELDS
        out.append(as_dict)
    return out


async def consumed_group(
    cluster: ObsCluster, topic: str, group: str, count: int, gap_after: int = -1
) -> tuple[Consumer, list[float]]:
    """A running consumer that consumed ``count`` messages; the wall time after each send."""
    await cluster.create_topic(topic, queues=2)
    stamps: list[float] = []
    async with Producer(f"{group}-p", cluster.namesrv_addr) as producer:
        for i in range(count):
            await producer.send(Message(topic, f"{topic}-{i}".encode()))
            stamps.append(time.time())
            if i == gap_after:
                # store times on either side of the gap differ (a clock gap, not synchronisation)
                await asyncio.sleep(0.05)
    consumer = Consumer(cluster, group, topic)
    await consumer.start()
    await wait_for(lambda: consumer.count >= count, what=f"{group} consumed {count}")
    return consumer, stamps


async def broker_offsets(admin: AdminClient, group: str, topic: str) -> int:
    stats = await admin.consume_stats(group, topic)
    return sum(w.consumer_offset for w in stats.offset_table.values())


async def test_reset_offset_by_time_moves_a_live_push_consumer_back(
    obs_cluster: ObsCluster, raw: RemotingClient
) -> None:
    topic, group = "ResetT", "reset-g"
    consumer, stamps = await consumed_group(obs_cluster, topic, group, 60, gap_after=39)
    try:
        addr = obs_cluster.broker.addr
        async with AdminClient(obs_cluster.namesrv_addr) as admin:
            await wait_for(lambda: broker_offsets(admin, group, topic), what="offsets committed")
            await wait_for(
                lambda: _eq(broker_offsets(admin, group, topic), 60), what="all 60 committed"
            )
            # back to just after the 40th message: 20 come again
            at_ms = int(stamps[39] * 1000) + 1
            answer = await ask(
                raw,
                addr,
                RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
                {"topic": topic, "group": group, "timestamp": at_ms, "isForce": True},
            )
            table = body(answer)
            assert set(table) == {"offsetTable"}
            keys = mq_keys(table["offsetTable"])
            assert {k["queueId"] for k in keys} == {0, 1}
            assert sum(table["offsetTable"].values()) == 40
            again = 20
            await wait_for(lambda: consumer.count >= 60 + again, what="messages consumed again")
            await wait_for(
                lambda: _eq(broker_offsets(admin, group, topic), 60), what="caught up again"
            )
    finally:
        await consumer.stop()


async def _eq(value: Any, want: int) -> bool:
    return (await value) == want


async def test_reset_offset_bad_input_and_an_offline_group(
    obs_cluster: ObsCluster, raw: RemotingClient
) -> None:
    topic, group = "ResetBadT", "reset-bad-g"
    consumer, _ = await consumed_group(obs_cluster, topic, group, 10)
    addr = obs_cluster.broker.addr
    async with AdminClient(obs_cluster.namesrv_addr) as admin:
        await wait_for(lambda: _eq(broker_offsets(admin, group, topic), 10), what="committed")
        await consumer.stop()
        ext = {"topic": topic, "group": group, "timestamp": 0, "isForce": True}

        unknown_topic = await ask(
            raw, addr, RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, {**ext, "topic": "NoSuchT"}
        )
        # upstream 5.x's server-side reset (useServerSideResetOffset, on by default)
        assert unknown_topic.code == ResponseCode.TOPIC_NOT_EXIST
        assert unknown_topic.remark == "Topic NoSuchT does not exist"
        unknown_group = await ask(
            raw, addr, RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, {**ext, "group": "nobody"}
        )
        assert unknown_group.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
        assert unknown_group.remark == "Group nobody does not exist"

        # an offline group's stored offsets are reset (mqadmin resetOffsetByTime, 5.x)
        offline = await ask(raw, addr, RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, ext)
        assert offline.code == ResponseCode.SUCCESS, offline.remark
        assert await broker_offsets(admin, group, topic) == 0
        end = {**ext, "timestamp": -1}
        assert (await ask(raw, addr, RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, end)).code == 0
        assert await broker_offsets(admin, group, topic) == 10

        # the admin client then commits on the broker itself (mqadmin's old way)
        moved = await admin.reset_offset(group, topic, timestamp=0)
        assert sum(moved.values()) == 0
        assert await broker_offsets(admin, group, topic) == 0

        # a timestamp in the future finds no message at or after it: every queue's max offset
        future = int((time.time() + 3600) * 1000)
        moved = await admin.reset_offset(group, topic, timestamp=future)
        assert sum(moved.values()) == 10
        assert await broker_offsets(admin, group, topic) == 10

        # to an offset on every queue (clamped to each queue's range)
        moved = await admin.reset_offset(group, topic, offset=2)
        assert sorted(moved.values()) == [2, 2]


async def test_consumer_status_relayed_to_the_clients(
    obs_cluster: ObsCluster, raw: RemotingClient
) -> None:
    topic, group = "StatusT", "status-g"
    consumer, _ = await consumed_group(obs_cluster, topic, group, 10)
    addr = obs_cluster.broker.addr
    try:
        answer = body(
            await ask(
                raw,
                addr,
                RequestCode.INVOKE_BROKER_TO_GET_CONSUMER_STATUS,
                {"topic": topic, "group": group},
            )
        )
        assert set(answer) == {"messageQueueTable", "consumerTable"}
        [(client_id, table)] = answer["consumerTable"].items()
        assert client_id == consumer.instance.client_id
        assert len(mq_keys(table)) == 2 and sum(table.values()) == 10
        async with AdminClient(obs_cluster.namesrv_addr) as admin:
            merged = await admin.consumer_status(group, topic)
        assert list(merged) == [client_id]
    finally:
        await consumer.stop()
    gone = await ask(
        raw,
        addr,
        RequestCode.INVOKE_BROKER_TO_GET_CONSUMER_STATUS,
        {"topic": topic, "group": group},
    )
    assert gone.code == ResponseCode.SYSTEM_ERROR
    assert gone.remark == f"No Any Consumer online in the consumer group: [{group}]"


async def test_monitoring_codes_answer_upstream_fields(
    obs_cluster: ObsCluster, raw: RemotingClient
) -> None:
    topic, group = "MonT", "mon-g"
    consumer, _ = await consumed_group(obs_cluster, topic, group, 12)
    addr = obs_cluster.broker.addr
    broker = obs_cluster.broker
    try:
        async with AdminClient(obs_cluster.namesrv_addr) as admin:
            await wait_for(lambda: _eq(broker_offsets(admin, group, topic), 12), what="committed")
            async with Producer("mon-p", obs_cluster.namesrv_addr) as producer:
                await produce(producer, topic, 1)
                # 328 GET_ALL_PRODUCER_INFO while a producer is connected
                producers = body(await ask(raw, addr, RequestCode.GET_ALL_PRODUCER_INFO))
            assert set(producers) == {"data"}
            [info] = producers["data"]["mon-p"]
            assert set(info) == {
                "clientId",
                "remoteIP",
                "language",
                "version",
                "lastUpdateTimestamp",
            }

        # 303 QUERY_CONSUME_TIME_SPAN
        spans = body(
            await ask(
                raw, addr, RequestCode.QUERY_CONSUME_TIME_SPAN, {"topic": topic, "group": group}
            )
        )
        assert set(spans) == {"consumeTimeSpanSet"}
        assert len(spans["consumeTimeSpanSet"]) == 2
        for span in spans["consumeTimeSpanSet"]:
            assert set(span) == {
                "messageQueue",
                "minTimeStamp",
                "maxTimeStamp",
                "consumeTimeStamp",
                "delayTime",
            }
            assert set(span["messageQueue"]) == MQ_FIELDS
            assert span["minTimeStamp"] <= span["consumeTimeStamp"] <= span["maxTimeStamp"]
            assert span["delayTime"] >= 0
        missing = await ask(
            raw, addr, RequestCode.QUERY_CONSUME_TIME_SPAN, {"topic": "NoT", "group": group}
        )
        assert (missing.code, missing.remark) == (
            ResponseCode.TOPIC_NOT_EXIST,
            "topic[NoT] not exist",
        )

        # 305 GET_SYSTEM_TOPIC_LIST_FROM_BROKER
        system = body(await ask(raw, addr, RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_BROKER))
        assert {"TBW102", "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC"} <= set(
            system["topicList"]
        )

        # 306 / 316: success; configured topics keep their queues
        for code in (RequestCode.CLEAN_EXPIRED_CONSUMEQUEUE, RequestCode.CLEAN_UNUSED_TOPIC):
            assert (await ask(raw, addr, code)).code == ResponseCode.SUCCESS
        assert broker.store is not None and broker.store.get_max_offset_in_queue(topic, 0) > 0

        # 314 CLONE_GROUP_OFFSET
        cloned = await ask(
            raw,
            addr,
            RequestCode.CLONE_GROUP_OFFSET,
            {"srcGroup": group, "destGroup": "mon-clone", "topic": topic, "offline": True},
        )
        assert cloned.code == ResponseCode.SUCCESS
        assert broker.offsets.query_group_topic(
            "mon-clone", topic
        ) == broker.offsets.query_group_topic(group, topic)

        # 315 VIEW_BROKER_STATS_DATA
        assert broker.stats_manager is not None
        broker.stats_manager.sample()
        stats = body(
            await ask(
                raw,
                addr,
                RequestCode.VIEW_BROKER_STATS_DATA,
                {"statsName": "TOPIC_PUT_NUMS", "statsKey": topic},
            )
        )
        assert set(stats) == {"statsMinute", "statsHour", "statsDay"}
        for item in stats.values():
            assert set(item) == {"sum", "tps", "avgpt"}
        nope = await ask(
            raw, addr, RequestCode.VIEW_BROKER_STATS_DATA, {"statsName": "X", "statsKey": "Y"}
        )
        assert (nope.code, nope.remark) == (
            ResponseCode.SYSTEM_ERROR,
            "The stats <X> <Y> not exist",
        )

        # 317 GET_BROKER_CONSUME_STATS
        all_stats = body(
            await ask(raw, addr, RequestCode.GET_BROKER_CONSUME_STATS, {"isOrder": False})
        )
        assert set(all_stats) == {
            "consumeStatsList",
            "brokerAddr",
            "totalDiff",
            "totalInflightDiff",
        }
        assert all_stats["brokerAddr"] == addr
        mine = [item[group] for item in all_stats["consumeStatsList"] if group in item]
        [[topic_stats]] = mine
        assert set(topic_stats) == {"offsetTable", "consumeTps"}
        for wrapper in topic_stats["offsetTable"].values():
            # 5.x OffsetWrapper: pullOffset too
            assert set(wrapper) == {"brokerOffset", "consumerOffset", "pullOffset", "lastTimestamp"}
        assert all_stats["totalDiff"] == sum(
            w["brokerOffset"] - w["consumerOffset"]
            for item in all_stats["consumeStatsList"]
            for stats_list in item.values()
            for st in stats_list
            for w in st["offsetTable"].values()
        )

        # 321 QUERY_CONSUME_QUEUE
        cq = body(
            await ask(
                raw,
                addr,
                RequestCode.QUERY_CONSUME_QUEUE,
                {"topic": topic, "queueId": 0, "index": 0, "count": 3, "consumerGroup": group},
            )
        )
        assert {"queueData", "maxQueueIndex", "minQueueIndex", "subscriptionData"} <= set(cq)
        assert len(cq["queueData"]) == 3
        assert {"physicOffset", "physicSize", "tagsCode"} <= set(cq["queueData"][0])
        absent = await ask(
            raw,
            addr,
            RequestCode.QUERY_CONSUME_QUEUE,
            {"topic": topic, "queueId": 9, "index": 0, "count": 1},
        )
        assert (absent.code, absent.remark) == (
            ResponseCode.SYSTEM_ERROR,
            f"9@{topic} is not exist!",
        )

        # 202 GET_TOPIC_STATS_INFO and 300 QUERY_TOPIC_CONSUME_BY_WHO
        tstats = body(await ask(raw, addr, RequestCode.GET_TOPIC_STATS_INFO, {"topic": topic}))
        for offsets in tstats["offsetTable"].values():
            assert set(offsets) == {"minOffset", "maxOffset", "lastUpdateTimestamp"}
        who = body(await ask(raw, addr, RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": topic}))
        assert group in who["groupList"]

        # 307 GET_CONSUMER_RUNNING_INFO relayed to the client
        running = body(
            await ask(
                raw,
                addr,
                RequestCode.GET_CONSUMER_RUNNING_INFO,
                {"consumerGroup": group, "clientId": consumer.instance.client_id},
            )
        )
        assert {"properties", "subscriptionSet", "mqTable", "statusTable"} <= set(running)

        # 309 CONSUME_MESSAGE_DIRECTLY: an unknown client, then a bad msgId
        stranger = await ask(
            raw,
            addr,
            RequestCode.CONSUME_MESSAGE_DIRECTLY,
            {"consumerGroup": group, "clientId": "nobody", "msgId": "00" * 16},
        )
        assert stranger.code == ResponseCode.SYSTEM_ERROR
        bad_id = await ask(
            raw,
            addr,
            RequestCode.CONSUME_MESSAGE_DIRECTLY,
            {"consumerGroup": group, "clientId": "x", "msgId": "zz"},
        )
        assert bad_id.code == ResponseCode.SYSTEM_ERROR and "hexadecimal" in (bad_id.remark or "")
    finally:
        await consumer.stop()


async def test_runtime_info_has_the_keys_tools_parse(
    obs_cluster: ObsCluster, raw: RemotingClient
) -> None:
    await obs_cluster.create_topic("RtT", queues=1)
    async with Producer("rt-p", obs_cluster.namesrv_addr) as producer:
        await produce(producer, "RtT", 5)
    assert obs_cluster.broker.stats_manager is not None
    obs_cluster.broker.stats_manager.sample()
    table = body(await ask(raw, obs_cluster.broker.addr, RequestCode.GET_BROKER_RUNTIME_INFO))[
        "table"
    ]
    for key in ("putTps", "getTransferredTps", "getFoundTps", "getMissTps", "getTotalTps"):
        rates = table[key].split(" ")
        assert len(rates) == 3 and all(float(r) >= 0 for r in rates), (key, table[key])
    assert float(table["putTps"].split(" ")[0]) > 0
    assert int(table["msgPutTotalTodayNow"]) == 5
    for key in (
        "msgGetTotalTodayNow",
        "msgPutTotalTodayMorning",
        "msgPutTotalYesterdayMorning",
        "msgGetTotalTodayMorning",
        "msgGetTotalYesterdayMorning",
        "commitLogDiskRatio",
        "dispatchBehindBytes",
        "brokerVersionDesc",
    ):
        assert key in table


async def test_namesrv_admin_codes(obs_cluster: ObsCluster, raw: RemotingClient) -> None:
    ns = obs_cluster.namesrv_addr
    broker = obs_cluster.broker.addr
    for topic, flag in (("UnitT", 1), ("UnitSubT", 2), ("UnitBothT", 3), ("PlainT", 0)):
        created = await ask(
            raw,
            broker,
            RequestCode.UPDATE_AND_CREATE_TOPIC,
            {
                "topic": topic,
                "readQueueNums": 1,
                "writeQueueNums": 1,
                "perm": 6,
                "topicSysFlag": flag,
            },
        )
        assert created.code == ResponseCode.SUCCESS, created.remark

    async def registered() -> bool:
        listed = body(await ask(raw, ns, RequestCode.GET_UNIT_TOPIC_LIST))
        return "UnitBothT" in listed["topicList"] and "UnitT" in listed["topicList"]

    await wait_for(registered, what="unit topics registered")

    system = body(await ask(raw, ns, RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS))
    assert system["topicList"] == ["ObsCluster", "broker-a"]
    assert system["brokerAddr"] == broker
    unit = body(await ask(raw, ns, RequestCode.GET_UNIT_TOPIC_LIST))["topicList"]
    assert unit == ["UnitBothT", "UnitT"]
    sub = body(await ask(raw, ns, RequestCode.GET_HAS_UNIT_SUB_TOPIC_LIST))["topicList"]
    assert sub == ["UnitBothT", "UnitSubT"]
    sub_only = body(await ask(raw, ns, RequestCode.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST))
    assert sub_only["topicList"] == ["UnitSubT"]

    # 319 / 318
    text = (await ask(raw, ns, RequestCode.GET_NAMESRV_CONFIG)).body_bytes().decode()
    assert "scanNotActiveBrokerInterval=10000" in text
    update = RemotingCommand.request(
        RequestCode.UPDATE_NAMESRV_CONFIG, None, b"scanNotActiveBrokerInterval=5000\n"
    )
    assert (await raw.invoke(ns, update, 5.0)).code == ResponseCode.SUCCESS
    text = (await ask(raw, ns, RequestCode.GET_NAMESRV_CONFIG)).body_bytes().decode()
    assert "scanNotActiveBrokerInterval=5000" in text
    assert obs_cluster.namesrv.housekeeping.interval_ms == 5000
    black = RemotingCommand.request(
        RequestCode.UPDATE_NAMESRV_CONFIG, None, b"kvConfigPath=/tmp/x\n"
    )
    refused = await raw.invoke(ns, black, 5.0)
    assert (refused.code, refused.remark) == (
        ResponseCode.NO_PERMISSION,
        "Can not update config in black list.",
    )
    bad = RemotingCommand.request(
        RequestCode.UPDATE_NAMESRV_CONFIG, None, b"scanNotActiveBrokerInterval=soon\n"
    )
    answer = await raw.invoke(ns, bad, 5.0)
    assert answer.code == ResponseCode.SYSTEM_ERROR and "scanNotActiveBrokerInterval" in (
        answer.remark or ""
    )
    # as upstream: a key nobody knows is ignored; an upstream-only key is kept and reported
    unknown = RemotingCommand.request(
        RequestCode.UPDATE_NAMESRV_CONFIG, None, b"noSuchKey=1\nserverWorkerThreads=3\n"
    )
    answer = await raw.invoke(ns, unknown, 5.0)
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    text = (await ask(raw, ns, RequestCode.GET_NAMESRV_CONFIG)).body_bytes().decode()
    assert "serverWorkerThreads=3" in text and "noSuchKey" not in text
    assert "clientRequestThreadPoolNums=" in text and "kvConfigPath=" in text


async def test_consume_message_directly_runs_the_listener_once(
    obs_cluster: ObsCluster, raw: RemotingClient
) -> None:
    topic, group = "DirectT", "direct-g"
    consumer, _ = await consumed_group(obs_cluster, topic, group, 3)
    try:
        async with Producer("direct-p", obs_cluster.namesrv_addr) as producer:
            sent = await producer.send(Message(topic, b"again"))
        await wait_for(lambda: consumer.count >= 4, what="consumed normally")
        answer = body(
            await ask(
                raw,
                obs_cluster.broker.addr,
                RequestCode.CONSUME_MESSAGE_DIRECTLY,
                {
                    "consumerGroup": group,
                    "clientId": consumer.instance.client_id,
                    "msgId": sent.offset_msg_id,
                },
            )
        )
        assert set(answer) == {"order", "autoCommit", "consumeResult", "remark", "spentTimeMills"}
        assert answer["consumeResult"] == "CR_SUCCESS"
        assert consumer.count == 5  # the listener saw it once more
    finally:
        await consumer.stop()
