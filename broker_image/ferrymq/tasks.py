"""Background tasks: stopping one safely, waiting on an event from one, and the periodic service
every component's loop runs on (upstream's ``ServiceThread``).

A leaf module (asyncio and logging only), so the store, the NameServer, the broker, the
controller and the client all share it without pulling in the network layer.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

log = logging.getLogger(__name__)

# what a periodic service calls each turn: a plain function or a coroutine function
Tick = Callable[[], Awaitable[object] | object]


async def cancel_and_wait(task: asyncio.Task[Any] | None) -> None:
    """Cancel ``task`` and wait for it to end, without swallowing a cancellation of the caller.

    ``task.cancel(); with suppress(CancelledError): await task`` also eats a cancel aimed at the
    task running this code (its stop would then carry on as if nothing happened).
    """
    if task is None or task.done():
        return
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if current is not None and current.cancelling():
            raise
    except Exception:
        log.exception("task %s failed while being cancelled", task.get_name())


async def cancel_all_and_wait(tasks: Iterable[asyncio.Task[Any]]) -> None:
    """Cancel every task at once, then wait for each (as :func:`cancel_and_wait`): a worker pool
    stops in one round instead of one worker after another."""
    pending = [task for task in tasks if not task.done()]
    for task in pending:
        task.cancel()
    for task in pending:
        await cancel_and_wait(task)


async def wait_event(event: asyncio.Event, timeout: float) -> bool:
    """Wait up to ``timeout`` seconds for ``event``; True when it is set.

    Python 3.11's ``asyncio.wait_for`` returns the result instead of raising when it is
    cancelled just as the event fires: a service loop stopped by a cancel then carries on, and
    its ``cancel_and_wait`` hangs (a test's heartbeat loop spun until its timeout in CI). The
    cancel is still recorded on the task, so it is raised here.
    """
    try:
        await asyncio.wait_for(event.wait(), timeout)
    except TimeoutError:
        return False
    raise_if_cancelling()
    return True


def raise_if_cancelling() -> None:
    """Re-raise a cancellation of the current task that an ``except OSError`` may have eaten.

    A connect failing at the very moment its task is cancelled can surface as the OSError (or a
    wrapper of it) instead of CancelledError; a retry loop that then carries on never stops.
    """
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


class Periodic:
    """Calls ``tick`` every ``interval`` seconds from ``start()`` until ``stop()`` (the one loop
    every periodic service of ferrymq runs on, like upstream's ``ServiceThread``).

    The cadence is the contract of the service that owns it (a scan, a sample, a flush, a reload
    check), not synchronisation. A failing turn is logged with the service's name and the loop
    goes on: one bad turn must not end a service that runs for the broker's lifetime.

    - ``interval`` may be a function, read before every wait, for periods a runtime config
      update can change; ``wakeup()`` cuts the current wait short (a waiting flush request).
    - ``first_now`` runs the first turn at once instead of after one interval.
    - Without ``final``, ``stop()`` cancels the loop, a turn under way included (a scan blocked on
      the network must not hold a shutdown). With ``final``, ``stop()`` lets the turn under way
      finish, ends the loop and awaits ``final`` once: a flush service's last flush.
    """

    def __init__(
        self,
        name: str,
        tick: Tick,
        interval: float | Callable[[], float],
        *,
        first_now: bool = False,
        final: Tick | None = None,
    ) -> None:
        self.name = name
        self._tick = tick
        self._interval = interval
        self._first_now = first_now
        self._final = final
        self._stopping = False
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        """Start the loop on the running event loop; a second start while running is a no-op."""
        if self.running:
            return
        self._stopping = False
        self._wake.clear()
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"ferrymq-{self.name}"
        )

    def wakeup(self) -> None:
        """Run the next turn now instead of at the end of the current wait."""
        self._wake.set()

    async def stop(self) -> None:
        """End the loop and wait until it has ended (see the class docstring for ``final``)."""
        task, self._task = self._task, None
        if task is None:
            return
        if self._final is None:
            await cancel_and_wait(task)
            return
        self._stopping = True
        self._wake.set()
        try:
            await task
        finally:
            await _call(self._final)

    def _period(self) -> float:
        return self._interval() if callable(self._interval) else self._interval

    async def _pause(self) -> None:
        await wait_event(self._wake, self._period())
        self._wake.clear()

    async def _run(self) -> None:
        if not self._first_now:
            await self._pause()
        while not self._stopping:
            try:
                await _call(self._tick)
            except Exception:
                log.exception("%s: periodic turn failed", self.name)
            if not self._stopping:
                await self._pause()


async def _call(tick: Tick) -> None:
    result = tick()
    if inspect.isawaitable(result):
        await result
