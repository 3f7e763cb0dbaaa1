"""``wait_event``: a service loop that waits on an event stops when cancelled, even while the
event is set (Python 3.11's ``asyncio.wait_for`` swallows a cancel that arrives as the awaited
event fires; the loop then never ended and its ``cancel_and_wait`` hung)."""

from __future__ import annotations

import asyncio
import contextlib

from ferrymq.tasks import wait_event


async def test_a_loop_on_a_set_event_stops_at_the_first_cancel() -> None:
    event = asyncio.Event()
    event.set()  # every wait ends at once: a cancel lands while wait_for's event has fired

    async def service_loop() -> None:
        while True:
            await wait_event(event, 5)

    task = asyncio.create_task(service_loop())
    await asyncio.sleep(0)
    cancels = 0
    while not task.done() and cancels < 20:
        cancels += 1
        task.cancel()
        with contextlib.suppress(TimeoutError, asyncio.CancelledError):
            # shielded: waiting for the loop to end must not cancel it a second time
            await asyncio.wait_for(asyncio.shield(task), 0.05)
    if not task.done():  # the old loop: stop it for good before failing
        task.cancel()
    assert task.cancelled() and cancels == 1, f"still running after {cancels} cancels"


async def test_wait_event_says_whether_the_event_fired() -> None:
    event = asyncio.Event()
    assert await wait_event(event, 0.01) is False
    event.set()
    assert await wait_event(event, 5) is True
