"""Admin and query codes against a live broker (raw remoting client, real store in tmp_path)."""

from __future__ import annotations

import asyncio

import orjson
from ferrymq.broker.app import BrokerApp
from ferrymq.message import decode_message_id
from ferrymq.namesrv.app import NamesrvApp
from ferrymq.remoting import fastjson
from ferrymq.remoting.bodies import (
    ConsumerConnection,
    ConsumerOffsetSerializeWrapper,
    ConsumeStats,
    HeartbeatData,
    KVTable,
    MessageQueue,
    SubscriptionGroupConfig,
    SubscriptionGroupWrapper,
    TopicConfigSerializeWrapper,
    TopicStatsTable,
)
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.headers import CreateTopicRequestHeader
from ferrymq.remoting.processor import ProcessorTable
from ferrymq.store.record import decode_messages
from test_send_pull import pull_all, send_request


async def call(
    client: RemotingClient,
    addr: str,
    code: int,
    ext: dict[str, object] | None = None,
    body: bytes | None = None,
) -> RemotingCommand:
    return await client.invoke(addr, RemotingCommand.request(code, ext, body))


async def wait_route(
    client: RemotingClient, namesrv: NamesrvApp, topic: str, present: bool
) -> RemotingCommand:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 5
    while True:
        resp = await call(
            client, namesrv.addr, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}
        )
        if (resp.code == ResponseCode.SUCCESS) == present:
            return resp
        assert loop.time() < deadline, f"route of {topic} present={not present} after 5 s"
        await asyncio.sleep(0.02)


def persisted_topics(broker: BrokerApp) -> dict[str, object]:
    table = TopicConfigSerializeWrapper.decode(broker.topics_file.path.read_bytes())
    return dict(table.topic_config_table)


async def test_create_list_delete_topic(
    broker: BrokerApp, namesrv: NamesrvApp, client: RemotingClient
) -> None:
    header = CreateTopicRequestHeader(topic="AdminT", read_queue_nums=3, write_queue_nums=3)
    resp = await call(client, broker.addr, RequestCode.UPDATE_AND_CREATE_TOPIC, header.to_ext())
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    # answered once topics.json holds it, as upstream: a broker SIGKILLed right after the
    # SUCCESS kept the topic on Apache and lost it on ferrymq (tests/interop, found at load 14)
    assert "AdminT" in persisted_topics(broker)
    route = await wait_route(client, namesrv, "AdminT", True)
    assert orjson.loads(route.body_bytes())["queueDatas"][0]["writeQueueNums"] == 3

    resp = await call(client, broker.addr, RequestCode.GET_ALL_TOPIC_CONFIG)
    table = TopicConfigSerializeWrapper.decode(resp.body_bytes()).topic_config_table
    assert table["AdminT"].read_queue_nums == 3 and "TBW102" in table

    for bad, reason in (
        (CreateTopicRequestHeader(topic="bad/name"), "illegal"),
        (CreateTopicRequestHeader(topic="TBW102"), "reserved"),
        (CreateTopicRequestHeader(topic="Q", read_queue_nums=0), "QueueNums"),
    ):
        resp = await call(client, broker.addr, RequestCode.UPDATE_AND_CREATE_TOPIC, bad.to_ext())
        assert resp.code == ResponseCode.SYSTEM_ERROR and reason in (resp.remark or ""), resp.remark

    resp = await call(client, broker.addr, RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "AdminT"})
    assert resp.code == ResponseCode.SUCCESS
    assert "AdminT" not in persisted_topics(broker)
    await wait_route(client, namesrv, "AdminT", False)
    resp = await call(client, broker.addr, RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "TBW102"})
    assert resp.code == ResponseCode.SYSTEM_ERROR


