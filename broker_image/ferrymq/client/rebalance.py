"""Rebalance: which queues this consumer owns, and the ProcessQueue per owned queue (upstream
RebalanceImpl / RebalancePushImpl).

Every 20 s, and when a broker says the group changed, each consumer recomputes its share
independently (seeds-digest RB1-RB16): the topic's readable queues and the group's client ids, both
sorted, go through the allocation strategy; queues no longer owned are dropped (offset persisted
first, so the next owner starts where this one stopped) and new ones get a ProcessQueue and a start
offset from ``compute_pull_from_where``. Broadcasting consumers own every queue.

The start offset decision is the pure :func:`start_offset_rule`; its lookups are the caller's.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from ferrymq.client.allocate import AllocateError, MessageQueue, allocate
from ferrymq.client.errors import MQClientError
from ferrymq.client.offset_store import OffsetStore, ReadOffsetType
from ferrymq.client.process_queue import ProcessQueue
from ferrymq.remoting.bodies import ConsumeFromWhere
from ferrymq.topic_validator import RETRY_GROUP_TOPIC_PREFIX

log = logging.getLogger(__name__)


class StartRule(enum.Enum):
    STORED = "stored"
    ZERO = "zero"
    MAX = "max"
    TIMESTAMP = "timestamp"
    SKIP = "skip"


def start_offset_rule(stored: int, policy: ConsumeFromWhere, topic: str) -> tuple[StartRule, int]:
    """Upstream computePullFromWhere, as a decision: what to look up, or the offset itself.

    ``stored`` >= 0 wins in every mode; -1 (no progress) applies the policy; below -1 (the store
    could not be read) skips the queue until the next rebalance.
    """
    if stored >= 0:
        return StartRule.STORED, stored
    if stored < -1:
        return StartRule.SKIP, -1
    if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        # a retry topic holds only messages that already failed once: consume them all
        return StartRule.ZERO, 0
    if policy in (
        ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        ConsumeFromWhere.CONSUME_FROM_MIN_OFFSET,
    ):
        return StartRule.ZERO, 0
    if policy is ConsumeFromWhere.CONSUME_FROM_TIMESTAMP:
        return StartRule.TIMESTAMP, -1
    return StartRule.MAX, -1


class RebalanceHost(Protocol):
    """What a rebalance needs from the client instance."""

    client_id: str

    def subscribe_queues(self, topic: str) -> list[MessageQueue]: ...

    async def find_consumer_ids(self, topic: str, group: str) -> list[str]: ...

    async def max_offset(self, mq: MessageQueue) -> int: ...

    async def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int: ...


OnAdd = Callable[[MessageQueue, ProcessQueue, int], None]
OnRemove = Callable[[MessageQueue, ProcessQueue], Awaitable[None]]


@dataclass
class RebalanceConfig:
    group: str
    clustering: bool = True
    strategy: str = "AVG"
    consume_from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
    consume_timestamp_ms: int = 0


class Rebalance:
    def __init__(
        self,
        config: RebalanceConfig,
        host: RebalanceHost,
        offset_store: OffsetStore,
        on_add: OnAdd,
        on_remove: OnRemove,
    ) -> None:
        self.config = config
        self.host = host
        self.offset_store = offset_store
        self.on_add = on_add
        self.on_remove = on_remove
        self.process_queues: dict[MessageQueue, ProcessQueue] = {}
        self.topics: list[str] = []
        # the periodic run, a broker's notification and start() may ask at the same time; one
        # at a time, or a queue could be added twice while its start offset is being looked up
        self._lock = asyncio.Lock()
        self.stopped = False

    async def do_rebalance(self) -> bool:
        """Rebalance every subscribed topic; True when this consumer's queue set changed."""
        async with self._lock:
            if self.stopped:
                return False
            return await self._do_rebalance()

    async def _do_rebalance(self) -> bool:
        changed = False
        for topic in list(self.topics):
            try:
                changed |= await self.rebalance_topic(topic)
            except MQClientError as exc:
                if not topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                    log.warning("rebalance of %s/%s failed: %s", self.config.group, topic, exc)
        for mq in [mq for mq in self.process_queues if mq.topic not in self.topics]:
            changed |= await self._remove(mq)
        return changed

    async def rebalance_topic(self, topic: str) -> bool:
        mq_all = sorted(self.host.subscribe_queues(topic))
        if not mq_all:
            if not topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                log.warning("rebalance of %s: no route for topic %s", self.config.group, topic)
            return False
        if not self.config.clustering:
            return await self.apply(topic, set(mq_all))
        cid_all = sorted(await self.host.find_consumer_ids(topic, self.config.group))
        if not cid_all:
            log.warning(
                "rebalance of %s/%s: the broker lists no consumer yet", self.config.group, topic
            )
            return False
        try:
            owned = allocate(
                self.config.strategy, self.config.group, self.host.client_id, mq_all, cid_all
            )
        except AllocateError as exc:
            log.error("allocation of %s/%s failed: %s", self.config.group, topic, exc)
            return False
        return await self.apply(topic, set(owned))

    async def apply(self, topic: str, owned: set[MessageQueue]) -> bool:
        """Upstream updateProcessQueueTableInRebalance."""
        changed = False
        for mq in [mq for mq in self.process_queues if mq.topic == topic and mq not in owned]:
            changed |= await self._remove(mq)
        for mq in sorted(owned - set(self.process_queues)):
            # a stale cached offset from an earlier ownership must not win over the broker's
            self.offset_store.remove_offset(mq)
            offset = await self.compute_pull_from_where(mq)
            if self.stopped:
                break
            if offset < 0:
                log.warning(
                    "%s: cannot start %s yet (no usable offset); next rebalance retries",
                    self.config.group,
                    mq,
                )
                continue
            pq = ProcessQueue()
            self.process_queues[mq] = pq
            log.info("%s: now owns %s from offset %d", self.config.group, mq, offset)
            self.on_add(mq, pq, offset)
            changed = True
        return changed

    async def _remove(self, mq: MessageQueue) -> bool:
        pq = self.process_queues.pop(mq, None)
        if pq is None:
            return False
        pq.dropped = True
        try:
            await self.on_remove(mq, pq)
        except MQClientError as exc:
            log.warning(
                "%s: persisting the offset of released %s failed: %s", self.config.group, mq, exc
            )
        self.offset_store.remove_offset(mq)
        log.info("%s: released %s", self.config.group, mq)
        return True

    async def compute_pull_from_where(self, mq: MessageQueue) -> int:
        try:
            stored = await self.offset_store.read_offset(mq, ReadOffsetType.READ_FROM_STORE)
        except MQClientError as exc:
            log.info("offset of %s unreadable: %s", mq, exc)
            stored = -2
        rule, offset = start_offset_rule(stored, self.config.consume_from_where, mq.topic)
        try:
            if rule is StartRule.MAX:
                return await self.host.max_offset(mq)
            if rule is StartRule.TIMESTAMP:
                return await self.host.search_offset(mq, self.config.consume_timestamp_ms)
        except MQClientError as exc:
            log.info("start offset of %s unavailable: %s", mq, exc)
            return -1
        return offset

    async def stop(self, timeout: float = 5.0) -> None:
        """No rebalance after this; waits (bounded) for one in progress to finish."""
        self.stopped = True
        try:
            await asyncio.wait_for(self._lock.acquire(), timeout)
        except TimeoutError:
            log.warning("%s: a rebalance still running at shutdown", self.config.group)
            return
        self._lock.release()

    async def release_all(self) -> None:
        async with self._lock:
            for mq in list(self.process_queues):
                await self._remove(mq)
