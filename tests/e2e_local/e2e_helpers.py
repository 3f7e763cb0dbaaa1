"""Helpers shared by the end-to-end tests (a module name unique across the test tree)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable


async def wait_for(check: Callable[[], bool | Awaitable[bool]], timeout: float, what: str) -> None:
    """Poll ``check`` until true; fail naming ``what`` after ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        result = check()
        if not isinstance(result, bool):
            result = await result
        if result:
            return
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        await asyncio.sleep(0.05)