async def test_broker_config_update_and_runtime_info(
    broker: BrokerApp, client: RemotingClient
) -> None:
    resp = await call(client, broker.addr, RequestCode.GET_BROKER_CONFIG)
    text = resp.body_bytes().decode()
    assert "brokerName=broker-a" in text and "flushDiskType=ASYNC_FLUSH" in text
    assert "version" in resp.ext_fields

    ok = await call(
        client, broker.addr, RequestCode.UPDATE_BROKER_CONFIG, None, b"defaultTopicQueueNums=5\n"
    )
    assert ok.code == ResponseCode.SUCCESS and broker.config.default_topic_queue_nums == 5
    bad = await call(
        client, broker.addr, RequestCode.UPDATE_BROKER_CONFIG, None, b"defaultTopicQueueNums=zero\n"
    )
    assert bad.code == ResponseCode.SYSTEM_ERROR and "defaultTopicQueueNums" in (bad.remark or "")
    black = await call(
        client, broker.addr, RequestCode.UPDATE_BROKER_CONFIG, None, b"brokerConfigPath=/x\n"
    )
    assert black.code == ResponseCode.NO_PERMISSION
    assert black.remark == "Can not update config in black list."
    # as upstream: an unknown key is ignored, a key needing a restart is taken (persisted)
    for body in (b"noSuchKey=1\n", b"listenPort=1\n"):
        resp = await call(client, broker.addr, RequestCode.UPDATE_BROKER_CONFIG, None, body)
        assert resp.code == ResponseCode.SUCCESS, resp.remark
    assert broker.config.default_topic_queue_nums == 5 and broker.config.listen_port != 1
    # a store setting applied at once: the running flusher takes it
    resp = await call(
        client, broker.addr, RequestCode.UPDATE_BROKER_CONFIG, None, b"flushIntervalCommitLog=650\n"
    )
    assert resp.code == ResponseCode.SUCCESS
    assert broker.store_config.flush_interval_commit_log == 650
    flusher = broker.store._flush_commit_log if broker.store else None
    assert flusher is not None and flusher.interval_ms == 650
    text = (await call(client, broker.addr, RequestCode.GET_BROKER_CONFIG)).body_bytes().decode()
    assert "flushIntervalCommitLog=650" in text and "sendMessageThreadPoolNums=" in text

    resp = await call(client, broker.addr, RequestCode.GET_BROKER_RUNTIME_INFO)
    table = KVTable.decode(resp.body_bytes()).table
    assert table["brokerVersionDesc"] and "msgPutTotalTodayNow" in table
    # what mqadmin clusterList reads: LOAD columns, PCWait and ACTIVATED
    assert table["brokerActive"] == "true" and table["pageCacheLockTimeMills"] == "0"
    assert table["sendThreadPoolQueueCapacity"] == "10000"
    assert table["putMessageDistributeTime"].startswith("[<=0ms]:")
    assert all(isinstance(v, str) for v in table.values())


async def test_wipe_and_add_write_perm(
    broker: BrokerApp, namesrv: NamesrvApp, client: RemotingClient
) -> None:
    assert (await client.invoke(broker.addr, send_request("PermT", b"a"))).code == 0
    resp = await call(
        client, broker.addr, RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"}
    )
    assert resp.code == ResponseCode.SUCCESS and resp.ext_fields["wipeTopicCount"] == "1"
    refused = await client.invoke(broker.addr, send_request("PermT", b"b"))
    assert refused.code == ResponseCode.NO_PERMISSION
    # the NameServer learns the read-only permission at the re-registration
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 5
    while True:
        route = await wait_route(client, namesrv, "PermT", True)
        if orjson.loads(route.body_bytes())["queueDatas"][0]["perm"] == 4:
            break
        assert loop.time() < deadline
        await asyncio.sleep(0.02)
    # reading still works
    pulled, _ = await pull_all(client, broker.addr, "PermT", 0, 1)
    assert pulled.code == ResponseCode.SUCCESS
    resp = await call(
        client, broker.addr, RequestCode.ADD_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"}
    )
    assert resp.code == ResponseCode.SUCCESS
    assert (await client.invoke(broker.addr, send_request("PermT", b"c"))).code == 0


