"""POP over remoting against a live broker: pop, ack, batch ack, change invisible time, revive
with rising reconsume times, orderly pops, long polling, bad input, and in-flight state across a
restart. The client side is ``ferrymq.client.pop_api``, which builds receipt handles from the
response headers exactly as Java's MQClientAPIImpl.processPopResponse does."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from broker_helpers import broker_configs
from ferrymq.broker.app import BrokerApp
from ferrymq.broker.pop import extra_info as xi
from ferrymq.client.pop_api import PopApi, PopStatus
from ferrymq.message import MessageConst
from ferrymq.namesrv.app import NamesrvApp
from ferrymq.remoting.bodies import TopicConfig
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from raw_remoting import heartbeat_consumer, send_message

GROUP = "pop_cg"


@contextlib.asynccontextmanager
async def running_broker(root: Path, namesrv_addr: str, port: int = 0) -> AsyncIterator[BrokerApp]:
    """A broker on ``root`` (started again on the same store and ``port`` for a restart)."""
    cfg, store_cfg = broker_configs(root, namesrv_addr)
    cfg.listen_port = port
    app = BrokerApp(cfg, store_cfg)
    await app.start()
    try:
        yield app
    finally:
        await app.stop()


async def send(
    client: RemotingClient, addr: str, topic: str, body: bytes, queue_id: int = 0, **props: str
) -> RemotingCommand:
    return await send_message(
        client, addr, topic, body, queue_id=queue_id, check=True, **{"TAGS": "TagA", **props}
    )


def make_topic(app: BrokerApp, topic: str, queues: int = 2) -> None:
    app.topics.update(
        TopicConfig(topic_name=topic, read_queue_nums=queues, write_queue_nums=queues)
    )


async def wait_dispatched(app: BrokerApp, topic: str, queue_id: int, count: int) -> None:
    assert app.store is not None
    for _ in range(500):
        if app.store.get_max_offset_in_queue(topic, queue_id) >= count:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{topic}/{queue_id} never reached {count} messages")


async def pop_until(api: PopApi, app: BrokerApp, want: int, **kw: object) -> list:  # type: ignore[type-arg]
    """Pop (long polling 1 s per call) until ``want`` messages came or 20 s passed."""
    got: list = []  # type: ignore[type-arg]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 20
    while len(got) < want and loop.time() < deadline:
        result = await api.pop(app.addr, app.config.broker_name, poll_time_ms=1000, **kw)  # type: ignore[arg-type]
        got.extend(result.messages)
    return got


async def test_pop_ack_and_receipt_handles(broker: BrokerApp, client: RemotingClient) -> None:
    topic = "PopT1"
    make_topic(broker, topic)
    for i in range(3):
        await send(client, broker.addr, topic, f"m{i}".encode(), queue_id=0)
    await wait_dispatched(broker, topic, 0, 3)
    api = PopApi(client)
    result = await api.pop(
        broker.addr, "broker-a", group=GROUP, topic=topic, invisible_time_ms=60_000, init_mode=0
    )
    assert result.status is PopStatus.FOUND
    assert [m.body for m in result.messages] == [b"m0", b"m1", b"m2"]
    for m in result.messages:
        info = xi.parse_extra_info(m.properties[MessageConst.PROPERTY_POP_CK])
        # startOffset popTime invisibleTime reviveQid topicType brokerName queueId queueOffset
        assert (info.start_offset, info.invisible_time, info.topic_type) == (0, 60_000, "0")
        assert (info.broker_name, info.queue_id, info.queue_offset) == (
            "broker-a",
            0,
            m.queue_offset,
        )
        assert info.pop_time == result.pop_time
        assert m.properties[MessageConst.PROPERTY_FIRST_POP_TIME] == str(result.pop_time)
    # popped messages are invisible: the next pop finds nothing (and answers POLLING_TIMEOUT)
    again = await api.pop(broker.addr, "broker-a", group=GROUP, topic=topic, init_mode=0)
    assert again.status is PopStatus.POLLING_NOT_FOUND
    handles = [m.properties[MessageConst.PROPERTY_POP_CK] for m in result.messages]
    assert await api.ack(broker.addr, GROUP, topic, handles[0])
    assert await api.batch_ack(broker.addr, GROUP, topic, handles[1:])
    rocket5 = broker.rocket5
    assert rocket5 is not None
    assert len(rocket5.pop.inflight) == 0  # every message of the checkpoint acked


async def test_unacked_message_comes_back_from_retry_topic(
    broker: BrokerApp, client: RemotingClient
) -> None:
    topic = "PopT2"
    make_topic(broker, topic, queues=1)
    await send(client, broker.addr, topic, b"again", TAGS="TagR", KEYS="k1")
    await wait_dispatched(broker, topic, 0, 1)
    api = PopApi(client)
    first = await pop_until(api, broker, 1, group=GROUP, topic=topic, invisible_time_ms=1000)
    assert [m.reconsume_times for m in first] == [0]
    # not acked: after its invisible time it is popped again, from the POP retry topic, under
    # the original topic, with reconsumeTimes 1, then 2
    for attempt in (1, 2):
        again = await pop_until(api, broker, 1, group=GROUP, topic=topic, invisible_time_ms=1000)
        assert len(again) == 1
        msg = again[0]
        assert (msg.body, msg.topic, msg.reconsume_times) == (b"again", topic, attempt)
        assert msg.properties[MessageConst.PROPERTY_TAGS] == "TagR"
        info = xi.parse_extra_info(msg.properties[MessageConst.PROPERTY_POP_CK])
        assert info.topic_type == "1"  # read from %RETRY%<group>_<topic>
        assert msg.properties[MessageConst.PROPERTY_FIRST_POP_TIME] == str(
            xi.parse_extra_info(first[0].properties[MessageConst.PROPERTY_POP_CK]).pop_time
        )
    assert await api.ack(broker.addr, GROUP, topic, msg.properties[MessageConst.PROPERTY_POP_CK])
    none = await api.pop(broker.addr, "broker-a", group=GROUP, topic=topic, poll_time_ms=2500)
    assert none.messages == []


async def test_change_invisible_time_gives_a_new_handle(
    broker: BrokerApp, client: RemotingClient
) -> None:
    topic = "PopT3"
    make_topic(broker, topic, queues=1)
    await send(client, broker.addr, topic, b"cit")
    await wait_dispatched(broker, topic, 0, 1)
    api = PopApi(client)
    [msg] = await pop_until(api, broker, 1, group=GROUP, topic=topic, invisible_time_ms=1000)
    old = msg.properties[MessageConst.PROPERTY_POP_CK]
    new = await api.change_invisible_time(broker.addr, GROUP, topic, old, 60_000)
    info = xi.parse_extra_info(new)
    assert new != old and info.invisible_time == 60_000 and info.queue_offset == 0
    # the old handle's invisible time passes: no redelivery (the old checkpoint was acked)
    none = await api.pop(broker.addr, "broker-a", group=GROUP, topic=topic, poll_time_ms=2500)
    assert none.messages == []
    assert await api.ack(broker.addr, GROUP, topic, new)
    rocket5 = broker.rocket5
    assert rocket5 is not None and len(rocket5.pop.inflight) == 0


async def test_orderly_pop_blocks_the_queue_while_its_head_is_invisible(
    broker: BrokerApp, client: RemotingClient
) -> None:
    topic = "PopFifo"
    make_topic(broker, topic, queues=1)
    for i in range(3):
        await send(client, broker.addr, topic, f"o{i}".encode())
    await wait_dispatched(broker, topic, 0, 3)
    api = PopApi(client)
    kw = {"group": "fifo_cg", "topic": topic, "order": True, "max_msg_nums": 1}
    [head] = await pop_until(api, broker, 1, invisible_time_ms=1500, **kw)
    assert head.body == b"o0" and head.reconsume_times == 0
    assert xi.parse_extra_info(head.properties[MessageConst.PROPERTY_POP_CK]).revive_qid == 999
    blocked = await api.pop(broker.addr, "broker-a", invisible_time_ms=1500, **kw)  # type: ignore[arg-type]
    assert blocked.messages == []
    # invisible time over: the same head again, reconsumeTimes 1 (from orderCountInfo)
    [again] = await pop_until(api, broker, 1, invisible_time_ms=60_000, **kw)
    assert (again.body, again.reconsume_times) == (b"o0", 1)
    assert await api.ack(
        broker.addr, "fifo_cg", topic, again.properties[MessageConst.PROPERTY_POP_CK]
    )
    [nxt] = await pop_until(api, broker, 1, invisible_time_ms=60_000, **kw)
    assert (nxt.body, nxt.reconsume_times) == (b"o1", 0)


async def test_long_polling_pop_wakes_on_arrival(broker: BrokerApp, client: RemotingClient) -> None:
    topic = "PopPoll"
    make_topic(broker, topic, queues=1)
    api = PopApi(client)
    waiting = asyncio.create_task(
        api.pop(broker.addr, "broker-a", group=GROUP, topic=topic, poll_time_ms=15_000, init_mode=0)
    )
    # let the pop reach the broker and park before the message exists
    rocket5 = broker.rocket5
    assert rocket5 is not None
    for _ in range(500):
        if rocket5.pop._waiters:
            break
        await asyncio.sleep(0.01)
    assert rocket5.pop._waiters, "the pop never parked"
    await send(client, broker.addr, topic, b"late")
    result = await waiting
    assert [m.body for m in result.messages] == [b"late"]


async def test_bad_pop_and_ack_requests(broker: BrokerApp, client: RemotingClient) -> None:
    make_topic(broker, "PopBad", queues=1)
    api = PopApi(client)

    async def raw(code: int, ext: dict[str, object]) -> RemotingCommand:
        return await client.invoke(broker.addr, RemotingCommand.request(code, ext))

    base = {
        "consumerGroup": GROUP,
        "topic": "PopBad",
        "queueId": -1,
        "invisibleTime": 1000,
        "pollTime": 0,
        "bornTime": 0,
        "initMode": 0,
    }
    r = await raw(RequestCode.POP_MESSAGE, {**base, "maxMsgNums": 33})
    assert r.code == ResponseCode.INVALID_PARAMETER
    assert "greater than 32" in (r.remark or "")
    r = await raw(RequestCode.POP_MESSAGE, {**base, "maxMsgNums": 1, "topic": "NoSuchTopic"})
    assert r.code == ResponseCode.TOPIC_NOT_EXIST
    r = await raw(RequestCode.POP_MESSAGE, {**base, "maxMsgNums": 1, "queueId": 5})
    assert r.code == ResponseCode.INVALID_PARAMETER
    r = await raw(RequestCode.POP_MESSAGE, {"topic": "PopBad"})
    assert r.code == ResponseCode.SYSTEM_ERROR
    ack = {"consumerGroup": GROUP, "topic": "PopBad", "queueId": 0, "offset": 0}
    r = await raw(RequestCode.ACK_MESSAGE, {**ack, "extraInfo": "forged-handle"})
    assert r.code == ResponseCode.SYSTEM_ERROR and "Parse failed" in (r.remark or "")
    r = await raw(
        RequestCode.ACK_MESSAGE, {**ack, "queueId": 7, "extraInfo": "0 1 1 0 0 broker-a 0 0"}
    )
    assert r.code == ResponseCode.MESSAGE_ILLEGAL
    r = await raw(
        RequestCode.CHANGE_MESSAGE_INVISIBLETIME,
        {**ack, "invisibleTime": 1, "extraInfo": "0 1 1 0 0 broker-a 0 0"},
    )
    assert r.code == ResponseCode.NO_MESSAGE  # offset 0 of an empty queue
    r = await client.invoke(
        broker.addr, RemotingCommand.request(RequestCode.BATCH_ACK_MESSAGE, None, b"[1,2")
    )
    assert r.code == ResponseCode.SYSTEM_ERROR
    assert (await api.pop(broker.addr, "broker-a", group=GROUP, topic="PopBad")).messages == []


async def test_in_flight_state_survives_a_restart(
    tmp_path: Path, namesrv: NamesrvApp, client: RemotingClient
) -> None:
    """Popped, some acked, broker restarted: the acked ones never come back, the unacked ones
    come back after their invisible time (from the replayed revive topic), none is lost."""
    topic = "PopRestart"
    api = PopApi(client)
    async with running_broker(tmp_path / "b", namesrv.addr) as app:
        make_topic(app, topic, queues=1)
        for i in range(6):
            await send(client, app.addr, topic, f"r{i}".encode())
        await wait_dispatched(app, topic, 0, 6)
        popped = await pop_until(api, app, 6, group=GROUP, topic=topic, invisible_time_ms=4000)
        assert len(popped) == 6
        for m in popped[:3]:
            assert await api.ack(app.addr, GROUP, topic, m.properties[MessageConst.PROPERTY_POP_CK])
        port = app.port
    async with running_broker(tmp_path / "b", namesrv.addr, port) as app2:
        assert app2.rocket5 is not None
        assert len(app2.rocket5.pop.inflight) == 1  # the checkpoint, with three bits set
        back = await pop_until(api, app2, 3, group=GROUP, topic=topic, invisible_time_ms=60_000)
        assert sorted(m.body for m in back) == [b"r3", b"r4", b"r5"]
        assert all(m.reconsume_times == 1 for m in back)
        none = await api.pop(app2.addr, "broker-a", group=GROUP, topic=topic, poll_time_ms=1500)
        assert none.messages == []


@pytest.mark.parametrize("mode", ["POP", "PULL"])
async def test_set_mode_and_query_assignment(
    broker: BrokerApp, client: RemotingClient, mode: str
) -> None:
    topic = "PopAssign"
    make_topic(broker, topic, queues=4)
    api = PopApi(client)
    await api.set_message_request_mode(broker.addr, topic=topic, group=GROUP, mode=mode)
    assert await api.query_assignment(broker.addr, topic=topic, group=GROUP, client_id="c1") is None
    await heartbeat_consumer(client, broker.addr, "c1", GROUP, topic)
    got = await api.query_assignment(broker.addr, topic=topic, group=GROUP, client_id="c1")
    assert got is not None
    queue_ids = sorted(a["messageQueue"]["queueId"] for a in got)
    assert {a["mode"] for a in got} == {mode}
    # POP with popShareQueueNum 0: every broker with queue -1; PULL: the client's share
    assert queue_ids == ([-1] if mode == "POP" else [0, 1, 2, 3])
    with pytest.raises(Exception, match="retry topic is not allowed"):
        await api.set_message_request_mode(broker.addr, topic="%RETRY%x", group=GROUP, mode="POP")


async def test_demote_then_promote_rebuilds_in_flight_state(
    broker: BrokerApp, client: RemotingClient
) -> None:
    """What controller mode does on a role change (role_switch): services stop on demotion and
    replay the revive topic on promotion; a pop in between is refused."""
    topic = "PopRole"
    make_topic(broker, topic, queues=1)
    for i in range(3):
        await send(client, broker.addr, topic, f"p{i}".encode())
    await wait_dispatched(broker, topic, 0, 3)
    api = PopApi(client)
    popped = await pop_until(api, broker, 3, group=GROUP, topic=topic, invisible_time_ms=3000)
    assert await api.ack(
        broker.addr, GROUP, topic, popped[0].properties[MessageConst.PROPERTY_POP_CK]
    )
    rocket5 = broker.rocket5
    assert rocket5 is not None
    await rocket5.shutdown()
    with pytest.raises(Exception, match="not a master"):
        await api.pop(broker.addr, "broker-a", group=GROUP, topic=topic)
    await rocket5.promote()
    assert len(rocket5.pop.inflight) == 1
    back = await pop_until(api, broker, 2, group=GROUP, topic=topic, invisible_time_ms=60_000)
    assert sorted((m.body, m.reconsume_times) for m in back) == [(b"p1", 1), (b"p2", 1)]


async def test_forward_to_dlq_as_the_proxy_does(broker: BrokerApp, client: RemotingClient) -> None:
    """The 5.x proxy's ForwardMessageToDeadLetterQueue (and its DLQ after max attempts):
    CONSUMER_SEND_MSG_BACK with the handle's commitLogOffset and delayLevel -1, then an ack."""
    topic = "PopDlq"
    make_topic(broker, topic, queues=1)
    await send(client, broker.addr, topic, b"dead")
    await wait_dispatched(broker, topic, 0, 1)
    api = PopApi(client)
    [first] = await pop_until(api, broker, 1, group=GROUP, topic=topic, invisible_time_ms=1000)
    # let it come back once from the retry topic, so the forwarded copy is a retried one
    [msg] = await pop_until(api, broker, 1, group=GROUP, topic=topic, invisible_time_ms=60_000)
    assert msg.reconsume_times == 1
    ext = {
        "offset": msg.commit_log_offset,
        "group": GROUP,
        "delayLevel": -1,
        "originMsgId": msg.msg_id,
        "originTopic": topic,
        "maxReconsumeTimes": 0,
    }
    r = await client.invoke(
        broker.addr, RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK, ext)
    )
    assert r.code == ResponseCode.SUCCESS, r.remark
    assert await api.ack(broker.addr, GROUP, topic, msg.properties[MessageConst.PROPERTY_POP_CK])
    dlq = f"%DLQ%{GROUP}"
    await wait_dispatched(broker, dlq, 0, 1)
    assert broker.store is not None
    result = broker.store.get_message("t", dlq, 0, 0, 1)
    try:
        from ferrymq.store.record import decode_messages

        [dead] = decode_messages(result.body())
    finally:
        result.release()
    assert dead.body == b"dead" and dead.reconsume_times == 2
    none = await api.pop(broker.addr, "broker-a", group=GROUP, topic=topic, poll_time_ms=2000)
    assert none.messages == [] and first.body == b"dead"


