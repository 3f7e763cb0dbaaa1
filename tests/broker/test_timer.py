"""Timer messages over remoting (TIMER_DELIVER_MS / TIMER_DELAY_SEC / TIMER_DELAY_MS): the rewrite
on put (pure), delivery of 1,000 messages with random delays, recall, the 18 delay levels beside
them, bad input, and the lateness distribution (printed; not asserted: no timed assertions)."""

from __future__ import annotations

import asyncio
import random
import time

import pytest
from broker_helpers import broker_configs
from ferrymq.broker.app import BrokerApp
from ferrymq.broker.timer.timer_message import (
    TIMER_TOPIC,
    RecallHandleError,
    TimerRewrite,
    decode_recall_handle,
    encode_recall_handle,
    illegal_remark,
)
from ferrymq.client.pop_api import PopApi
from ferrymq.message import MessageInner
from ferrymq.remoting.bodies import TopicConfig
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import ResponseCode
from ferrymq.store.record import decode_messages
from ferrymq.store.results import PutMessageResult, PutMessageStatus
from raw_remoting import send_message as send

NOW = 1_700_000_000_000


def msg(**props: str) -> MessageInner:
    return MessageInner.create("T", 3, b"x", {"UNIQ_KEY": "AB12", **props})


def test_rewrite_moves_a_future_message_to_the_timer_topic() -> None:
    rewrite = TimerRewrite(broker_name="broker-a")
    out = rewrite.rewrite(msg(TIMER_DELAY_MS="1500"), NOW)
    assert not isinstance(out, PutMessageResult)
    stored, handle = out
    assert (stored.topic, stored.queue_id) == (TIMER_TOPIC, 0)
    props = stored.properties
    assert props["TIMER_OUT_MS"] == str(NOW + 1500)
    assert (props["REAL_TOPIC"], props["REAL_QID"]) == ("T", "3")
    assert handle is not None
    decoded = decode_recall_handle(handle)
    assert (decoded.topic, decoded.broker_name, decoded.message_id) == ("T", "broker-a", "AB12")
    assert decoded.timestamp == str(NOW + 1500 + 1)  # TIMER_OUT_MS + 1, as upstream
    # seconds, and an absolute time
    sec = rewrite.rewrite(msg(TIMER_DELAY_SEC="3"), NOW)
    assert not isinstance(sec, PutMessageResult)
    assert sec[0].properties["TIMER_OUT_MS"] == str(NOW + 3000)
    at = rewrite.rewrite(msg(TIMER_DELIVER_MS=str(NOW + 42)), NOW)
    assert not isinstance(at, PutMessageResult)
    assert at[0].properties["TIMER_OUT_MS"] == str(NOW + 42)


def test_rewrite_upstream_rounding_with_one_second_precision() -> None:
    rewrite = TimerRewrite(broker_name="b", precision_ms=1000)
    out = rewrite.rewrite(msg(TIMER_DELIVER_MS=str(NOW + 2500)), NOW)
    assert not isinstance(out, PutMessageResult)
    assert out[0].properties["TIMER_OUT_MS"] == str(NOW + 2000)
    exact = rewrite.rewrite(msg(TIMER_DELIVER_MS=str(NOW + 3000)), NOW)
    assert not isinstance(exact, PutMessageResult)
    assert exact[0].properties["TIMER_OUT_MS"] == str(NOW + 2000)  # upstream's "- precision"


def test_rewrite_refusals_and_pass_throughs() -> None:
    rewrite = TimerRewrite(broker_name="b", max_delay_sec=10)
    too_far = rewrite.rewrite(msg(TIMER_DELAY_SEC="11"), NOW)
    assert isinstance(too_far, PutMessageResult)
    assert too_far.status is PutMessageStatus.WHEEL_TIMER_MSG_ILLEGAL
    assert too_far.remark == illegal_remark(10)
    assert "max delay 10000ms" in too_far.remark
    bad = rewrite.rewrite(msg(TIMER_DELAY_MS="soon"), NOW)
    assert isinstance(bad, PutMessageResult)
    # due already: stays in its topic; a DELAY level wins and drops the timer properties
    past = rewrite.rewrite(msg(TIMER_DELIVER_MS=str(NOW - 5)), NOW)
    assert not isinstance(past, PutMessageResult) and past[0].topic == "T"
    level = rewrite.rewrite(msg(DELAY="3", TIMER_DELAY_MS="1000"), NOW)
    assert not isinstance(level, PutMessageResult)
    assert "TIMER_DELAY_MS" not in level[0].properties and level[0].topic == "T"
    off = TimerRewrite(broker_name="b", enabled=False).rewrite(msg(TIMER_DELAY_MS="5"), NOW)
    assert isinstance(off, PutMessageResult)
    assert off.status is PutMessageStatus.WHEEL_TIMER_NOT_ENABLE


