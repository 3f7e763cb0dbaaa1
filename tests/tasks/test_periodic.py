"""``Periodic``, the loop every periodic service runs on: turns, a failing turn, wakeups, the two
ways to stop (cancel, or let the turn under way finish and run a last turn), and
``cancel_all_and_wait``. Turns are driven by ``wakeup()`` under an hour-long interval, so no test
depends on how fast the machine is."""

from __future__ import annotations

import asyncio
import logging

import pytest
from ferrymq.tasks import Periodic, cancel_all_and_wait

HOUR = 3600.0


class Turns:
    """Counts turns; ``reached(n)`` waits until the n-th turn has run."""

    def __init__(self) -> None:
        self.count = 0
        self._changed = asyncio.Condition()

    async def tick(self) -> None:
        self.count += 1
        async with self._changed:
            self._changed.notify_all()

    async def reached(self, n: int) -> None:
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(lambda: self.count >= n), 10)


async def test_first_now_runs_a_turn_at_once_and_wakeup_runs_the_next() -> None:
    turns = Turns()
    loop = Periodic("t", turns.tick, HOUR, first_now=True)
    loop.start()
    await turns.reached(1)
    loop.wakeup()
    await turns.reached(2)
    await loop.stop()
    assert turns.count == 2 and not loop.running


async def test_without_first_now_the_first_turn_waits_for_the_interval() -> None:
    turns = Turns()
    loop = Periodic("t", turns.tick, HOUR)
    loop.start()
    for _ in range(5):
        await asyncio.sleep(0)
    assert turns.count == 0
    loop.wakeup()
    await turns.reached(1)
    await loop.stop()


async def test_a_failing_turn_is_logged_and_the_loop_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    turns = Turns()
    calls = 0

    def tick() -> object:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("disk on fire")
        return turns.tick()

    loop = Periodic("flaky", tick, HOUR, first_now=True)
    with caplog.at_level(logging.ERROR, logger="ferrymq.tasks"):
        loop.start()
        for _ in range(20):
            await asyncio.sleep(0)
        loop.wakeup()
        await turns.reached(1)
    await loop.stop()
    assert any("flaky: periodic turn failed" in r.getMessage() for r in caplog.records)
    assert calls == 2


async def test_the_interval_function_is_read_before_every_wait() -> None:
    turns = Turns()
    reads = 0

    def interval() -> float:
        nonlocal reads
        reads += 1
        return HOUR

    loop = Periodic("t", turns.tick, interval, first_now=True)
    loop.start()
    await turns.reached(1)
    loop.wakeup()
    await turns.reached(2)
    await loop.stop()
    assert reads >= 2


async def test_stop_without_final_cancels_a_turn_under_way() -> None:
    started = asyncio.Event()
    never = asyncio.Event()
    cancelled = False

    async def tick() -> None:
        nonlocal cancelled
        started.set()
        try:
            await never.wait()
        except asyncio.CancelledError:
            cancelled = True
            raise

    loop = Periodic("blocked", tick, HOUR, first_now=True)
    loop.start()
    await asyncio.wait_for(started.wait(), 10)
    await asyncio.wait_for(loop.stop(), 10)
    assert cancelled and not loop.running


async def test_stop_with_final_lets_the_turn_finish_then_runs_the_last_turn_once() -> None:
    events: list[str] = []
    in_turn = asyncio.Event()
    release = asyncio.Event()

    async def tick() -> None:
        events.append("turn")
        in_turn.set()
        await release.wait()
        events.append("turn done")

    async def final() -> None:
        events.append("final")

    loop = Periodic("flush", tick, HOUR, first_now=True, final=final)
    loop.start()
    await asyncio.wait_for(in_turn.wait(), 10)
    stopping = asyncio.create_task(loop.stop())
    for _ in range(5):
        await asyncio.sleep(0)
    assert not stopping.done()  # waits for the turn under way instead of cancelling it
    release.set()
    await asyncio.wait_for(stopping, 10)
    assert events == ["turn", "turn done", "final"]


async def test_a_stopped_loop_starts_again_and_a_second_start_is_a_no_op() -> None:
    turns = Turns()
    loop = Periodic("t", turns.tick, HOUR, first_now=True)
    loop.start()
    loop.start()
    await turns.reached(1)
    await loop.stop()
    loop.start()
    await turns.reached(2)
    await loop.stop()
    assert turns.count == 2


async def test_cancel_all_and_wait_ends_every_task() -> None:
    never = asyncio.Event()
    tasks = [asyncio.create_task(never.wait()) for _ in range(3)]
    await asyncio.sleep(0)
    await asyncio.wait_for(cancel_all_and_wait(tasks), 10)
    assert all(t.cancelled() for t in tasks)
