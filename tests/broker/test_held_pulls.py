"""Held pulls answered from their wake callback: the hold service's park/notify/expiry contract,
and on a live broker the pull answered in the same loop turn as the put that fed it."""

from __future__ import annotations

import asyncio

from ferrymq.broker.app import BrokerApp
from ferrymq.broker.long_polling import PullRequestHoldService
from ferrymq.filter import build_message_filter
from ferrymq.message import MessageInner, tags_string_to_tags_code
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import ResponseCode
from ferrymq.store.record import decode_messages
from test_send_pull import pull_all, pull_request, send_request


async def test_park_wakes_inline_and_expires() -> None:
    hold = PullRequestHoldService()
    calls: list[tuple[str, bool]] = []
    tag_a = build_message_filter("TAG", "A", enable_property_filter=False)
    assert hold.park("t", 0, 5, 10, tag_a, lambda ok: calls.append(("a", ok))) is not None
    assert hold.park("t", 0, 5, 10, None, lambda ok: calls.append(("any", ok))) is not None
    assert hold.park("t", 1, 5, 0.05, None, lambda ok: calls.append(("q1", ok))) is not None
    assert hold.has_waiting() and hold.held_count == 3
    assert hold.notify_message_arriving("t", 0, 5, tags_string_to_tags_code("A")) == 0
    # woken on the notifier's stack: no loop turn between the dispatch and the callback
    assert hold.notify_message_arriving("t", 0, 6, tags_string_to_tags_code("B")) == 1
    assert calls == [("any", True)]
    assert hold.notify_message_arriving("t", 0, 6, tags_string_to_tags_code("A")) == 1
    assert calls == [("any", True), ("a", True)]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 5
    while ("q1", False) not in calls:  # its re-check timer
        assert loop.time() < deadline, "held pull did not expire"
        await asyncio.sleep(0.01)
    assert not hold.has_waiting() and hold.held_count == 0
    # a woken pull never fires twice (its timer was cancelled)
    await asyncio.sleep(0.1)
    assert len(calls) == 3


async def test_woken_pull_may_park_again_and_a_failing_one_does_not_stop_others() -> None:
    hold = PullRequestHoldService()
    calls: list[str] = []

    def again(ok: bool) -> None:
        calls.append("again")
        hold.park("t", 0, 9, 10, None, lambda ok: calls.append(f"second {ok}"))

    def broken(ok: bool) -> None:
        raise RuntimeError("bug in a wake callback")

    hold.park("t", 0, 0, 10, None, broken)
    hold.park("t", 0, 0, 10, None, again)
    assert hold.notify_message_arriving("t", 0, 1) == 2
    assert calls == ["again"] and hold.held_count == 1  # parked again, not woken by the same scan
    hold.wake_all()
    assert calls == ["again", "second False"] and hold.held_count == 0
    assert hold.park("t", 0, 0, 10, None, calls.append) is None  # closed
    assert await hold.hold("t", 0, 0, 10) is False


async def test_cancelled_hold_leaves_the_table() -> None:
    hold = PullRequestHoldService()
    waiting = asyncio.ensure_future(hold.hold("t", 0, 0, 10))
    while hold.held_count == 0:
        await asyncio.sleep(0)
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)
    assert hold.held_count == 0 and not hold.has_waiting()


async def test_held_pull_is_answered_in_the_turn_of_the_put(
    broker: BrokerApp, client: RemotingClient
) -> None:
    assert (await client.invoke(broker.addr, send_request("IN", b"first"))).code == 0
    await pull_all(client, broker.addr, "IN", 0, 1)
    held = asyncio.ensure_future(
        client.invoke(broker.addr, pull_request("IN", 0, 1, suspend_ms=10_000), timeout=15)
    )
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 5
    while broker.hold.held_count == 0:
        assert loop.time() < deadline, "pull was not held"
        await asyncio.sleep(0.005)
    assert broker.store is not None
    put = await broker.store.put_message(
        MessageInner.create("IN", 0, b"second", {"TAGS": "TagA"}, born_host=("127.0.0.1", 1))
    )
    # dispatched and the held pull answered before the put returned: nothing waits a turn
    assert put.is_ok
    assert broker.store.get_max_offset_in_queue("IN", 0) == 2
    assert broker.hold.held_count == 0
    resp = await held
    assert resp.code == ResponseCode.SUCCESS
    assert [m.body for m in decode_messages(resp.body_bytes())] == [b"second"]


async def test_held_pull_of_a_closed_connection_is_dropped(
    broker: BrokerApp, client: RemotingClient
) -> None:
    assert (await client.invoke(broker.addr, send_request("GONE", b"first"))).code == 0
    await pull_all(client, broker.addr, "GONE", 0, 1)
    leaving = RemotingClient()
    held = asyncio.ensure_future(
        leaving.invoke(broker.addr, pull_request("GONE", 0, 1, suspend_ms=10_000), timeout=15)
    )
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 5
    while broker.hold.held_count == 0:
        assert loop.time() < deadline, "pull was not held"
        await asyncio.sleep(0.005)
    await leaving.close()
    await asyncio.gather(held, return_exceptions=True)
    # the next message wakes it; it sees its channel gone and answers nobody, the broker goes on
    assert (await client.invoke(broker.addr, send_request("GONE", b"second"))).code == 0
    assert broker.hold.held_count == 0
    _, bodies = await pull_all(client, broker.addr, "GONE", 0, 2)
    assert bodies == [b"first", b"second"]
