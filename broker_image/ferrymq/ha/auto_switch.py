"""The master side of controller mode (upstream ``AutoSwitchHAService``): which replicas are in
sync, waiting for all of them (``allAckInSyncStateSet``), and fencing.

- :meth:`SyncStateTracker.proposal` computes the SyncStateSet from the live HA connections (each
  names its replica in the handshake, :mod:`ferrymq.ha.handshake`) with the pure
  :func:`~ferrymq.controller.decisions.in_sync_replicas`; the broker sends it to the controller.
- The set a send waits for is the controller-accepted set *plus* any members being added: a
  replica counts as soon as it is proposed, and is dropped only once the controller accepted the
  smaller set, so an election never picks a replica that missed an acknowledged message.
- The confirm offset (upstream ``computeConfirmOffset``, :func:`compute_confirm_offset`): with
  ``allAckInSyncStateSet`` the master dispatches, and so serves to consumers, only what every
  member of that set holds; slaves learn it from the HA stream. A consumer therefore never reads
  a message that an election could lose, and its offset never passes a queue offset a new master
  may give to another message.
- :func:`fenced_waiter` wraps whatever replica wait the master uses: after the wait, a master
  that may no longer acknowledge (lease lost, superseded) answers SERVICE_NOT_AVAILABLE instead
  of PUT_OK, however long it was frozen in between.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Set

from ferrymq.controller.decisions import in_sync_replicas
from ferrymq.ha.service import HAService
from ferrymq.store.results import PutMessageStatus
from ferrymq.tasks import wait_event

log = logging.getLogger(__name__)

ReplicaWait = Callable[[int], Awaitable[PutMessageStatus]]


def compute_confirm_offset(
    *,
    master_id: int,
    master_max_offset: int,
    sync_state_set: Set[int],
    ack_offsets: Mapping[int, int],
    all_ack: bool,
    previous: int,
) -> int:
    """The master's confirm offset (upstream ``AutoSwitchHAService#computeConfirmOffset`` with
    ``CommitLog#getConfirmOffset``): up to where consumers may read.

    - without ``all_ack``, or with the master alone in the set: its CommitLog end (as upstream:
      only allAckInSyncStateSet makes every acknowledged message hold on every electable replica);
    - otherwise the smallest ack of the other members, at most the master's end;
    - a member without an ack (no HA connection, or none reported yet) holds the value where it
      was (upstream issue 6662: the set and the connections may disagree for a moment);
    - it never goes back within a term (``previous``): what consumers were given stays given.
    """
    others = set(sync_state_set) - {master_id}
    if not all_ack or not others:
        return master_max_offset
    acks = [ack_offsets.get(b, -1) for b in others]
    if min(acks) < 0:
        return min(previous, master_max_offset)
    return max(min(previous, master_max_offset), min(master_max_offset, *acks))


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
        all_ack: bool = True,
        on_confirm_moved: Callable[[], None] | None = None,
        max_time_not_catchup_s: float = 15.0,
        clock: Callable[[], float] = time.monotonic,
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
        self.all_ack = all_ack
        # what the term started with was the whole log of an elected master (its set was itself)
        self._confirm = epoch_start_offset
        self._on_confirm_moved = on_confirm_moved
        self.max_time_not_catchup_s = max_time_not_catchup_s
        self.clock = clock
        # brokerId -> (ack seen at the last proposal, when it last advanced or was caught up)
        self._progress_of: dict[int, tuple[int, float]] = {}
        service.report_listeners.append(self._on_report)

    def _on_report(self, offset: int) -> None:
        event, self._progress = self._progress, asyncio.Event()
        event.set()
        self._note_confirm()

    def confirm_offset(self) -> int:
        """Up to where this master's store dispatches (and slaves serve) right now."""
        self._confirm = compute_confirm_offset(
            master_id=self.master_id,
            master_max_offset=self._max_offset(),
            sync_state_set=self.accepted | (self.proposed or frozenset()),
            ack_offsets=self.ack_offsets(),
            all_ack=self.all_ack,
            previous=self._confirm,
        )
        return self._confirm

    def _note_confirm(self) -> None:
        """A report or a set change may move the confirm offset: let dispatch and the HA
        writers (which tell the slaves) look again."""
        before = self._confirm
        if self.confirm_offset() != before and self._on_confirm_moved is not None:
            self._on_confirm_moved()

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
        """The set to send to the controller, or None when it is the accepted one.

        With all-ack a replica joins only once it holds the confirm offset too (upstream
        ``isSlaveCaughtUp``): consumers may have read up to there, and an elected joiner must
        not lack what they read."""
        watermark = self.acked_watermark
        if self.all_ack:
            watermark = max(watermark, self.confirm_offset())
        max_offset = self._max_offset()
        acks = self.ack_offsets()
        wanted = in_sync_replicas(
            self.master_id,
            max_offset,
            acks,
            max_gap=self.max_gap,
            acked_watermark=watermark,
            epoch_start_offset=self.epoch_start_offset,
            current=self.accepted,
            stalled=self.stalled(acks, max_offset),
        )
        return None if wanted == self.accepted else wanted

    def stalled(self, acks: Mapping[int, int], max_offset: int) -> frozenset[int]:
        """Replicas whose acknowledgements have not advanced for ``max_time_not_catchup_s``
        while this master had more for them (upstream ``lastCaughtUpTimeMs`` against
        haMaxTimeSlaveNotCatchup): cut off or frozen. Without this a lost member stayed in the
        set, and every allAckInSyncStateSet write waited for it, until its HA link's
        housekeeping timeout closed the connection (20 s; issue 34). Sampled once per proposal
        (each controller heartbeat): progress between two samples counts."""
        now = self.clock()
        out = set()
        for broker_id, ack in acks.items():
            seen = self._progress_of.get(broker_id)
            if seen is None or ack != seen[0] or ack >= max_offset:
                self._progress_of[broker_id] = (ack, now)
            elif now - seen[1] > self.max_time_not_catchup_s:
                out.add(broker_id)
        for broker_id in set(self._progress_of) - set(acks):
            del self._progress_of[broker_id]
        if out & self.accepted:
            log.warning(
                "replicas %s acknowledged nothing new for over %.1f s "
                "(haMaxTimeSlaveNotCatchup): leaving the SyncStateSet",
                sorted(out & self.accepted),
                self.max_time_not_catchup_s,
            )
        return frozenset(out)

    def propose(self, members: frozenset[int]) -> None:
        self.proposed = members
        self._note_confirm()

    def settle(self, accepted: frozenset[int]) -> None:
        """The controller's answer (or a heartbeat answer) names the accepted set."""
        self.accepted = accepted | {self.master_id}
        self.proposed = None
        self._note_confirm()

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
            await wait_event(progress, min(left, 0.1))
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
