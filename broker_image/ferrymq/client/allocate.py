"""Queue allocation strategies of a clustering consumer group, as pure functions.

Mirrors upstream ``org.apache.rocketmq.client.consumer.rebalance``: AllocateMessageQueueAveragely
("AVG"), AllocateMessageQueueAveragelyByCircle ("AVG_BY_CIRCLE"), AllocateMessageQueueConsistentHash
("CONSISTENT_HASH"), AllocateMessageQueueByConfig ("CONFIG") and AllocateMessageQueueByMachineRoom
("MACHINE_ROOM").

There is no coordinator: every consumer of a group runs the same function over the same *sorted*
queue and client-id lists (RebalanceImpl sorts both before calling), and takes the part that names
itself. The results must therefore be byte-for-byte what the Java client computes, or a mixed group
(Java + Python consumers) would own some queues twice and others never. Invariants, for the
AVG, AVG_BY_CIRCLE and CONSISTENT_HASH strategies, over all ``cid`` in ``cid_all``: the allocations
are pairwise disjoint and their union is ``mq_all``.

A queue is any ``(topic, brokerName, queueId)`` tuple: :class:`MessageQueue` here, or another
NamedTuple with the same field order (the Spark rebalance audit passes its own); results keep the
caller's objects.
"""

from __future__ import annotations

import bisect
import hashlib
import logging
from collections.abc import Callable, Collection, Sequence
from typing import NamedTuple, TypeVar

log = logging.getLogger(__name__)

DEFAULT_VIRTUAL_NODES = 10
"""AllocateMessageQueueConsistentHash() uses 10 virtual nodes per client."""


class MessageQueue(NamedTuple):
    """One queue of a topic on one broker group; tuple order is upstream ``compareTo`` order."""

    topic: str
    broker_name: str
    queue_id: int

    def __str__(self) -> str:
        return queue_key(self)


Q = TypeVar("Q", bound=tuple[str, str, int])


class AllocateError(ValueError):
    """Illegal arguments (upstream IllegalArgumentException): the rebalance of that topic is skipped."""


def _check(
    consumer_group: str, current_cid: str, mq_all: Sequence[Q], cid_all: Sequence[str]
) -> bool:
    """Upstream AbstractAllocateMessageQueueStrategy.check: raise on empty input, False if not a member."""
    if not current_cid:
        raise AllocateError("currentCID is empty")
    if not mq_all:
        raise AllocateError("mqAll is null or mqAll empty")
    if not cid_all:
        raise AllocateError("cidAll is null or cidAll empty")
    if current_cid not in cid_all:
        # The broker has not seen our heartbeat yet: own nothing until it has (never guess).
        log.info(
            "[BUG] ConsumerGroup: %s The consumerId: %s not in cidAll: %s",
            consumer_group,
            current_cid,
            list(cid_all),
        )
        return False
    return True


def allocate_averagely(
    consumer_group: str, current_cid: str, mq_all: Sequence[Q], cid_all: Sequence[str]
) -> list[Q]:
    """AVG: contiguous blocks; the first ``len(mq_all) % len(cid_all)`` clients get one more."""
    if not _check(consumer_group, current_cid, mq_all, cid_all):
        return []
    n_mq, n_cid = len(mq_all), len(cid_all)
    index = cid_all.index(current_cid)
    mod = n_mq % n_cid
    if n_mq <= n_cid:
        average = 1
    elif mod > 0 and index < mod:
        average = n_mq // n_cid + 1
    else:
        average = n_mq // n_cid
    start = index * average if (mod > 0 and index < mod) else index * average + mod
    count = min(average, n_mq - start)
    return [mq_all[(start + i) % n_mq] for i in range(count)]


def allocate_averagely_by_circle(
    consumer_group: str, current_cid: str, mq_all: Sequence[Q], cid_all: Sequence[str]
) -> list[Q]:
    """AVG_BY_CIRCLE: deal the queues round-robin, client ``i`` gets queues ``i, i+C, i+2C, ...``."""
    if not _check(consumer_group, current_cid, mq_all, cid_all):
        return []
    index = cid_all.index(current_cid)
    return list(mq_all[index :: len(cid_all)])


