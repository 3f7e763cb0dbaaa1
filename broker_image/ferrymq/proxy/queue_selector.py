"""Which queue a message goes to and which queues a consumer is given (upstream
``MessageQueueView``/``MessageQueueSelector`` and ``SendMessageQueueSelector``). Pure.

A message with a message group goes to ``writeQueues[consistentHash(group.hashCode(), n)]`` (Guava
``Hashing.consistentHash``, so a group lands on the same queue as with upstream's proxy); others
round-robin over the writable queues of every broker.
"""

from __future__ import annotations

from dataclasses import dataclass

from ferrymq.message import java_string_hash
from ferrymq.remoting.bodies import TopicRouteData

PERM_WRITE = 0x2
PERM_READ = 0x4

_LCG_MULTIPLIER = 2862933555777941757
_MASK64 = (1 << 64) - 1


def consistent_hash(value: int, buckets: int) -> int:
    """Guava ``Hashing.consistentHash(long, int)``: a bucket in [0, buckets)."""
    if buckets <= 0:
        raise ValueError(f"buckets must be positive: {buckets}")
    state = value & _MASK64
    candidate = 0
    while True:
        state = (_LCG_MULTIPLIER * state + 1) & _MASK64
        # (double) ((int) (state >>> 33) + 1) / 2^31
        as_int = state >> 33
        if as_int >= 1 << 31:
            as_int -= 1 << 32
        next_double = (as_int + 1) / float(1 << 31)
        nxt = int((candidate + 1) / next_double)
        if 0 <= nxt < buckets:
            candidate = nxt
        else:
            return candidate


@dataclass(frozen=True, slots=True)
class Queue:
    broker_name: str
    queue_id: int


def write_queues(route: TopicRouteData) -> list[Queue]:
    """Every writable queue, brokers in name order (upstream topicRouteData2TopicPublishInfo)."""
    out: list[Queue] = []
    for qd in sorted(route.queue_datas, key=lambda q: q.broker_name):
        if qd.perm & PERM_WRITE:
            out.extend(Queue(qd.broker_name, i) for i in range(qd.write_queue_nums))
    return out


def readable_brokers(route: TopicRouteData) -> list[str]:
    return sorted(
        qd.broker_name for qd in route.queue_datas if qd.perm & PERM_READ and qd.read_queue_nums > 0
    )


def for_message_group(queues: list[Queue], message_group: str) -> Queue:
    return queues[consistent_hash(java_string_hash(message_group), len(queues))]
