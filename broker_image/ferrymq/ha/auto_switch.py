"""The master side of controller mode (upstream ``AutoSwitchHAService``): which replicas are in
sync, waiting for all of them (``allAckInSyncStateSet``), and fencing.

- :meth:`SyncStateTracker.proposal` computes the SyncStateSet from the live HA connections (each
  names its replica in the handshake, :mod:`ferrymq.ha.handshake`) with the pure
  :func:`~ferrymq.controller.decisions.in_sync_replicas`; the broker sends it to the controller.
- The set a send waits for is the controller-accepted set *plus* any members being added: a
  replica counts as soon as it is proposed, and is dropped only once the controller accepted the
  smaller set, so an election never picks a replica that missed an acknowledged message.
- :func:`fenced_waiter` wraps whatever replica wait the master uses: after the wait, a master
  that may no longer acknowledge (lease lost, superseded) answers SERVICE_NOT_AVAILABLE instead
  of PUT_OK, however long it was frozen in between.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from ferrymq.controller.decisions import in_sync_replicas
from ferrymq.ha.service import HAService
from ferrymq.store.results import PutMessageStatus

log = logging.getLogger(__name__)

ReplicaWait = Callable[[int], Awaitable[PutMessageStatus]]


class SyncStateTracker:
    """One master term's SyncStateSet bookkeeping and its all-ack waiter."""

    def __init__(
        self,
        service: HAService,
        *,
        master_id: int,
        max_offset: Callable[[], int],
        max_gap: int,
        epoch_start_offset: int,
        accepted: frozenset[int],
        timeout_s: float,
    ) -> None:
        self.service = service
        self.master_id = master_id
        self._max_offset = max_offset
        self.max_gap = max_gap
        self.epoch_start_offset = epoch_start_offset
        self.accepted = accepted | {master_id}
        self.proposed: frozenset[int] | None = None
        self.acked_watermark = 0
        self.timeout_s = timeout_s
        self._progress = asyncio.Event()
        self.timeouts = 0
        service.report_listeners.append(self._on_report)

    def _on_report(self, offset: int) -> None:
        event, self._progress = self._progress, asyncio.Event()
        event.set()

    def ack_offsets(self) -> dict[int, int]:
        """brokerId -> highest ack of its connection (controller-mode replicas only)."""
        acks: dict[int, int] = {}
        master = self.service.master
        if master is None:
            return acks
        for conn in master.connections:
            if conn.slave_broker_id is not None:
                acks[conn.slave_broker_id] = max(
                    acks.get(conn.slave_broker_id, -1), conn.slave_ack_offset
                )
        return acks

    @property
    def wait_set(self) -> frozenset[int]:
        members = self.accepted | (self.proposed or frozenset())
        return members - {self.master_id}

    def proposal(self) -> frozenset[int] | None:
        """The set to send to the controller, or None when it is the accepted one."""
        wanted = in_sync_replicas(
            self.master_id,
            self._max_offset(),
            self.ack_offsets(),
            max_gap=self.max_gap,
            acked_watermark=self.acked_watermark,
            epoch_start_offset=self.epoch_start_offset,
            current=self.accepted,
        )
        return None if wanted == self.accepted else wanted

    def propose(self, members: frozenset[int]) -> None:
        self.proposed = members

    def settle(self, accepted: frozenset[int]) -> None:
        """The controller's answer (or a heartbeat answer) names the accepted set."""
        self.accepted = accepted | {self.master_id}
        self.proposed = None

    def _all_have(self, end_offset: int) -> bool:
        acks = self.ack_offsets()
        return all(acks.get(b, -1) >= end_offset for b in self.wait_set)

    async def wait_all(self, end_offset: int) -> PutMessageStatus:
        """Every member of the SyncStateSet holds ``end_offset`` (allAckInSyncStateSet)."""
        self.service.notify_new_data()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s
        while not self._all_have(end_offset):
            left = deadline - loop.time()
            if left <= 0:
                self.timeouts += 1
                return PutMessageStatus.FLUSH_SLAVE_TIMEOUT
            progress = self._progress
            # re-check at least every 100 ms: a set change (not a report) can also end the wait
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(progress.wait(), min(left, 0.1))
        if end_offset > self.acked_watermark:
            self.acked_watermark = end_offset
        return PutMessageStatus.PUT_OK


def fenced_waiter(inner: ReplicaWait | None, may_ack: Callable[[], bool]) -> ReplicaWait:
    """``inner`` (or nothing), then refuse the acknowledgement when the lease says so."""

    async def wait(end_offset: int) -> PutMessageStatus:
        status = await inner(end_offset) if inner is not None else PutMessageStatus.PUT_OK
        if not may_ack():
            log.warning("fenced: not acknowledging the write ending at %d", end_offset)
            return PutMessageStatus.SERVICE_NOT_AVAILABLE
        return status

    return wait
