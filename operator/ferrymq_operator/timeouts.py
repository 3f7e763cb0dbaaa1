"""One way for the operator to bound an admin call in time.

``asyncio.timeout``, never ``asyncio.wait_for``: on Python 3.11 ``wait_for`` runs the call as an
inner task that can outlive a cancel and then end with the broker's error; kopf re-raises such
leftover tasks' errors at shutdown. ``asyncio.timeout`` cancels the call in the caller's own task.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def within(seconds: float, call: Awaitable[T]) -> T:
    """Await ``call``; raise ``TimeoutError`` (and cancel it) when it takes over ``seconds``."""
    async with asyncio.timeout(seconds):
        return await call
