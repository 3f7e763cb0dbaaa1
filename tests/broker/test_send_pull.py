"""Send, pull and long polling against a live broker, through the raw remoting client."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import cast

import orjson
from ferrymq.broker.app import BrokerApp
from ferrymq.message import Message, MessageConst, encode_batch, encode_properties
from ferrymq.remoting.bodies import HeartbeatData, TopicRouteData
from ferrymq.remoting.channel import Channel
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.headers import (
    PULL_FLAG_SUBSCRIPTION,
    PULL_FLAG_SUSPEND,
    PullMessageRequestHeader,
    SendMessageRequestHeader,
)
from ferrymq.store.record import decode_messages


def send_request(
    topic: str,
    body: bytes,
    queue_id: int = 0,
    tags: str = "TagA",
    keys: str = "k1",
    v2: bool = True,
) -> RemotingCommand:
    header = SendMessageRequestHeader(
        producer_group="pg",
        topic=topic,
        queue_id=queue_id,
        born_timestamp=1,
        properties=encode_properties({"TAGS": tags, "KEYS": keys, "WAIT": "true"}),
    )
    if v2:
        return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, header.to_ext_v2(), body)
    return RemotingCommand.request(RequestCode.SEND_MESSAGE, header.to_ext(), body)


def pull_request(
    topic: str, queue_id: int, offset: int, sub: str = "*", suspend_ms: int = 0
) -> RemotingCommand:
    flag = PULL_FLAG_SUBSCRIPTION | (PULL_FLAG_SUSPEND if suspend_ms else 0)
    header = PullMessageRequestHeader(
        consumer_group="cg",
        topic=topic,
        queue_id=queue_id,
        queue_offset=offset,
        max_msg_nums=32,
        sys_flag=flag,
        suspend_timeout_millis=suspend_ms,
        subscription=sub,
    )
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, header.to_ext())


async def pull_all(
    client: RemotingClient, addr: str, topic: str, queue_id: int, count: int
) -> tuple[RemotingCommand, list[bytes]]:
    """Pull from offset 0 until ``count`` messages are dispatched (sends are acked before dispatch)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 5
    while True:
        resp = await client.invoke(addr, pull_request(topic, queue_id, 0, suspend_ms=1000))
        bodies = [m.body for m in decode_messages(resp.body_bytes())] if resp.code == 0 else []
        if len(bodies) >= count:
            return resp, bodies
        assert loop.time() < deadline, f"only {len(bodies)} of {count} messages dispatched"
        await asyncio.sleep(0.01)


async def test_send_auto_creates_topic_and_pull_returns_records(
    broker: BrokerApp, client: RemotingClient
) -> None:
    resp = await client.invoke(broker.addr, send_request("T1", b"hello", 0))
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    assert resp.ext_fields["queueId"] == "0" and resp.ext_fields["queueOffset"] == "0"
    assert len(resp.ext_fields["msgId"]) == 32
    # upstream's preSend: the Go client's SendResult.RegionID and TraceOn come from these alone
    assert resp.ext_fields["MSG_REGION"] == "DefaultRegion"
    assert resp.ext_fields["TRACE_ON"] == "true"
    resp = await client.invoke(broker.addr, send_request("T1", b"world", 0, v2=False))
    assert resp.code == ResponseCode.SUCCESS and resp.ext_fields["queueOffset"] == "1"

    pulled, _ = await pull_all(client, broker.addr, "T1", 0, 2)
    assert {k: pulled.ext_fields[k] for k in ("nextBeginOffset", "minOffset", "maxOffset")} == {
        "nextBeginOffset": "2",
        "minOffset": "0",
        "maxOffset": "2",
    }
    messages = decode_messages(pulled.body_bytes())
    assert [m.body for m in messages] == [b"hello", b"world"]
    assert messages[0].tags == "TagA" and messages[0].keys == ["k1"]
    assert messages[0].store_host == ("127.0.0.1", broker.port)

    # tag filter: no match -> retry immediately with the offset advanced
    filtered = await client.invoke(broker.addr, pull_request("T1", 0, 0, sub="TagB"))
    assert filtered.code in (ResponseCode.PULL_RETRY_IMMEDIATELY, ResponseCode.PULL_NOT_FOUND)
    assert filtered.ext_fields["nextBeginOffset"] == "2"

    # the NameServer learned the auto-created topic
    deadline = asyncio.get_running_loop().time() + 5
    while True:
        route = await client.invoke(
            broker.config.namesrv_addrs[0],
            RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T1"}),
        )
        if route.code == ResponseCode.SUCCESS:
            break
        assert asyncio.get_running_loop().time() < deadline, route.remark
        await asyncio.sleep(0.02)
    data = TopicRouteData.decode(route.body_bytes())
    assert data.broker_datas[0].broker_addrs == {0: broker.addr}


