"""Held pulls (upstream PullRequestHoldService): a PULL_MESSAGE that finds nothing waits here until a
message for its queue is dispatched, its re-check interval passes, or its suspend timeout ends.

A held pull is a wake callback in a per-queue list, with a timer for its re-check. The store's
dispatch listener calls ``notify_message_arriving`` for every record reaching a ConsumeQueue; pulls
whose offset is below the new max offset (and whose filter accepts the tags code) are woken: their
callback runs right there (``park``: the pull processor reads the store and answers inline, with no
task and no loop turn between the dispatch and the response) or their future is resolved (``hold``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

log = logging.getLogger(__name__)


class _Filter(Protocol):
    def is_matched_by_consume_queue(self, tags_code: int | None) -> bool: ...


@dataclass(slots=True, eq=False)
class HeldPull:
    offset: int
    message_filter: _Filter | None
    # called once: True when a message arrived, False when the timer ran out or on shutdown
    wake: Callable[[bool], None]
    timer: asyncio.TimerHandle | None = None
    fired: bool = False


def _resolve(future: asyncio.Future[bool], woken: bool) -> None:
    if not future.done():
        future.set_result(woken)


class PullRequestHoldService:
    def __init__(self) -> None:
        self._table: dict[tuple[str, int], list[HeldPull]] = {}
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    def has_waiting(self) -> bool:
        """Whether any pull is held (cheap: a queue's list is removed when it empties)."""
        return bool(self._table)

    @property
    def held_count(self) -> int:
        return sum(len(v) for v in self._table.values())

    def park(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        timeout_s: float,
        message_filter: _Filter | None,
        wake: Callable[[bool], None],
    ) -> HeldPull | None:
        """Hold a pull until ``wake(True)`` (a message for it was dispatched; called from the
        dispatch listener) or ``wake(False)`` (``timeout_s`` passed, or shutdown). None, and
        nothing held, when the service is closed or ``timeout_s`` is not positive."""
        if self._closed or timeout_s <= 0:
            return None
        key = (topic, queue_id)
        held = HeldPull(offset, message_filter, wake)
        held.timer = asyncio.get_running_loop().call_later(timeout_s, self._fire, key, held, False)
        self._table.setdefault(key, []).append(held)
        return held

    async def hold(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        timeout_s: float,
        message_filter: _Filter | None = None,
    ) -> bool:
        """Wait until woken (True) or ``timeout_s`` passes (False)."""
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        held = self.park(
            topic, queue_id, offset, timeout_s, message_filter, partial(_resolve, future)
        )
        if held is None:
            return False
        try:
            return await future
        finally:
            if not held.fired:  # cancelled: take it out of the table now
                self._drop((topic, queue_id), held)

    def _drop(self, key: tuple[str, int], held: HeldPull) -> None:
        held.fired = True
        if held.timer is not None:
            held.timer.cancel()
            held.timer = None
        waiting = self._table.get(key)
        if waiting is not None:
            with contextlib.suppress(ValueError):
                waiting.remove(held)
            if not waiting:
                del self._table[key]

    def _fire(self, key: tuple[str, int], held: HeldPull, woken: bool) -> None:
        if held.fired:
            return
        self._drop(key, held)
        try:
            held.wake(woken)
        except Exception:  # one failing pull must not stop the others or the dispatch
            log.exception("waking a held pull of %s failed", key)

    def notify_message_arriving(
        self, topic: str, queue_id: int, max_offset: int, tags_code: int | None = None
    ) -> int:
        """Wake the pulls of this queue waiting below ``max_offset``; returns how many woke."""
        if not self._table:
            return 0
        key = (topic, queue_id)
        waiting = self._table.get(key)
        if not waiting:
            return 0
        woken: list[HeldPull] = []
        for held in waiting:
            if held.offset >= max_offset:
                continue
            filt = held.message_filter
            if (
                tags_code is not None
                and filt is not None
                and not filt.is_matched_by_consume_queue(tags_code)
            ):
                continue
            woken.append(held)
        # fired after the scan: a woken pull that finds nothing new parks again on this list
        for held in woken:
            self._fire(key, held, True)
        return len(woken)

    def on_dispatch(
        self, topic: str, queue_id: int, logic_offset: int, tags_code: int, *_: Any
    ) -> None:
        """Store dispatch listener: the record at ``logic_offset`` makes max offset ``logic_offset+1``."""
        self.notify_message_arriving(topic, queue_id, logic_offset + 1, tags_code)

    def wake_all(self) -> None:
        """Shutdown: answer every held pull now (they re-read and reply NOT_FOUND or FOUND)."""
        self._closed = True
        for key, waiting in list(self._table.items()):
            for held in list(waiting):
                self._fire(key, held, False)