def md5_hash(key: str) -> int:
    """Upstream ConsistentHashRouter.MD5Hash: the first 4 MD5 bytes, big-endian, unsigned."""
    return int.from_bytes(
        hashlib.md5(key.encode("utf-8"), usedforsecurity=False).digest()[:4], "big"
    )


HashFunction = Callable[[str], int]


def queue_key(mq: tuple[str, str, int]) -> str:
    """The text upstream hashes for a queue (``MessageQueue.toString()``)."""
    topic, broker_name, queue_id = mq
    return f"MessageQueue [topic={topic}, brokerName={broker_name}, queueId={queue_id}]"


class HashRing(NamedTuple):
    """Upstream ConsistentHashRouter: sorted virtual-node hashes and the client owning each."""

    hashes: list[int]
    owners: list[str]

    @classmethod
    def build(
        cls,
        cid_all: Sequence[str],
        virtual_nodes: int = DEFAULT_VIRTUAL_NODES,
        hash_fn: HashFunction = md5_hash,
    ) -> HashRing:
        if virtual_nodes < 0:
            raise AllocateError(f"illegal virtualNodeCnt :{virtual_nodes}")
        ring: dict[int, str] = {}
        for cid in cid_all:
            # addNode numbers a repeated client's replicas after the ones already on the ring.
            existing = sum(1 for owner in ring.values() if owner == cid)
            for i in range(virtual_nodes):
                # TreeMap.put: on a hash collision the later virtual node replaces the earlier.
                ring[hash_fn(f"{cid}-{i + existing}")] = cid
        hashes = sorted(ring)
        return cls(hashes, [ring[h] for h in hashes])

    def route(self, key: str, hash_fn: HashFunction = md5_hash) -> str | None:
        """The owner of ``key``: first virtual node at or after its hash, wrapping to the first."""
        if not self.hashes:
            return None
        pos = bisect.bisect_left(self.hashes, hash_fn(key))
        return self.owners[pos if pos < len(self.hashes) else 0]


def allocate_consistent_hash(
    consumer_group: str,
    current_cid: str,
    mq_all: Sequence[Q],
    cid_all: Sequence[str],
    *,
    virtual_nodes: int = DEFAULT_VIRTUAL_NODES,
    hash_fn: HashFunction = md5_hash,
) -> list[Q]:
    """CONSISTENT_HASH: MD5 ring with ``virtual_nodes`` per client; a queue goes to the next node."""
    if virtual_nodes < 0:
        raise AllocateError(f"illegal virtualNodeCnt :{virtual_nodes}")
    if not _check(consumer_group, current_cid, mq_all, cid_all):
        return []
    ring = HashRing.build(cid_all, virtual_nodes, hash_fn)
    return [mq for mq in mq_all if ring.route(queue_key(mq), hash_fn) == current_cid]


def allocate_by_config(
    consumer_group: str,
    current_cid: str,
    mq_all: Sequence[Q],
    cid_all: Sequence[str],
    *,
    config_queues: Sequence[Q],
) -> list[Q]:
    """CONFIG: the configured queue list, whatever the route and the group say (upstream ignores both)."""
    return list(config_queues)


def machine_room_of(broker_name: str) -> str | None:
    """The room prefix of a ``room@broker`` name, or None when the name has no single ``@``."""
    parts = broker_name.split("@")
    # Java's String.split drops trailing empty strings: "room@" is one part, not two.
    while parts and parts[-1] == "":
        parts.pop()
    return parts[0] if len(parts) == 2 else None


def allocate_by_machine_room(
    consumer_group: str,
    current_cid: str,
    mq_all: Sequence[Q],
    cid_all: Sequence[str],
    *,
    machine_rooms: Collection[str],
) -> list[Q]:
    """MACHINE_ROOM: queues on brokers named ``room@name`` with ``room`` in ``machine_rooms``, in
    contiguous blocks of ``len // C``; the remainder is dealt one each to the first clients."""
    if not current_cid:
        raise AllocateError("currentCID is empty")
    if current_cid not in cid_all:
        return []
    eligible = [mq for mq in mq_all if machine_room_of(mq[1]) in machine_rooms]
    n_cid = len(cid_all)
    index = cid_all.index(current_cid)
    block, rem = divmod(len(eligible), n_cid)
    result = list(eligible[block * index : block * index + block])
    if rem > index:
        result.append(eligible[index + block * n_cid])
    return result