async def test_long_poll_wakes_on_arrival(broker: BrokerApp, client: RemotingClient) -> None:
    assert (await client.invoke(broker.addr, send_request("LP", b"first"))).code == 0
    await pull_all(client, broker.addr, "LP", 0, 1)
    loop = asyncio.get_running_loop()
    held = asyncio.ensure_future(
        client.invoke(broker.addr, pull_request("LP", 0, 1, suspend_ms=10_000), timeout=15)
    )
    deadline = loop.time() + 5
    while broker.hold.held_count == 0:
        assert loop.time() < deadline, "pull was not held"
        await asyncio.sleep(0.005)
    sent_at = loop.time()
    other = RemotingClient()
    try:
        assert (await other.invoke(broker.addr, send_request("LP", b"second"))).code == 0
    finally:
        await other.close()
    resp = await held
    elapsed = loop.time() - sent_at
    assert resp.code == ResponseCode.SUCCESS
    assert [m.body for m in decode_messages(resp.body_bytes())] == [b"second"]
    assert elapsed < 2.0  # woken by dispatch, not by the 5 s re-check or the 10 s timeout


async def test_long_poll_wakes_on_a_columnar_batch(
    broker: BrokerApp, client: RemotingClient
) -> None:
    """A batch of same-shaped messages is dispatched as one columnar run; its arrival still
    wakes a pull held on its queue (filtered by tag)."""
    assert (await client.invoke(broker.addr, send_request("LPB", b"first", queue_id=1))).code == 0
    await pull_all(client, broker.addr, "LPB", 1, 1)
    loop = asyncio.get_running_loop()
    held = asyncio.ensure_future(
        client.invoke(broker.addr, pull_request("LPB", 1, 1, "TagB", suspend_ms=10_000), timeout=15)
    )
    deadline = loop.time() + 5
    while broker.hold.held_count == 0:
        assert loop.time() < deadline, "pull was not held"
        await asyncio.sleep(0.005)
    uniq = MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX
    body = encode_batch(
        [
            Message("LPB", b"m%03d" % i, properties={"TAGS": "TagB", uniq: f"{i:032d}"})
            for i in range(40)
        ]
    )
    header = SendMessageRequestHeader(producer_group="pg", topic="LPB", queue_id=1, batch=True)
    sent_at = loop.time()
    other = RemotingClient()
    try:
        resp = await other.invoke(
            broker.addr,
            RemotingCommand.request(RequestCode.SEND_BATCH_MESSAGE, header.to_ext_v2(), body),
        )
        assert resp.code == ResponseCode.SUCCESS, resp.remark
    finally:
        await other.close()
    resp = await held
    elapsed = loop.time() - sent_at
    assert resp.code == ResponseCode.SUCCESS
    assert [m.body for m in decode_messages(resp.body_bytes())] == [b"m%03d" % i for i in range(32)]
    assert elapsed < 2.0  # woken by dispatch, not by the 5 s re-check or the 10 s timeout


async def test_held_pull_times_out_with_not_found(
    broker: BrokerApp, client: RemotingClient
) -> None:
    assert (await client.invoke(broker.addr, send_request("TO", b"x"))).code == 0
    await pull_all(client, broker.addr, "TO", 0, 1)
    resp = await client.invoke(broker.addr, pull_request("TO", 0, 1, suspend_ms=200))
    assert resp.code == ResponseCode.PULL_NOT_FOUND
    assert resp.ext_fields["nextBeginOffset"] == "1" and resp.ext_fields["maxOffset"] == "1"


async def test_send_handler_answers_inline_without_a_durability_wait(broker: BrokerApp) -> None:
    # ASYNC_FLUSH: the handler returns the response itself (no coroutine, no task)
    channel = cast(Channel, SimpleNamespace(attrs={}, remote_addr="127.0.0.1:4000"))
    first = broker.send.handle(channel, send_request("Inline", b"a", 0))
    assert isinstance(first, RemotingCommand) and first.code == ResponseCode.SUCCESS
    assert first.ext_fields["queueOffset"] == "0" and first.is_response
    # bad input is still answered with the reason, and the async entry gives the same answers
    bad = broker.send.handle(channel, RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {}))
    assert isinstance(bad, RemotingCommand) and bad.code == ResponseCode.SYSTEM_ERROR
    again = await broker.send.process(channel, send_request("Inline", b"b", 0))
    assert again is not None and again.ext_fields["queueOffset"] == "1"


async def test_batch_send(broker: BrokerApp, client: RemotingClient) -> None:
    body = encode_batch(
        [Message("B", b"m%d" % i, properties={"KEYS": f"key{i}"}) for i in range(5)]
    )
    header = SendMessageRequestHeader(producer_group="pg", topic="B", queue_id=1, batch=True)
    resp = await client.invoke(
        broker.addr,
        RemotingCommand.request(RequestCode.SEND_BATCH_MESSAGE, header.to_ext_v2(), body),
    )
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    assert len(resp.ext_fields["msgId"].split(",")) == 5
    _, bodies = await pull_all(client, broker.addr, "B", 1, 5)
    assert bodies == [b"m%d" % i for i in range(5)]