def test_recall_handle_codec() -> None:
    handle = encode_recall_handle("T", "broker-a", "123", "ID")
    assert decode_recall_handle(handle).timestamp == "123"
    for bad in ("", "!!notbase64", encode_recall_handle("T", "b", "1", "x").replace("djE", "djI")):
        with pytest.raises(RecallHandleError):
            decode_recall_handle(bad)


# --- over remoting ----------------------------------------------------------------------------


def delivered(app: BrokerApp, topic: str) -> list:  # type: ignore[type-arg]
    assert app.store is not None
    out = []
    offset = 0
    while True:
        result = app.store.get_message("t", topic, 0, offset, 256)
        try:
            if not result.messages:
                return out
            out.extend(decode_messages(result.body()))
            offset = result.next_begin_offset
        finally:
            result.release()


async def wait_count(app: BrokerApp, topic: str, count: int, timeout_s: float) -> None:
    assert app.store is not None
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while app.store.get_max_offset_in_queue(topic, 0) < count:
        assert loop.time() < deadline, (
            f"{app.store.get_max_offset_in_queue(topic, 0)} of {count} delivered"
        )
        await asyncio.sleep(0.05)


def lateness_report(messages: list) -> str:  # type: ignore[type-arg]
    late = sorted(m.store_timestamp - int(m.properties["TIMER_OUT_MS"]) for m in messages)
    pick = lambda q: late[min(len(late) - 1, int(q * len(late)))]  # noqa: E731
    return (
        f"timer lateness over {len(late)} messages (ms past due, stored in the real topic): "
        f"min {late[0]} p50 {pick(0.5)} p90 {pick(0.9)} p99 {pick(0.99)} max {late[-1]}"
    )


