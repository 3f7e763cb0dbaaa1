"""GET_MIN_OFFSET / GET_MAX_OFFSET for queues without messages, over a real socket.

Upstream (DefaultMessageStore.getMinOffsetInQueue via findConsumeQueue, which creates the queue on
demand) answers 0 for an existing-but-empty queue and for a queue the store has never seen.
"""

from __future__ import annotations

from ferrymq.broker.app import BrokerApp
from ferrymq.broker.processors.queue_offsets import reported_min_offset
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.headers import CreateTopicRequestHeader


async def offset_of(client: RemotingClient, addr: str, code: int, topic: str, qid: int) -> str:
    resp = await client.invoke(
        addr, RemotingCommand.request(code, {"topic": topic, "queueId": qid})
    )
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    return resp.ext_fields["offset"]


async def test_min_offset_of_empty_and_missing_queues_is_zero(
    broker: BrokerApp, client: RemotingClient
) -> None:
    header = CreateTopicRequestHeader(topic="EmptyT", read_queue_nums=2, write_queue_nums=2)
    resp = await client.invoke(
        broker.addr,
        RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, header.to_ext()),
    )
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    for topic, qid in (("EmptyT", 0), ("EmptyT", 1), ("NeverSeenT", 0), ("EmptyT", 7)):
        assert await offset_of(client, broker.addr, RequestCode.GET_MIN_OFFSET, topic, qid) == "0"
        assert await offset_of(client, broker.addr, RequestCode.GET_MAX_OFFSET, topic, qid) == "0"


def test_reported_min_offset_keeps_real_offsets() -> None:
    assert reported_min_offset(-1) == 0
    assert reported_min_offset(0) == 0
    assert reported_min_offset(300_000) == 300_000
