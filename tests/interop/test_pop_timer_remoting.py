"""Differential: the same raw remoting requests to Apache RocketMQ 5.4.0 and to ferrymq give the same
codes (and the remarks clients show): topic ``message.type`` attributes (MIXED refused, a FIFO
message to a NORMAL topic stored, as the broker leaves type checks to the 5.x proxy),
GET_TOPIC_CONFIG, POP and ack bad input, timer-message refusals, recall when disabled."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from raw_remoting import create_topic, create_topic_ext, send_message

from .reference import Target


@pytest.fixture
async def client() -> AsyncIterator[RemotingClient]:
    c = RemotingClient()
    yield c
    await c.close()


async def call(
    client: RemotingClient, addr: str, code: int, ext: dict[str, Any], body: bytes | None = None
) -> RemotingCommand:
    return await client.invoke(addr, RemotingCommand.request(code, ext, body), 10)


async def test_message_type_attributes_and_topic_config(
    target: Target, client: RemotingClient
) -> None:
    addr = target.broker_addrs[0]
    for topic, kind in (("MtNormal", "NORMAL"), ("MtFifo", "FIFO"), ("MtMixed", "MIXED")):
        r = await create_topic(client, addr, topic, attributes=f"+message.type={kind}")
        if kind != "MIXED":
            assert r.code == ResponseCode.SUCCESS, r.remark
    assert (r.code, r.remark) == (
        ResponseCode.INVALID_PARAMETER,
        "MIXED message type is not supported.",
    )

    r = await call(client, addr, RequestCode.GET_TOPIC_CONFIG, {"topic": "MtFifo", "lo": True})
    assert r.code == ResponseCode.SUCCESS, r.remark
    config = orjson.loads(r.body_bytes())
    assert config["topicName"] == "MtFifo" and config["readQueueNums"] == 1
    attrs = {k.lstrip("+"): v for k, v in config["attributes"].items()}
    assert attrs == {"message.type": "FIFO"}
    r = await call(client, addr, RequestCode.GET_TOPIC_CONFIG, {"topic": "MtNoSuch"})
    assert (r.code, r.remark) == (
        ResponseCode.TOPIC_NOT_EXIST,
        "No topic in this broker. topic: MtNoSuch",
    )

    # the broker stores any type on any topic: the type check is the 5.x proxy's
    fifo_to_normal = await send_message(client, addr, "MtNormal", __SHARDINGKEY="g1")
    assert fifo_to_normal.code == ResponseCode.SUCCESS
    normal_to_fifo = await send_message(client, addr, "MtFifo")
    assert normal_to_fifo.code == ResponseCode.SUCCESS


async def test_pop_and_ack_bad_input(target: Target, client: RemotingClient) -> None:
    addr = target.broker_addrs[0]
    r = await call(client, addr, RequestCode.UPDATE_AND_CREATE_TOPIC, create_topic_ext("PopBadIn"))
    assert r.code == ResponseCode.SUCCESS
    pop = {
        "consumerGroup": "bad_cg",
        "topic": "PopBadIn",
        "queueId": -1,
        "maxMsgNums": 33,
        "invisibleTime": 10000,
        "pollTime": 0,
        "bornTime": int(time.time() * 1000),
        "initMode": 0,
    }
    r = await call(client, addr, RequestCode.POP_MESSAGE, pop)
    assert r.code == ResponseCode.INVALID_PARAMETER
    assert r.remark is not None and r.remark.endswith("pop message's num is greater than 32")
    r = await call(
        client, addr, RequestCode.POP_MESSAGE, {**pop, "maxMsgNums": 1, "topic": "PopNoSuch"}
    )
    assert r.code == ResponseCode.TOPIC_NOT_EXIST
    r = await call(client, addr, RequestCode.POP_MESSAGE, {**pop, "maxMsgNums": 1, "queueId": 3})
    assert r.code == ResponseCode.INVALID_PARAMETER
    assert r.remark is not None and r.remark.startswith("queueId[3] is illegal, topic:[PopBadIn]")
    # nothing to pop and no poll time: POLLING_TIMEOUT with the header the Java client decodes
    r = await call(client, addr, RequestCode.POP_MESSAGE, {**pop, "maxMsgNums": 1})
    assert r.code == ResponseCode.POLLING_TIMEOUT
    assert {"popTime", "invisibleTime", "reviveQid", "restNum"} <= set(r.ext_fields)
    ack = {
        "consumerGroup": "bad_cg",
        "topic": "PopBadIn",
        "queueId": 0,
        "offset": 0,
        "extraInfo": "0 1000 1000 0 0 broker-a 0 0",
    }
    r = await call(client, addr, RequestCode.ACK_MESSAGE, {**ack, "queueId": 5})
    assert r.code == ResponseCode.MESSAGE_ILLEGAL
    r = await call(client, addr, RequestCode.ACK_MESSAGE, {**ack, "topic": "PopNoSuch"})
    assert r.code == ResponseCode.TOPIC_NOT_EXIST
    r = await call(client, addr, RequestCode.ACK_MESSAGE, {**ack, "extraInfo": "forged-handle"})
    assert r.code == ResponseCode.SYSTEM_ERROR
    # a well-formed handle of an expired pop: the broker acks it (the proxy judges handles)
    r = await call(client, addr, RequestCode.ACK_MESSAGE, ack)
    assert r.code == ResponseCode.SUCCESS
    r = await call(
        client,
        addr,
        RequestCode.CHANGE_MESSAGE_INVISIBLETIME,
        {**ack, "invisibleTime": 1000, "offset": 5},
    )
    assert r.code == ResponseCode.NO_MESSAGE


async def test_timer_refusals_and_recall_disabled(target: Target, client: RemotingClient) -> None:
    addr = target.broker_addrs[0]
    r = await call(client, addr, RequestCode.UPDATE_AND_CREATE_TOPIC, create_topic_ext("TimerBad"))
    assert r.code == ResponseCode.SUCCESS
    too_far = await send_message(client, addr, "TimerBad", TIMER_DELAY_SEC=str(4 * 24 * 3600))
    assert too_far.code == ResponseCode.MESSAGE_ILLEGAL
    assert too_far.remark is not None
    assert too_far.remark.startswith("timer message illegal, the delay time should not be bigger")
    garbage = await send_message(client, addr, "TimerBad", TIMER_DELIVER_MS="soon")
    assert garbage.code == ResponseCode.MESSAGE_ILLEGAL
    ok = await send_message(client, addr, "TimerBad", TIMER_DELAY_SEC="30", UNIQ_KEY="REC1")
    assert ok.code == ResponseCode.SUCCESS
    handle = ok.ext_fields.get("recallHandle")
    assert handle
    r = await call(
        client, addr, RequestCode.RECALL_MESSAGE, {"topic": "TimerBad", "recallHandle": handle}
    )
    assert (r.code, r.remark) == (
        ResponseCode.NO_PERMISSION,
        "recall failed, operation is forbidden",
    )