async def run_random_delays(
    app: BrokerApp, client: RemotingClient, count: int, low_ms: int, high_ms: int
) -> list:  # type: ignore[type-arg]
    topic = f"TimerRand{count}"
    app.topics.update(TopicConfig(topic_name=topic, read_queue_nums=1, write_queue_nums=1))
    rng = random.Random(7)
    keys = ("TIMER_DELAY_MS", "TIMER_DELAY_SEC", "TIMER_DELIVER_MS")
    sends = []
    for i in range(count):
        delay = rng.randint(low_ms, high_ms)
        key = keys[i % 3]
        value = {
            "TIMER_DELAY_MS": str(delay),
            "TIMER_DELAY_SEC": str(max(1, delay // 1000)),
            "TIMER_DELIVER_MS": str(int(time.time() * 1000) + delay),
        }[key]
        sends.append(
            send(client, app.addr, topic, f"t{i}".encode(), UNIQ_KEY=f"K{i}", **{key: value})
        )
        if len(sends) == 50:
            for r in await asyncio.gather(*sends):
                assert r.code == ResponseCode.SUCCESS, r.remark
                assert r.ext_fields.get("recallHandle")
            sends = []
    for r in await asyncio.gather(*sends):
        assert r.code == ResponseCode.SUCCESS, r.remark
    await wait_count(app, topic, count, high_ms / 1000 + 60)
    got = delivered(app, topic)
    assert sorted(m.body for m in got) == sorted(f"t{i}".encode() for i in range(count))
    for m in got:
        # never early: stored in the real topic at or after its due time
        assert m.store_timestamp >= int(m.properties["TIMER_OUT_MS"])
        assert "REAL_TOPIC" not in m.properties and m.properties["TIMER_DEQUEUE_MS"]
    print(lateness_report(got))
    return got


async def test_thousand_random_delays(broker: BrokerApp, client: RemotingClient) -> None:
    await run_random_delays(broker, client, 1000, 1000, 20_000)


@pytest.mark.slow
async def test_thousand_random_delays_up_to_ten_minutes(
    broker: BrokerApp, client: RemotingClient
) -> None:
    await run_random_delays(broker, client, 1000, 1000, 600_000)


async def test_timer_and_delay_levels_and_bad_input(
    tmp_path,
    namesrv,
    client: RemotingClient,  # type: ignore[no-untyped-def]
) -> None:
    cfg, store_cfg = broker_configs(tmp_path / "b", namesrv.addr)
    from ferrymq.broker.pop.settings import PopTimerSettings

    app = BrokerApp(
        cfg,
        store_cfg,
        pop_settings=PopTimerSettings(recall_message_enable=True, timer_max_delay_sec=60),
    )
    await app.start()
    try:
        topic = "TimerMix"
        app.topics.update(TopicConfig(topic_name=topic, read_queue_nums=1, write_queue_nums=1))
        r = await send(client, app.addr, topic, b"far", TIMER_DELAY_SEC="61")
        assert r.code == ResponseCode.MESSAGE_ILLEGAL
        assert r.remark == illegal_remark(60)
        r = await send(client, app.addr, topic, b"nan", TIMER_DELIVER_MS="tomorrow")
        assert r.code == ResponseCode.MESSAGE_ILLEGAL
        level = await send(client, app.addr, topic, b"level1", DELAY="1")  # 1 s
        assert level.code == ResponseCode.SUCCESS and "recallHandle" not in level.ext_fields
        keep = await send(client, app.addr, topic, b"keep", TIMER_DELAY_MS="1500", UNIQ_KEY="KEEP")
        gone = await send(client, app.addr, topic, b"gone", TIMER_DELAY_MS="2500", UNIQ_KEY="GONE")
        api = PopApi(client)
        handle = gone.ext_fields["recallHandle"]
        assert await api.recall(app.addr, topic=topic, recall_handle=handle) == "GONE"
        with pytest.raises(Exception, match="recall handle is invalid"):
            await api.recall(app.addr, topic=topic, recall_handle="garbage")
        app.topics.update(TopicConfig(topic_name="Other", read_queue_nums=1, write_queue_nums=1))
        with pytest.raises(Exception, match="topic not match"):
            await api.recall(app.addr, topic="Other", recall_handle=keep.ext_fields["recallHandle"])
        # the recall marker's own time (gone's + 1 ms) passes: only keep and level1 arrived
        await wait_count(app, topic, 2, 30)
        assert app.rocket5 is not None
        timer = app.rocket5.timer
        for _ in range(600):
            if timer.pending == 0:
                break
            await asyncio.sleep(0.05)
        assert timer.pending == 0 and timer.recalled == 1
        assert sorted(m.body for m in delivered(app, topic)) == [b"keep", b"level1"]
        late = await send(client, app.addr, topic, b"x", TIMER_DELAY_MS="10", UNIQ_KEY="LATE")
        await wait_count(app, topic, 3, 30)
        with pytest.raises(Exception, match="timestamp invalid"):
            await api.recall(app.addr, topic=topic, recall_handle=late.ext_fields["recallHandle"])
    finally:
        await app.stop()


async def test_recall_is_refused_when_disabled(broker: BrokerApp, client: RemotingClient) -> None:
    broker.topics.update(TopicConfig(topic_name="TimerOff", read_queue_nums=1, write_queue_nums=1))
    r = await send(client, broker.addr, "TimerOff", b"x", TIMER_DELAY_MS="60000", UNIQ_KEY="K")
    with pytest.raises(Exception, match="recall failed, operation is forbidden"):
        await PopApi(client).recall(
            broker.addr, topic="TimerOff", recall_handle=r.ext_fields["recallHandle"]
        )


async def test_a_delivery_is_recorded_done_before_the_service_waits_for_the_next(
    broker: BrokerApp, client: RemotingClient
) -> None:
    """A delivered message's done marker is stored before the service sleeps until the next due
    message: held back until then (10 min here), a kill -9 in between delivered it twice
    (tests/broker/test_pop_faults.py::test_timer_messages_survive_kill_9 under load)."""
    assert broker.store is not None
    topic = "TimerDone"
    broker.topics.update(TopicConfig(topic_name=topic, read_queue_nums=1, write_queue_nums=1))
    for body, delay_ms in ((b"soon", 1000), (b"later", 600_000)):
        r = await send(client, broker.addr, topic, body, TIMER_DELAY_MS=str(delay_ms))
        assert r.code == ResponseCode.SUCCESS, r.remark
    await wait_count(broker, topic, 1, 30)
    # the two timer records, then the done marker of "soon", long before "later" is due
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    while broker.store.get_max_offset_in_queue(TIMER_TOPIC, 0) < 3:
        assert loop.time() < deadline, "no done marker while the next message is not due"
        await asyncio.sleep(0.05)
    assert [m.body for m in delivered(broker, topic)] == [b"soon"]
