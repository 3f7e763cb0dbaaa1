"""Broker isolation after slow or failed sends (upstream LatencyFaultToleranceImpl + MQFaultStrategy).

After every send the producer records the broker's latency; a latency at or above a threshold makes
the broker "not available" for a while (seeds-digest PR9/PR10)::

    latencyMax          = 50, 100, 550,    1000,   2000,    3000,   15000 ms
    notAvailableDuration = 0,  0, 30000,  60000, 120000, 180000, 600000 ms

A failed send counts as 30 s of latency (``isolation``), so it isolates the broker for 10 minutes.
Time is passed in (milliseconds from any monotonic clock) so every decision is a pure function of
its inputs and testable without waiting. The table is safe to share between threads.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from ferrymq.client.allocate import MessageQueue

LATENCY_MAX_MS = (50, 100, 550, 1000, 2000, 3000, 15000)
NOT_AVAILABLE_DURATION_MS = (0, 0, 30000, 60000, 120000, 180000, 600000)
ISOLATION_LATENCY_MS = 30000


def compute_not_available_duration(latency_ms: int) -> int:
    """Duration of the largest bucket whose ``latencyMax`` is <= the latency, else 0."""
    for limit, duration in zip(
        reversed(LATENCY_MAX_MS), reversed(NOT_AVAILABLE_DURATION_MS), strict=True
    ):
        if latency_ms >= limit:
            return duration
    return 0


@dataclass(slots=True)
class FaultItem:
    """One broker's entry. Changed in place under the table's lock; read without it only for
    ``start_timestamp`` alone (``is_available``)."""

    name: str
    current_latency: int
    # when the broker becomes available again (same clock as ``now``)
    start_timestamp: int

    def is_available(self, now: int) -> bool:
        return now - self.start_timestamp >= 0

    def sort_key(self, now: int) -> tuple[bool, int, int, str]:
        # upstream FaultItem.compareTo: available first, then lower latency, then sooner available;
        # the name makes ties deterministic where upstream shuffles.
        return (not self.is_available(now), self.current_latency, self.start_timestamp, self.name)


@dataclass
class LatencyFaultTolerance:
    """The fault table (upstream LatencyFaultToleranceImpl's ConcurrentHashMap), shared by every
    thread that sends through one producer (``SyncProducer`` is used from many).

    Writers, the ranking and ``snapshot`` hold ``_lock``: an entry's latency and timestamp change
    together, and the ranking iterates the table, which must not change size meanwhile.
    ``is_available``, asked for every queue of every send, reads one field of one entry without
    it (a single ``dict.get`` and attribute read are atomic).
    """

    items: dict[str, FaultItem] = field(default_factory=dict)
    _which_item_worst: itertools.count[int] = field(default_factory=itertools.count)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def update(
        self, name: str, current_latency: int, not_available_duration: int, now: int
    ) -> None:
        start = now + not_available_duration
        with self._lock:
            item = self.items.get(name)
            if item is None:
                self.items[name] = FaultItem(name, current_latency, start)
            else:
                item.current_latency = current_latency
                item.start_timestamp = start

    def is_available(self, name: str, now: int) -> bool:
        item = self.items.get(name)
        return item is None or item.is_available(now)

    def remove(self, name: str) -> None:
        with self._lock:
            self.items.pop(name, None)

    def snapshot(self) -> dict[str, FaultItem]:
        """A consistent copy of the table, entries copied too (for metrics and tests)."""
        with self._lock:
            return {
                name: FaultItem(item.name, item.current_latency, item.start_timestamp)
                for name, item in self.items.items()
            }

    def pick_one_at_least(self, now: int) -> str | None:
        """Round-robin over the better half of the known brokers ("best first, then next best")."""
        with self._lock:
            if not self.items:
                return None
            ranked = sorted(self.items.values(), key=lambda item: item.sort_key(now))
            half = len(ranked) // 2
            if half <= 0:
                return ranked[0].name
            return ranked[next(self._which_item_worst) % half].name


QueueCounter = Callable[[], int]


@dataclass
class MQFaultStrategy:
    """Queue choice for one send attempt; ``send_latency_fault_enable`` is upstream's switch."""

    send_latency_fault_enable: bool = False
    tolerance: LatencyFaultTolerance = field(default_factory=LatencyFaultTolerance)

    def select_queue(
        self,
        queues: list[MessageQueue],
        next_index: QueueCounter,
        last_broker_name: str | None,
        now: int,
    ) -> MessageQueue:
        """One queue of ``queues`` (a topic's writable queues, never empty).

        Without fault tolerance: round-robin, avoiding ``last_broker_name`` when another broker
        exists (it failed this message's previous attempt). With it: the first queue, in
        round-robin order, of an available broker (on a retry, any available broker other than
        the one that just failed); failing that, a queue of the least-bad broker.
        """
        if not queues:
            raise ValueError("no queue to select from")
        if not self.send_latency_fault_enable:
            return select_round_robin(queues, next_index, last_broker_name)
        index = next_index()
        n = len(queues)
        for i in range(n):
            mq = queues[abs(index + i) % n]
            # Upstream 4.x keeps only lastBrokerName's queues here (a known bug: seeds-digest PR13);
            # later releases fixed it to prefer any *other* available broker, which is what a retry
            # that excludes the failed broker needs.
            if self.tolerance.is_available(mq.broker_name, now) and (
                last_broker_name is None or mq.broker_name != last_broker_name
            ):
                return mq
        not_best = self.tolerance.pick_one_at_least(now)
        if not_best is not None:
            on_broker = [mq for mq in queues if mq.broker_name == not_best]
            if on_broker:
                return on_broker[abs(next_index()) % len(on_broker)]
            # the route no longer has it: forget it so it stops being picked
            self.tolerance.remove(not_best)
        return select_round_robin(queues, next_index, None)

    def update_fault_item(
        self, broker_name: str, current_latency: int, isolation: bool, now: int
    ) -> None:
        if not self.send_latency_fault_enable:
            return
        duration = compute_not_available_duration(
            ISOLATION_LATENCY_MS if isolation else current_latency
        )
        self.tolerance.update(broker_name, current_latency, duration, now)


def select_round_robin(
    queues: list[MessageQueue], next_index: QueueCounter, last_broker_name: str | None
) -> MessageQueue:
    """Upstream TopicPublishInfo.selectOneMessageQueue(lastBrokerName)."""
    n = len(queues)
    if last_broker_name is None:
        return queues[abs(next_index()) % n]
    for _ in range(n):
        mq = queues[abs(next_index()) % n]
        if mq.broker_name != last_broker_name:
            return mq
    return queues[abs(next_index()) % n]
