"""Held pulls (upstream PullRequestHoldService): a PULL_MESSAGE that finds nothing waits here until a
message for its queue is dispatched, its re-check interval passes, or its suspend timeout ends.

Each held pull is a future in a per-queue list. The store's dispatch round listener calls
``notify_message_arriving`` for every record reaching a queue with held pulls; requests whose offset is below
the new max offset (and whose filter accepts the tags code) are woken. Waking only resolves the
future; the pull handler then reads the store again and answers.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ferrymq.store.dispatch import RoundRecords


class _Filter(Protocol):
    def is_matched_by_consume_queue(self, tags_code: int | None) -> bool: ...


@dataclass(slots=True, eq=False)
class HeldPull:
    offset: int
    message_filter: _Filter | None
    future: asyncio.Future[bool] = field(repr=False)


def _expire(future: asyncio.Future[bool]) -> None:
    if not future.done():
        future.set_result(False)


class PullRequestHoldService:
    def __init__(self) -> None:
        self._table: dict[tuple[str, int], list[HeldPull]] = {}
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def held_count(self) -> int:
        return sum(len(v) for v in self._table.values())

    async def hold(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        timeout_s: float,
        message_filter: _Filter | None = None,
    ) -> bool:
        """Wait until woken (True) or ``timeout_s`` passes (False)."""
        if self._closed or timeout_s <= 0:
            return False
        loop = asyncio.get_running_loop()
        future: asyncio.Future[bool] = loop.create_future()
        held = HeldPull(offset, message_filter, future)
        key = (topic, queue_id)
        self._table.setdefault(key, []).append(held)
        # a timer that answers False, not wait_for(shield(...)): a wake-up then reaches the pull
        # handler in one loop turn instead of three (shield, wait_for's waiter, the task)
        timer = loop.call_later(timeout_s, _expire, future)
        try:
            return await future
        finally:
            timer.cancel()
            waiting = self._table.get(key)
            if waiting is not None:
                with contextlib.suppress(ValueError):
                    waiting.remove(held)
                if not waiting:
                    del self._table[key]

    def notify_message_arriving(
        self, topic: str, queue_id: int, max_offset: int, tags_code: int | None = None
    ) -> int:
        """Wake the pulls of this queue waiting below ``max_offset``; returns how many woke."""
        if not self._table:
            return 0
        waiting = self._table.get((topic, queue_id))
        if not waiting:
            return 0
        woken = 0
        for held in waiting:
            if held.future.done() or held.offset >= max_offset:
                continue
            filt = held.message_filter
            if (
                tags_code is not None
                and filt is not None
                and not filt.is_matched_by_consume_queue(tags_code)
            ):
                continue
            held.future.set_result(True)
            woken += 1
        return woken

    def on_dispatch(
        self, topic: str, queue_id: int, logic_offset: int, tags_code: int, *_: Any
    ) -> None:
        """Store dispatch listener: the record at ``logic_offset`` makes max offset ``logic_offset+1``."""
        self.notify_message_arriving(topic, queue_id, logic_offset + 1, tags_code)

    def on_dispatch_round(self, arrived: RoundRecords) -> None:
        """Store dispatch round listener: ``on_dispatch`` for each record whose queue has held
        pulls (with none held, which is the usual state under load, a round costs one test)."""
        table = self._table
        if not table:
            return
        for topic, queue_id, offset, tags_code in arrived.arrivals():
            if (topic, queue_id) in table:
                self.notify_message_arriving(topic, queue_id, offset + 1, tags_code)

    def wake_all(self) -> None:
        """Shutdown: answer every held pull now (they re-read and reply NOT_FOUND or FOUND)."""
        self._closed = True
        for waiting in self._table.values():
            for held in waiting:
                if not held.future.done():
                    held.future.set_result(False)