async def test_bad_sends_get_clear_errors(broker: BrokerApp, client: RemotingClient) -> None:
    resp = await client.invoke(broker.addr, send_request("bad topic!", b"x"))
    assert resp.code == ResponseCode.MESSAGE_ILLEGAL and "illegal" in (resp.remark or "")
    resp = await client.invoke(broker.addr, send_request("T9", b"x", queue_id=99))
    # upstream's code and remark (found by tests/interop: Apache answers INVALID_PARAMETER)
    assert resp.code == ResponseCode.INVALID_PARAMETER
    assert (resp.remark or "").startswith(
        "request queueId[99] is illegal, TopicConfig [topicName=T9"
    )
    resp = await client.invoke(
        broker.addr, RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {"b": "T9"}, b"x")
    )
    assert resp.code == ResponseCode.SYSTEM_ERROR and "producerGroup" in (resp.remark or "")
    resp = await client.invoke(
        broker.addr,
        RemotingCommand.request(
            RequestCode.PULL_MESSAGE,
            {"consumerGroup": "g", "topic": "T9", "queueId": "x", "queueOffset": "0"},
        ),
    )
    assert resp.code == ResponseCode.SYSTEM_ERROR and "queueId" in (resp.remark or "")
    resp = await client.invoke(broker.addr, pull_request("NOPE", 0, 0))
    assert resp.code == ResponseCode.TOPIC_NOT_EXIST
    assert set(resp.ext_fields) >= {"nextBeginOffset", "minOffset", "maxOffset"}
    resp = await client.invoke(
        broker.addr, RemotingCommand.request(RequestCode.HEART_BEAT, None, b"{]")
    )
    assert resp.code == ResponseCode.SYSTEM_ERROR
    resp = await client.invoke(broker.addr, RemotingCommand.request(9999))
    assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED


async def test_heartbeat_consumer_list_and_offsets(
    broker: BrokerApp, client: RemotingClient
) -> None:
    hb = HeartbeatData.from_json_obj(
        {
            "clientID": "c1",
            "consumerDataSet": [
                {
                    "groupName": "cg",
                    "consumeType": 1,
                    "messageModel": 1,
                    "consumeFromWhere": 4,
                    "subscriptionDataSet": [{"topic": "HB", "subString": "*", "subVersion": 1}],
                }
            ],
        }
    )
    resp = await client.invoke(
        broker.addr, RemotingCommand.request(RequestCode.HEART_BEAT, None, hb.encode())
    )
    assert resp.code == ResponseCode.SUCCESS
    resp = await client.invoke(
        broker.addr,
        RemotingCommand.request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "cg"}),
    )
    assert orjson.loads(resp.body_bytes())["consumerIdList"] == ["c1"]
    # a group that never committed, on an empty queue: QUERY_NOT_FOUND, as upstream (the
    # client applies its ConsumeFromWhere); on a queue holding its message 0 the answer is "0"
    query = RemotingCommand.request(
        RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": "cg", "topic": "HB", "queueId": 0}
    )
    resp = await client.invoke(broker.addr, query)
    assert resp.code == ResponseCode.QUERY_NOT_FOUND
    assert resp.remark == "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first"
    resp = await client.invoke(
        broker.addr,
        RemotingCommand.request(
            RequestCode.UPDATE_CONSUMER_OFFSET,
            {"consumerGroup": "cg", "topic": "HB", "queueId": 0, "commitOffset": 7},
        ),
    )
    assert resp.code == ResponseCode.SUCCESS
    resp = await client.invoke(
        broker.addr,
        query.__class__.request(
            RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": "cg", "topic": "HB", "queueId": 0}
        ),
    )
    assert resp.ext_fields["offset"] == "7"
    # the retry topic of the clustering group exists now
    assert broker.topics.get("%RETRY%cg") is not None
    # the consumer's connection closes: it leaves the group
    await client.close()
    deadline = asyncio.get_running_loop().time() + 5
    while broker.consumers.get("cg") is not None:
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.01)


async def test_lite_pull_message_is_served_as_a_pull(
    broker: BrokerApp, client: RemotingClient
) -> None:
    """LITE_PULL_MESSAGE (361): 5.x DefaultLitePullConsumer's pull (PullSysFlag's lite bit). It
    was "request code 361 not supported", so the 5.4.0 lite pull consumer got nothing."""
    assert (await client.invoke(broker.addr, send_request("LITE", b"lite"))).code == 0
    await pull_all(client, broker.addr, "LITE", 0, 1)
    lite = pull_request("LITE", 0, 0)
    lite.code = RequestCode.LITE_PULL_MESSAGE
    resp = await client.invoke(broker.addr, lite)
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    assert [m.body for m in decode_messages(resp.body_bytes())] == [b"lite"]

    broker.config.lite_pull_message_enable = False
    try:
        lite = pull_request("LITE", 0, 0)
        lite.code = RequestCode.LITE_PULL_MESSAGE
        resp = await client.invoke(broker.addr, lite)
    finally:
        broker.config.lite_pull_message_enable = True
    # upstream's code and remark (PullMessageProcessor, litePullMessageEnable=false)
    assert resp.code == ResponseCode.NO_PERMISSION
    assert (
        resp.remark == f"the broker[{broker.config.broker_ip1}] for lite pull consumer is forbidden"
    )
    # a plain pull is not affected by the switch
    assert (await client.invoke(broker.addr, pull_request("LITE", 0, 0))).code == 0
