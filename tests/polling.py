"""The one way an asyncio test waits on state: poll a condition until it holds or time runs out.

Tests never sleep as synchronisation; they wait for the state they need and fail naming it.
Each suite keeps its own defaults (how long, how often) by passing them here.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest

T = TypeVar("T")


async def wait_for(
    condition: Callable[[], Awaitable[bool]] | Callable[[], bool],
    timeout: float = 10.0,
    what: str = "condition",
    every: float = 0.02,
) -> None:
    """Poll ``condition`` (plain or coroutine function) every ``every`` seconds until it is true.

    Fails with an AssertionError naming ``what`` when it is still false after ``timeout`` seconds
    (it is checked once more after the deadline before failing).
    """
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(every)


def poll_value(
    what: str, probe: Callable[[], T | None], timeout: float = 60.0, every: float = 0.2
) -> T:
    """Blocking twin for tests without an event loop (Kubernetes API, Helm): call ``probe`` every
    ``every`` seconds until it returns something truthy, and return that; fail naming ``what``
    and the last value once ``timeout`` seconds have passed."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(every)  # poll interval, not synchronisation
    pytest.fail(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")
