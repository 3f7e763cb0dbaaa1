"""Durability services (upstream ``GroupCommitService``, ``FlushRealTimeService`` and
``FlushConsumeQueueService``). fsync always runs in a worker thread, never on the event loop.

- :class:`GroupCommitService` (SYNC_FLUSH): each put registers a future for its end offset in the
  "write" list; the service swaps the write and read lists (double buffering: putters never wait
  on the flusher's list), syncs once for the whole group, and resolves every future whose offset
  is now on disk. Putters bound their wait by ``syncFlushTimeout``.
- :class:`FlushRealTimeService` (ASYNC_FLUSH): every ``flushIntervalCommitLog`` ms, sync when at
  least ``flushCommitLogLeastPages`` pages are dirty; every ``flushCommitLogThoroughInterval`` ms,
  sync whatever is dirty.
- :class:`FlushConsumeQueueService`: the same for ConsumeQueues and index files, then the
  checkpoint file, written every round (the first round of each service is thorough, so the
  checkpoint is current within a second of start).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from ferrymq.store.checkpoint import StoreCheckpoint
from ferrymq.store.mapped_file_queue import MappedFileQueue
from ferrymq.tasks import Periodic

log = logging.getLogger(__name__)


class _Service:
    """A flush service: :meth:`turn` every :meth:`interval_s` on a :class:`Periodic` loop, and
    :meth:`last_turn` once on stop, after the turn under way (nothing queued is left unflushed)."""

    name = "service"

    def __init__(self) -> None:
        self._loop = Periodic(self.name, self.turn, self.interval_s, final=self.last_turn)

    def interval_s(self) -> float:  # pragma: no cover - overridden
        raise NotImplementedError

    async def turn(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    async def last_turn(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def start(self) -> None:
        self._loop.start()

    def wakeup(self) -> None:
        self._loop.wakeup()

    async def stop(self) -> None:
        await self._loop.stop()


class GroupCommitService(_Service):
    name = "group-commit"

    def __init__(self, mfq: MappedFileQueue, checkpoint: StoreCheckpoint) -> None:
        super().__init__()
        self.mfq = mfq
        self.checkpoint = checkpoint
        self._requests_write: list[tuple[int, asyncio.Future[bool]]] = []
        self._requests_read: list[tuple[int, asyncio.Future[bool]]] = []
        self.flush_errors = 0
        self.flushes = 0  # fsync rounds (each serves every request queued before it)
        self.requests_served = 0

    def put_request(self, next_offset: int) -> asyncio.Future[bool]:
        """A future resolved True once ``next_offset`` is on disk (False on an IO error)."""
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        if self.mfq.flushed_where >= next_offset:
            fut.set_result(True)
            return fut
        self._requests_write.append((next_offset, fut))
        self.wakeup()
        return fut

    def _swap_requests(self) -> None:
        self._requests_write, self._requests_read = self._requests_read, self._requests_write

    async def _do_commit(self) -> None:
        requests = self._requests_read
        ok = True
        if requests or self.mfq.flushed_where < self.mfq.get_max_offset():
            try:
                await asyncio.to_thread(self.mfq.flush, 0)
                self.flushes += 1
            except OSError:
                ok = False
                self.flush_errors += 1
                log.exception("CommitLog flush failed")
        flushed = self.mfq.flushed_where
        self.requests_served += len(requests)
        for next_offset, fut in requests:
            if not fut.done():
                fut.set_result(ok and flushed >= next_offset)
        requests.clear()
        if self.mfq.store_timestamp > 0:
            self.checkpoint.physic_msg_timestamp = self.mfq.store_timestamp

    def interval_s(self) -> float:
        return 0.01  # a put's wakeup() cuts it short; this is the idle cadence

    async def turn(self) -> None:
        self._swap_requests()
        await self._do_commit()

    async def last_turn(self) -> None:
        # Shutdown: serve everything still queued (both request lists).
        await self.turn()
        await self.turn()


def thorough_due(now_ms: int, last_thorough_ms: int, thorough_interval_ms: int) -> bool:
    """Whether a periodic flush takes whatever is dirty this round (least pages 0) instead of
    waiting for its minimum of dirty pages. Pure."""
    return now_ms >= last_thorough_ms + thorough_interval_ms


class _PeriodicFlushService(_Service):
    """Every ``interval_ms``: :meth:`flush_once` with ``least_pages`` dirty pages at least, and a
    thorough (0) one every ``thorough_interval_ms``; a last thorough flush on stop."""

    def __init__(self, interval_ms: int, least_pages: int, thorough_interval_ms: int) -> None:
        super().__init__()
        self.interval_ms = interval_ms
        self.least_pages = least_pages
        self.thorough_interval_ms = thorough_interval_ms
        # The first round is thorough: a crash soon after start then finds a current checkpoint
        # instead of none (which makes recovery scan from the first file).
        self._last_thorough_ms = 0

    async def flush_once(self, least_pages: int) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def interval_s(self) -> float:
        return self.interval_ms / 1000

    async def turn(self) -> None:
        now = int(time.time() * 1000)
        least = self.least_pages
        if thorough_due(now, self._last_thorough_ms, self.thorough_interval_ms):
            self._last_thorough_ms = now
            least = 0
        await self.flush_once(least)

    async def last_turn(self) -> None:
        await self.flush_once(0)


class FlushRealTimeService(_PeriodicFlushService):
    name = "flush-commitlog"

    def __init__(
        self,
        mfq: MappedFileQueue,
        checkpoint: StoreCheckpoint,
        interval_ms: int,
        least_pages: int,
        thorough_interval_ms: int,
    ) -> None:
        super().__init__(interval_ms, least_pages, thorough_interval_ms)
        self.mfq = mfq
        self.checkpoint = checkpoint

    async def flush_once(self, least_pages: int) -> None:
        try:
            await asyncio.to_thread(self.mfq.flush, least_pages)
        except OSError:
            log.exception("CommitLog flush failed")
            return
        if self.mfq.store_timestamp > 0:
            self.checkpoint.physic_msg_timestamp = self.mfq.store_timestamp


class FlushConsumeQueueService(_PeriodicFlushService):
    """Flushes ConsumeQueues and index files, then writes the checkpoint.

    ``flush_all`` (blocking, run in a thread) takes ``least_pages`` and returns the
    ``(logics, index)`` timestamps that are now durable (0: none moved this round).
    """

    name = "flush-consumequeue"

    def __init__(
        self,
        flush_all: Callable[[int], tuple[int, int]],
        checkpoint: StoreCheckpoint,
        interval_ms: int,
        least_pages: int,
        thorough_interval_ms: int,
        confirm_offset: Callable[[], int] | None = None,
    ) -> None:
        super().__init__(interval_ms, least_pages, thorough_interval_ms)
        self.flush_all = flush_all
        self.checkpoint = checkpoint
        # read on the event loop (the HA layer's source is not thread-safe), then saved
        self.confirm_offset = confirm_offset
        self.errors = 0

    async def flush_once(self, least_pages: int) -> None:
        try:
            logics_ts, index_ts = await asyncio.to_thread(self.flush_all, least_pages)
            if logics_ts > 0:
                self.checkpoint.logics_msg_timestamp = logics_ts
            if least_pages == 0 and index_ts > 0:
                self.checkpoint.index_msg_timestamp = index_ts
            if self.confirm_offset is not None:
                self.checkpoint.confirm_phy_offset = self.confirm_offset()
            # Every round, as the CommitLog timestamp moves with each of its flushes.
            await asyncio.to_thread(self.checkpoint.flush)
        except OSError as exc:
            self.errors += 1
            log.error("ConsumeQueue/index/checkpoint flush failed: %s", exc)
