"""The in-flight POP checkpoints of a broker and the revive progress they allow, pure (no I/O).

Each checkpoint (CK) sits in one revive queue at a queue offset. Acks set its bits; when its
revive time passes, its unacked messages go to the retry topic and it is resolved. The revive
progress of a revive queue (upstream: the offset of group ``CID_RMQ_SYS_REVIVE_GROUP``) may only
move to the lowest revive offset of a CK still pending there, and never past a CK whose write is
still in progress: a restart replays the revive queue from that progress and so rebuilds every
pending CK with the acks written after it.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from ferrymq.broker.pop.checkpoint import AckRecord, CheckPoint

__all__ = ["InflightTable"]

CkKey = tuple[str, str, int, int, int]


@dataclass(slots=True)
class _ReviveQueue:
    pending: dict[int, CkKey] = field(default_factory=dict)  # revive offset -> CK
    registered_max: int = -1  # highest revive offset of a CK or ack this table has seen
    writes_in_progress: int = 0


class InflightTable:
    def __init__(self) -> None:
        self.cks: dict[CkKey, CheckPoint] = {}
        self._due: list[tuple[int, int, CkKey]] = []  # (revive time, seq, key), lazily cleaned
        self._seq = 0
        self._queues: dict[int, _ReviveQueue] = {}

    def __len__(self) -> int:
        return len(self.cks)

    def _queue(self, revive_qid: int) -> _ReviveQueue:
        queue = self._queues.get(revive_qid)
        if queue is None:
            queue = self._queues[revive_qid] = _ReviveQueue()
        return queue

    # --- writes in progress -------------------------------------------------------------------
    def begin_write(self, revive_qid: int) -> None:
        self._queue(revive_qid).writes_in_progress += 1

    def end_write(self, revive_qid: int, revive_offset: int | None) -> None:
        queue = self._queue(revive_qid)
        queue.writes_in_progress -= 1
        if revive_offset is not None:
            queue.registered_max = max(queue.registered_max, revive_offset)

    # --- checkpoints and acks -----------------------------------------------------------------
    def add(self, ck: CheckPoint) -> None:
        """A stored CK (``ck.revive_qid`` / ``ck.revive_offset`` say where)."""
        old = self.cks.get(ck.key)
        if old is not None:
            ck.bitmap |= old.bitmap  # a replayed duplicate keeps the acks it already has
        self.cks[ck.key] = ck
        queue = self._queue(ck.revive_qid)
        queue.pending[ck.revive_offset] = ck.key
        queue.registered_max = max(queue.registered_max, ck.revive_offset)
        self._seq += 1
        heapq.heappush(self._due, (ck.revive_time, self._seq, ck.key))
        if ck.all_acked:
            self.resolve(ck.key)

    def apply_ack(self, ack: AckRecord) -> CheckPoint | None:
        """Set the ack's bits on its CK; the CK once every message of it is acked (it is then
        resolved), else None."""
        ck = self.cks.get(ack.ck_key)
        if ck is None:
            return None
        for offset in ack.offsets:
            ck.ack(offset)
        if ck.all_acked:
            self.resolve(ck.key)
            return ck
        return None

    def find(self, key: CkKey) -> CheckPoint | None:
        return self.cks.get(key)

    def resolve(self, key: CkKey) -> None:
        ck = self.cks.pop(key, None)
        if ck is not None:
            self._queue(ck.revive_qid).pending.pop(ck.revive_offset, None)

    # --- revive -------------------------------------------------------------------------------
    def next_due(self) -> int | None:
        """The earliest revive time of a pending CK (ms), None when none is pending."""
        while self._due:
            revive_time, _, key = self._due[0]
            ck = self.cks.get(key)
            if ck is not None and ck.revive_time == revive_time:
                return revive_time
            heapq.heappop(self._due)
        return None

    def pop_due(self, now_ms: int) -> list[CheckPoint]:
        """The pending CKs whose revive time has come (they stay pending until resolved)."""
        out: list[CheckPoint] = []
        while self._due and self._due[0][0] <= now_ms:
            revive_time, _, key = heapq.heappop(self._due)
            ck = self.cks.get(key)
            if ck is not None and ck.revive_time == revive_time:
                out.append(ck)
        return out

    def retry_later(self, ck: CheckPoint, at_ms: int) -> None:
        """A revive that failed: look at ``ck`` again at ``at_ms``."""
        self._seq += 1
        ck.invisible_time = at_ms - ck.pop_time
        heapq.heappush(self._due, (ck.revive_time, self._seq, ck.key))

    def progress(self, revive_qid: int) -> int | None:
        """The revive offset a restart may replay ``revive_qid`` from; None while it cannot move
        (a CK write there is in progress)."""
        queue = self._queues.get(revive_qid)
        if queue is None:
            return None
        if queue.writes_in_progress:
            return None
        if queue.pending:
            return min(queue.pending)
        return queue.registered_max + 1

    def revive_queues(self) -> list[int]:
        return sorted(self._queues)

    def note_offset(self, revive_qid: int, revive_offset: int) -> None:
        """A record seen at ``revive_offset`` (an ack on replay)."""
        queue = self._queue(revive_qid)
        queue.registered_max = max(queue.registered_max, revive_offset)
