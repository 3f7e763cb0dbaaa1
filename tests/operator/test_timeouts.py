"""The operator's one time limit for admin calls (ferrymq_operator.timeouts)."""

from __future__ import annotations

import asyncio

import pytest
from ferrymq_operator.timeouts import within


async def test_returns_the_result_in_time() -> None:
    async def answer() -> int:
        await asyncio.sleep(0)
        return 42

    assert await within(5.0, answer()) == 42


async def test_overrun_cancels_the_call_in_the_callers_task() -> None:
    """No inner task is left behind to finish (or fail) after the caller gave up."""
    started = asyncio.Event()
    ended: list[str] = []
    caller = asyncio.current_task()

    async def stuck() -> None:
        assert asyncio.current_task() is caller  # runs in the caller's task, not a new one
        started.set()
        try:
            await asyncio.Event().wait()  # never set: only the time limit ends it
        except asyncio.CancelledError:
            ended.append("cancelled")
            raise

    before = len(asyncio.all_tasks())
    with pytest.raises(TimeoutError):
        await within(0.05, stuck())
    assert started.is_set()
    assert ended == ["cancelled"]
    assert len(asyncio.all_tasks()) == before


async def test_errors_of_the_call_pass_through() -> None:
    async def refused() -> None:
        raise ConnectionRefusedError("no broker")

    with pytest.raises(ConnectionRefusedError, match="no broker"):
        await within(5.0, refused())