async def test_queue_offsets_query_and_view(broker: BrokerApp, client: RemotingClient) -> None:
    ids = []
    for i in range(4):
        resp = await client.invoke(broker.addr, send_request("OffT", b"o%d" % i, 0, keys=f"K{i}"))
        ids.append(resp.ext_fields["msgId"])
    q = {"topic": "OffT", "queueId": 0}
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 5
    # the send is acknowledged once in the CommitLog; the ConsumeQueue follows by dispatch
    while (await call(client, broker.addr, RequestCode.GET_MAX_OFFSET, q)).ext_fields != {
        "offset": "4"
    }:
        assert loop.time() < deadline, "max offset did not reach 4"
        await asyncio.sleep(0.01)
    assert (await call(client, broker.addr, RequestCode.GET_MIN_OFFSET, q)).ext_fields == {
        "offset": "0"
    }
    earliest = await call(client, broker.addr, RequestCode.GET_EARLIEST_MSG_STORETIME, q)
    ts = int(earliest.ext_fields["timestamp"])
    assert ts > 0
    found = await call(
        client, broker.addr, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, {**q, "timestamp": ts}
    )
    assert found.ext_fields["offset"] == "0"
    later = await call(
        client, broker.addr, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, {**q, "timestamp": ts + 10**9}
    )
    assert later.ext_fields["offset"] == "4"

    loop = asyncio.get_running_loop()
    deadline = loop.time() + 5
    while True:
        resp = await call(
            client,
            broker.addr,
            RequestCode.QUERY_MESSAGE,
            {
                "topic": "OffT",
                "key": "K2",
                "maxNum": 32,
                "beginTimestamp": 0,
                "endTimestamp": 2**62,
            },
        )
        if resp.code == ResponseCode.SUCCESS:
            break
        assert loop.time() < deadline, resp.remark
        await asyncio.sleep(0.02)
    assert [m.body for m in decode_messages(resp.body_bytes())] == [b"o2"]
    assert "indexLastUpdateTimestamp" in resp.ext_fields

    _, _, phy = decode_message_id(ids[3])
    view = await call(client, broker.addr, RequestCode.VIEW_MESSAGE_BY_ID, {"offset": phy})
    assert [m.body for m in decode_messages(view.body_bytes())] == [b"o3"]
    missing = await call(client, broker.addr, RequestCode.VIEW_MESSAGE_BY_ID, {"offset": 10**12})
    assert missing.code == ResponseCode.SYSTEM_ERROR
    nothing = await call(
        client,
        broker.addr,
        RequestCode.QUERY_MESSAGE,
        {"topic": "OffT", "key": "nope", "maxNum": 32},
    )
    assert nothing.code == ResponseCode.QUERY_NOT_FOUND


