"""Broker-side queue locks for orderly consumption (upstream ``RebalanceLockManager``).

An orderly consumer locks each queue it was assigned before pulling from it, so that during a
rebalance two consumers never consume one queue at once. A lock belongs to a client id within a
consumer group and expires 60 s after its last renewal (``REBALANCE_LOCK_MAX_LIVE_TIME``); clients
renew every 20 s. Locking a queue the same client already holds renews it; an expired lock can be
taken by anyone.

State is owned by one :class:`RebalanceLockManager` per broker; time comes from an injected clock
(milliseconds), so expiry is tested without waiting.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

__all__ = [
    "REBALANCE_LOCK_MAX_LIVE_TIME_MS",
    "LockEntry",
    "QueueKey",
    "RebalanceLockManager",
]

REBALANCE_LOCK_MAX_LIVE_TIME_MS = 60_000

QueueKey = tuple[str, str, int]
"""(topic, brokerName, queueId), the identity of upstream ``MessageQueue``."""


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(slots=True)
class LockEntry:
    client_id: str
    last_update_ms: int

    def is_expired(self, now_ms: int, max_live_ms: int) -> bool:
        return now_ms - self.last_update_ms > max_live_ms

    def is_locked_by(self, client_id: str, now_ms: int, max_live_ms: int) -> bool:
        return self.client_id == client_id and not self.is_expired(now_ms, max_live_ms)


class RebalanceLockManager:
    def __init__(
        self,
        *,
        max_live_ms: int = REBALANCE_LOCK_MAX_LIVE_TIME_MS,
        clock_ms: Callable[[], int] = _now_ms,
    ) -> None:
        self._max_live_ms = max_live_ms
        self._clock_ms = clock_ms
        self._tables: dict[str, dict[QueueKey, LockEntry]] = {}

    def try_lock_batch(self, group: str, mqs: Iterable[QueueKey], client_id: str) -> set[QueueKey]:
        """Lock (or renew) every queue that is free, expired or already ours; return those."""
        now = self._clock_ms()
        table = self._tables.setdefault(group, {})
        locked: set[QueueKey] = set()
        for mq in mqs:
            entry = table.get(mq)
            if (
                entry is None
                or entry.client_id == client_id
                or entry.is_expired(now, self._max_live_ms)
            ):
                table[mq] = LockEntry(client_id, now)
                locked.add(mq)
        return locked

    def unlock_batch(self, group: str, mqs: Iterable[QueueKey], client_id: str) -> None:
        """Release the queues this client holds; others' locks are left alone."""
        table = self._tables.get(group)
        if not table:
            return
        for mq in mqs:
            entry = table.get(mq)
            if entry is not None and entry.client_id == client_id:
                del table[mq]
        if not table:
            del self._tables[group]

    def is_locked(self, group: str, mq: QueueKey, client_id: str) -> bool:
        entry = self._tables.get(group, {}).get(mq)
        return entry is not None and entry.is_locked_by(
            client_id, self._clock_ms(), self._max_live_ms
        )

    def owner(self, group: str, mq: QueueKey) -> str | None:
        """The client holding a live lock on ``mq``, if any (admin views and tests)."""
        entry = self._tables.get(group, {}).get(mq)
        if entry is None or entry.is_expired(self._clock_ms(), self._max_live_ms):
            return None
        return entry.client_id

    def unlock_client(self, client_id: str) -> int:
        """Drop every lock of a client whose connection closed; returns how many."""
        dropped = 0
        for group in list(self._tables):
            table = self._tables[group]
            for mq in [mq for mq, e in table.items() if e.client_id == client_id]:
                del table[mq]
                dropped += 1
            if not table:
                del self._tables[group]
        return dropped
