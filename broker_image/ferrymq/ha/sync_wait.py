"""SYNC_MASTER replica wait (upstream ``HAService.GroupTransferService`` + ``push2SlaveMaxOffset``).

Under SYNC_MASTER the store awaits :meth:`GroupTransferService.wait_for_replica` with the end offset
of each put, after its disk flush. The put is acknowledged (PUT_OK) once any slave has reported an
offset >= that end offset; the wait is bounded by ``syncFlushTimeout`` (FLUSH_SLAVE_TIMEOUT). With
no slave connected, or a slave further behind than ``haMaxGapNotInSync``, the put is answered at
once with SLAVE_NOT_AVAILABLE rather than made to wait for a slave that cannot catch up in time.
Either way the message is stored on the master; only the acknowledgement differs.

The service only waits and wakes: data moves in :mod:`ferrymq.ha.master`, whose readers call
:meth:`notify_transfer_some` with every slave report. Everything runs on one event loop.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable

from ferrymq.store.results import PutMessageStatus


def replica_precheck(
    connection_count: int, master_end_offset: int, acked_offset: int, max_gap: int
) -> PutMessageStatus | None:
    """Whether a SYNC_MASTER put may wait for a slave at all (upstream ``HAService.isSlaveOK``).

    Returns SLAVE_NOT_AVAILABLE when no slave is connected or the best slave is ``max_gap`` bytes
    or more behind this message's end; None when waiting makes sense.
    """
    if connection_count <= 0:
        return PutMessageStatus.SLAVE_NOT_AVAILABLE
    if master_end_offset - acked_offset >= max_gap:
        return PutMessageStatus.SLAVE_NOT_AVAILABLE
    return None


class GroupTransferService:
    """Waiters keyed by end offset, woken in offset order as slave reports arrive."""

    def __init__(
        self,
        *,
        timeout_s: float,
        max_gap: int,
        connection_count: Callable[[], int],
    ) -> None:
        if timeout_s <= 0:
            raise ValueError(f"syncFlushTimeout must be > 0, got {timeout_s}s")
        self.timeout_s = timeout_s
        self.max_gap = max_gap
        self._connection_count = connection_count
        # Highest offset any slave has reported since this master started (upstream
        # push2SlaveMaxOffset): monotonic, so a lagging second slave never lowers it.
        self.push2slave_max_offset = 0
        # (end offset, arrival order, future): True when acked, False when given up
        self._waiters: list[tuple[int, int, asyncio.Future[bool]]] = []
        self._seq = itertools.count()
        self._live = 0
        # Each finished wait is counted under exactly one result (the metrics read them as is).
        self.waits = 0  # every replica wait asked for
        self.acked = 0
        self.timeouts = 0
        self.not_available = 0
        self.cancelled = 0  # the putting task was cancelled (connection gone, shutdown) mid-wait

    def notify_transfer_some(self, offset: int) -> None:
        """A slave reported ``offset``: raise the acked mark and wake every satisfied waiter."""
        if offset <= self.push2slave_max_offset:
            return
        self.push2slave_max_offset = offset
        waiters = self._waiters
        while waiters and waiters[0][0] <= offset:
            _, _, fut = heapq.heappop(waiters)
            if not fut.done():
                self._live -= 1
                fut.set_result(True)

    async def wait_for_replica(self, end_offset: int) -> PutMessageStatus:
        """The store's replica-waiter hook: PUT_OK, FLUSH_SLAVE_TIMEOUT or SLAVE_NOT_AVAILABLE."""
        self.waits += 1
        if self.push2slave_max_offset >= end_offset:
            self.acked += 1
            return PutMessageStatus.PUT_OK
        refused = replica_precheck(
            self._connection_count(), end_offset, self.push2slave_max_offset, self.max_gap
        )
        if refused is not None:
            self.not_available += 1
            return refused
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (end_offset, next(self._seq), fut))
        self._live += 1
        try:
            # asyncio.wait never raises on timeout and never cancels the future it watches.
            await asyncio.wait((fut,), timeout=self.timeout_s)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            if not fut.done():  # timed out, or the waiting task itself was cancelled
                fut.set_result(False)
                self._live -= 1
                self._compact()
        if fut.result():
            self.acked += 1
            return PutMessageStatus.PUT_OK
        self.timeouts += 1
        return PutMessageStatus.FLUSH_SLAVE_TIMEOUT

    def _compact(self) -> None:
        # Timed-out entries stay in the heap until an ack passes them; rebuild when they dominate
        # so a slave that stalls for long cannot make the heap grow without bound.
        if len(self._waiters) > 64 and len(self._waiters) > 2 * self._live:
            self._waiters = [w for w in self._waiters if not w[2].done()]
            heapq.heapify(self._waiters)

    def close(self) -> None:
        """Shutdown: pending waiters get FLUSH_SLAVE_TIMEOUT instead of hanging."""
        for _, _, fut in self._waiters:
            if not fut.done():
                fut.set_result(False)
        self._waiters.clear()
        self._live = 0

    @property
    def pending(self) -> int:
        return self._live