async def test_consumer_admin(broker: BrokerApp, client: RemotingClient) -> None:
    resp = await call(
        client, broker.addr, RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "AG"}
    )
    assert resp.code == ResponseCode.CONSUMER_NOT_ONLINE

    for i in range(5):
        await client.invoke(broker.addr, send_request("StatT", b"s%d" % i, 1))
    hb = HeartbeatData.from_json_obj(
        {
            "clientID": "admin-c1",
            "consumerDataSet": [
                {
                    "groupName": "AG",
                    "consumeType": "CONSUME_PASSIVELY",
                    "messageModel": "CLUSTERING",
                    "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                    "subscriptionDataSet": [{"topic": "StatT", "subString": "*"}],
                }
            ],
        }
    )
    await call(client, broker.addr, RequestCode.HEART_BEAT, None, hb.encode())
    await call(
        client,
        broker.addr,
        RequestCode.UPDATE_CONSUMER_OFFSET,
        {"consumerGroup": "AG", "topic": "StatT", "queueId": 1, "commitOffset": 2},
    )

    conn = await call(
        client, broker.addr, RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "AG"}
    )
    body = ConsumerConnection.decode(conn.body_bytes())
    assert [c.client_id for c in body.connection_set] == ["admin-c1"]
    assert set(body.subscription_table) == {"StatT"}

    stats_resp = await call(
        client, broker.addr, RequestCode.GET_CONSUME_STATS, {"consumerGroup": "AG"}
    )
    raw = stats_resp.body_bytes()
    assert b'{"brokerName":"broker-a","queueId":1,"topic":"StatT"}:' in raw  # fastjson keys
    stats = ConsumeStats.decode(raw)
    wrapper = stats.offset_table[MessageQueue(topic="StatT", broker_name="broker-a", queue_id=1)]
    assert (wrapper.broker_offset, wrapper.consumer_offset) == (5, 2)
    assert wrapper.last_timestamp > 0 and stats.compute_total_diff() == 3

    offsets = await call(client, broker.addr, RequestCode.GET_ALL_CONSUMER_OFFSET)
    table = ConsumerOffsetSerializeWrapper.decode(offsets.body_bytes()).offset_table
    assert table["StatT@AG"] == {1: 2}

    topic_stats = await call(
        client, broker.addr, RequestCode.GET_TOPIC_STATS_INFO, {"topic": "StatT"}
    )
    parsed = TopicStatsTable.decode(topic_stats.body_bytes())
    assert (
        parsed.offset_table[
            MessageQueue(topic="StatT", broker_name="broker-a", queue_id=1)
        ].max_offset
        == 5
    )
    assert isinstance(fastjson.loads(topic_stats.body_bytes()), dict)

    group = SubscriptionGroupConfig(group_name="NewGroup", retry_max_times=3)
    assert (
        await call(
            client,
            broker.addr,
            RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
            None,
            group.encode(),
        )
    ).code == ResponseCode.SUCCESS
    groups = await call(client, broker.addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
    table2 = SubscriptionGroupWrapper.decode(groups.body_bytes()).subscription_group_table
    assert table2["NewGroup"].retry_max_times == 3
    assert (
        await call(
            client, broker.addr, RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": "NewGroup"}
        )
    ).code == ResponseCode.SUCCESS
    bad = await call(
        client,
        broker.addr,
        RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
        None,
        b'{"retryMaxTimes": 3}',
    )
    assert bad.code == ResponseCode.SYSTEM_ERROR and "groupName" in (bad.remark or "")

    who = await call(
        client, broker.addr, RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": "StatT"}
    )
    assert orjson.loads(who.body_bytes())["groupList"] == ["AG"]


async def test_metadata_survives_restart(broker: BrokerApp, client: RemotingClient) -> None:
    header = CreateTopicRequestHeader(topic="Durable", read_queue_nums=2, write_queue_nums=2)
    await call(client, broker.addr, RequestCode.UPDATE_AND_CREATE_TOPIC, header.to_ext())
    await call(
        client,
        broker.addr,
        RequestCode.UPDATE_CONSUMER_OFFSET,
        {"consumerGroup": "DG", "topic": "Durable", "queueId": 1, "commitOffset": 9},
    )
    await broker.stop()
    # the same settled HA settings (any free HA port): listenPort is now the port the first run
    # got, and its + 1 default may belong to another socket
    again = BrokerApp(broker.config, broker.store_config, ha_settings=broker.ha_settings)
    await again.start()
    try:
        assert again.topics.get("Durable") is not None
        assert again.offsets.query_offset("DG", "Durable", 1) == 9
        assert not broker.store_config.abort_path.exists() or again.store is not None
    finally:
        await again.stop()


async def test_consumer_running_info_is_relayed_to_the_client(
    broker: BrokerApp, client: RemotingClient
) -> None:
    """GET_CONSUMER_RUNNING_INFO goes to the named client over its own connection (callConsumer)."""
    asked: list[RemotingCommand] = []

    def answer(channel: object, request: RemotingCommand) -> RemotingCommand:
        asked.append(request)
        return request.response(ResponseCode.SUCCESS, None, None, b'{"properties":{"x":"1"}}')

    consumer_side = ProcessorTable()
    consumer_side.register(RequestCode.GET_CONSUMER_RUNNING_INFO, answer)  # type: ignore[arg-type]
    consumer = RemotingClient(consumer_side)
    try:
        hb = HeartbeatData.from_json_obj(
            {
                "clientID": "relay-c1",
                "consumerDataSet": [
                    {
                        "groupName": "RG",
                        "consumeType": "CONSUME_PASSIVELY",
                        "messageModel": "CLUSTERING",
                        "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                        "subscriptionDataSet": [{"topic": "RelayT", "subString": "*"}],
                    }
                ],
            }
        )
        await call(consumer, broker.addr, RequestCode.HEART_BEAT, None, hb.encode())
        ext = {"consumerGroup": "RG", "clientId": "relay-c1", "jstackEnable": "false"}
        resp = await client.invoke(
            broker.addr, RemotingCommand.request(RequestCode.GET_CONSUMER_RUNNING_INFO, ext), 5
        )
        assert resp.code == ResponseCode.SUCCESS
        assert fastjson.loads(resp.body_bytes()) == {"properties": {"x": "1"}}
        assert [r.ext_fields["clientId"] for r in asked] == ["relay-c1"]

        ext["clientId"] = "nobody"
        missing = await client.invoke(
            broker.addr, RemotingCommand.request(RequestCode.GET_CONSUMER_RUNNING_INFO, ext), 5
        )
        assert missing.code == ResponseCode.SYSTEM_ERROR
        assert missing.remark and "nobody" in missing.remark and "not online" in missing.remark
    finally:
        await consumer.close()