async def test_orderly_state_survives_a_restart(
    tmp_path: Path, namesrv: NamesrvApp, client: RemotingClient
) -> None:
    topic = "PopFifoRestart"
    kw = {"group": "fifo_r_cg", "topic": topic, "order": True, "max_msg_nums": 1}
    api = PopApi(client)
    async with running_broker(tmp_path / "o", namesrv.addr) as app:
        make_topic(app, topic, queues=1)
        for i in range(2):
            await send(client, app.addr, topic, f"f{i}".encode())
        await wait_dispatched(app, topic, 0, 2)
        [head] = await pop_until(api, app, 1, invisible_time_ms=4000, **kw)
        assert head.body == b"f0"
        port = app.port
    async with running_broker(tmp_path / "o", namesrv.addr, port) as app2:
        # still invisible after the restart: the queue stays blocked, then the head comes back
        # with reconsumeTimes 1 (the saved count), and nothing was skipped
        blocked = await api.pop(app2.addr, "broker-a", invisible_time_ms=60_000, **kw)  # type: ignore[arg-type]
        assert blocked.messages == []
        [again] = await pop_until(api, app2, 1, invisible_time_ms=60_000, **kw)
        assert (again.body, again.reconsume_times) == (b"f0", 1)


async def test_first_pop_from_last_starts_at_zero_while_message_zero_is_in_memory(
    broker: BrokerApp, client: RemotingClient
) -> None:
    """Upstream getInitOffset with initPopOffsetByCheckMsgInMem (default true): a new group that
    pops CONSUME_FROM_LAST a queue still beginning at 0 gets message 0 onwards, not only the last
    (ferrymq began at max-1: a 5.x FIFO consumer started after its producer lost 9 of 10)."""
    topic = "PopInitLast"
    make_topic(broker, topic, queues=1)
    for i in range(4):
        await send(client, broker.addr, topic, f"m{i}".encode(), queue_id=0)
    await wait_dispatched(broker, topic, 0, 4)
    api = PopApi(client)
    result = await api.pop(
        broker.addr, "broker-a", group="pop_init_last", topic=topic, max_msg_nums=32, init_mode=1
    )
    assert [m.body for m in result.messages] == [b"m0", b"m1", b"m2", b"m3"]