STRATEGY_NAMES: dict[str, str] = {
    "AVG": "AVG",
    "AVG_BY_CIRCLE": "AVG_BY_CIRCLE",
    "CONSISTENT_HASH": "CONSISTENT_HASH",
    "CONFIG": "CONFIG",
    "MACHINE_ROOM": "MACHINE_ROOM",
    "AllocateMessageQueueAveragely": "AVG",
    "AllocateMessageQueueAveragelyByCircle": "AVG_BY_CIRCLE",
    "AllocateMessageQueueConsistentHash": "CONSISTENT_HASH",
    "AllocateMessageQueueByConfig": "CONFIG",
    "AllocateMessageQueueByMachineRoom": "MACHINE_ROOM",
}
"""Accepted spellings -> upstream ``getName()``; fully qualified Java class names also resolve."""


def strategy_name(name: str) -> str:
    """Normalise a strategy spelling (``AVG``, ``AllocateMessageQueueAveragely``, a Java FQCN)."""
    short = name.strip().rsplit(".", 1)[-1]
    try:
        return STRATEGY_NAMES[short]
    except KeyError:
        known = ", ".join(sorted({*STRATEGY_NAMES.values()}))
        raise AllocateError(f"unknown allocation strategy {name!r}; known: {known}") from None


def allocate(
    strategy: str,
    consumer_group: str,
    current_cid: str,
    mq_all: Sequence[Q],
    cid_all: Sequence[str],
    *,
    virtual_nodes: int = DEFAULT_VIRTUAL_NODES,
    config_queues: Sequence[Q] | None = None,
    machine_rooms: Collection[str] | None = None,
) -> list[Q]:
    """Run the strategy named ``strategy`` (see :func:`strategy_name`) for ``current_cid``.

    ``mq_all`` and ``cid_all`` must already be sorted, as RebalanceImpl does, for every client
    to agree. CONFIG needs ``config_queues`` and MACHINE_ROOM ``machine_rooms``.
    """
    name = strategy_name(strategy)
    if name == "AVG":
        return allocate_averagely(consumer_group, current_cid, mq_all, cid_all)
    if name == "AVG_BY_CIRCLE":
        return allocate_averagely_by_circle(consumer_group, current_cid, mq_all, cid_all)
    if name == "CONSISTENT_HASH":
        return allocate_consistent_hash(
            consumer_group, current_cid, mq_all, cid_all, virtual_nodes=virtual_nodes
        )
    if name == "CONFIG":
        if config_queues is None:
            raise AllocateError("strategy CONFIG needs config_queues (the configured queue list)")
        return allocate_by_config(
            consumer_group, current_cid, mq_all, cid_all, config_queues=config_queues
        )
    if machine_rooms is None:
        raise AllocateError("strategy MACHINE_ROOM needs machine_rooms (the consumer's rooms)")
    return allocate_by_machine_room(
        consumer_group, current_cid, mq_all, cid_all, machine_rooms=machine_rooms
    )


def allocate_all(
    strategy: str,
    consumer_group: str,
    mq_all: Sequence[Q],
    cid_all: Sequence[str],
    *,
    virtual_nodes: int = DEFAULT_VIRTUAL_NODES,
    machine_rooms: Collection[str] | None = None,
) -> dict[str, list[Q]]:
    """What every client of the group computes for itself: ``{cid: owned queues}``."""
    return {
        cid: allocate(
            strategy,
            consumer_group,
            cid,
            mq_all,
            cid_all,
            virtual_nodes=virtual_nodes,
            machine_rooms=machine_rooms,
        )
        for cid in dict.fromkeys(cid_all)
    }
