"""The one way an asyncio test waits on state: poll a condition until it holds or time runs out.

Tests never sleep as synchronisation; they wait for the state they need and fail naming it.
Each suite keeps its own defaults (how long, how often) by passing them here.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable


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
