"""ConsumerLagSampler: on a timer (never on the send path), reads each (group, topic, queue)'s
committed, pulled and max offsets and the store time of its oldest unconsumed message, keeps a
sliding window of samples per queue, judges it (``status``) and publishes an immutable
``LagSnapshot`` that the /metrics collector and the admin tools read. Mirrors upstream 5.x
ConsumerLagCalculator (lag, inflight, ready, lag latency) plus Burrow-style status and an ETA.

Which pairs: every (group, topic) with a committed offset, plus every online group's
subscriptions, on topics this broker hosts; at most ``consumerLagMaxGroupTopics`` of them. Only
masters sample: a slave publishes an empty snapshot.
A queue the group never committed counts from the queue's min offset (all of it is backlog).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

from ferrymq.broker.client_registry import ConsumerManager
from ferrymq.broker.consumer_offsets import ConsumerOffsetManager, split_key
from ferrymq.broker.lag.config import LagConfig
from ferrymq.broker.lag.status import (
    LagStatus,
    Sample,
    eta_seconds,
    evaluate_group,
    evaluate_queue,
)
from ferrymq.broker.store_port import MessageStorePort
from ferrymq.broker.topic_config import (
    DLQ_GROUP_TOPIC_PREFIX,
    RETRY_GROUP_TOPIC_PREFIX,
    TopicConfigManager,
    is_system_topic,
)
from ferrymq.mixall import CID_RMQ_SYS_PREFIX
from ferrymq.tasks import Periodic

log = logging.getLogger(__name__)

# queues read between two yields to the event loop (a tick at 10k queues stays in small slices)
_SLICE = 256


class QueueLag(NamedTuple):
    group: str
    topic: str
    queue_id: int
    lag: int
    inflight: int
    ready: int
    latency_ms: int
    status: LagStatus


@dataclass(frozen=True, slots=True)
class GroupTopicLag:
    group: str
    topic: str
    lag: int
    inflight: int
    ready: int
    latency_ms: int
    """The largest of the topic's queues: the oldest unconsumed message of the group."""
    status: LagStatus
    eta_s: float
    consumed_total: int
    """The group's committed position on the topic (sum over queues) when first sampled, plus
    every advance since (monotonic: a rewind does not subtract)."""

    @property
    def is_retry(self) -> bool:
        return self.topic.startswith(RETRY_GROUP_TOPIC_PREFIX)


@dataclass(frozen=True, slots=True)
class LagSnapshot:
    at_ms: int = 0
    topics: tuple[GroupTopicLag, ...] = ()
    queues: tuple[QueueLag, ...] = ()
    """Per-queue rows, only with consumerLagPerQueueMetrics."""
    groups: dict[str, LagStatus] = field(default_factory=dict)
    messages_in: dict[str, int] = field(default_factory=dict)
    """Messages stored per topic (sum of the ConsumeQueues' max offsets: survives restarts)."""
    dlq: dict[str, int] = field(default_factory=dict)
    """Messages sent to each group's DLQ topic."""
    dropped_pairs: int = 0
    tick_seconds: float = 0.0


def is_system(group: str, topic: str) -> bool:
    return (
        is_system_topic(topic)
        or topic.startswith("RMQ_SYS_")
        or group.startswith(CID_RMQ_SYS_PREFIX)
    )


class ConsumerLagSampler:
    def __init__(
        self,
        config: LagConfig,
        store: MessageStorePort,
        topics: TopicConfigManager,
        offsets: ConsumerOffsetManager,
        consumers: ConsumerManager,
        *,
        is_slave: Callable[[], bool] = lambda: False,
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self.config = config
        self.store = store
        self.topics = topics
        self.offsets = offsets
        self.consumers = consumers
        self.is_slave = is_slave
        self.clock_ms = clock_ms
        self.snapshot = LagSnapshot()
        self._queue_windows: dict[tuple[str, str, int], deque[Sample]] = {}
        self._topic_windows: dict[tuple[str, str], deque[Sample]] = {}
        # (topic, queue, committed offset) -> store time of the message at that offset
        self._store_times: dict[tuple[str, int], tuple[int, int]] = {}
        self._consumed: dict[tuple[str, str], int] = {}
        self._loop = Periodic(
            "consumer-lag-sampler",
            self.tick,
            lambda: self.config.consumer_lag_sample_interval / 1000,
            first_now=True,
        )

    # --- lifecycle ------------------------------------------------------------------------
    def start(self) -> None:
        if self.config.consumer_lag_enable:
            self._loop.start()

    async def stop(self) -> None:
        await self._loop.stop()

    # --- sampling -------------------------------------------------------------------------
    def pairs(self) -> list[tuple[str, str]]:
        """(group, topic) pairs to sample, sorted, on topics this broker hosts."""
        out: set[tuple[str, str]] = set()
        for key in list(self.offsets.offset_table):
            parts = split_key(key)
            if parts is not None:
                out.add((parts[1], parts[0]))
        for group, info in list(self.consumers.table.items()):
            for topic in list(info.subscription_table):
                out.add((group, topic))
        return sorted(p for p in out if self.topics.get(p[1]) is not None)

    async def tick(self) -> LagSnapshot:
        """Take one sample of every pair, judge the windows, publish a new snapshot."""
        started = time.perf_counter()
        cfg = self.config
        now = self.clock_ms()
        if self.is_slave():
            # consumers commit to the master; a slave's copy would only repeat (and double in
            # sums) the master's series, and it has no consumers to tell STOP from STALL
            self._queue_windows.clear()
            self._topic_windows.clear()
            self.snapshot = LagSnapshot(at_ms=now)
            return self.snapshot
        pairs = self.pairs()
        limit = cfg.consumer_lag_max_group_topics
        dropped = max(0, len(pairs) - limit)
        pairs = pairs[:limit]
        horizon = now - cfg.consumer_lag_window
        eta_horizon = now - cfg.consumer_lag_eta_window
        rules = cfg.rules()
        # per-queue rows only feed the opt-in per-queue series
        per_queue = cfg.consumer_lag_per_queue_metrics
        queues: list[QueueLag] = []
        rows: list[GroupTopicLag] = []
        group_statuses: dict[str, list[LagStatus]] = {}
        live_queue_keys: set[tuple[str, str, int]] = set()
        get_max = self.store.get_max_offset_in_queue
        get_min = self.store.get_min_offset_in_queue
        read = 0
        for group, topic in pairs:
            config = self.topics.get(topic)
            if config is None:
                continue
            info = self.consumers.get(group)
            online = info is not None and bool(info.channels)
            committed = self.offsets.query_group_topic(group, topic)
            pulled = self.offsets.query_pull_offsets(group, topic)
            sum_commit = sum_max = sum_inflight = sum_ready = max_latency = 0
            statuses: list[LagStatus] = []
            # the per-queue loop is the sampler's whole cost: plain comparisons, no max()/min()
            for qid in range(config.read_queue_nums):
                max_offset = get_max(topic, qid)
                if max_offset < 0:
                    max_offset = 0
                commit = committed.get(qid, -1)
                if commit < 0:
                    commit = get_min(topic, qid)
                    if commit < 0:
                        commit = 0
                if commit > max_offset:
                    commit = max_offset
                lag = max_offset - commit
                latency = self._latency(topic, qid, commit, lag, now) if lag > 0 else 0
                pull = pulled.get(qid, commit)
                if pull < commit:
                    pull = commit
                elif pull > max_offset:
                    pull = max_offset
                inflight = pull - commit
                ready = max_offset - pull
                key = (group, topic, qid)
                live_queue_keys.add(key)
                window = self._queue_windows.get(key)
                if window is None:
                    window = self._queue_windows[key] = deque()
                window.append(Sample(now, commit, max_offset, latency))
                while window and window[0].at_ms < horizon:
                    window.popleft()
                status = evaluate_queue(window, consumer_online=online, rules=rules)
                statuses.append(status)
                if per_queue:
                    queues.append(
                        QueueLag(group, topic, qid, lag, inflight, ready, latency, status)
                    )
                sum_commit += commit
                sum_max += max_offset
                sum_inflight += inflight
                sum_ready += ready
                if latency > max_latency:
                    max_latency = latency
                read += 1
                if read % _SLICE == 0:
                    await asyncio.sleep(0)
            tkey = (group, topic)
            twindow = self._topic_windows.get(tkey)
            if twindow is None:
                twindow = self._topic_windows[tkey] = deque()
            if twindow:
                advanced = sum_commit - twindow[-1].commit_offset
                if advanced > 0:
                    self._consumed[tkey] = self._consumed.get(tkey, 0) + advanced
            else:
                # first sight: the position itself, as messages_in is (sum of the queues' offsets)
                self._consumed.setdefault(tkey, sum_commit)
            twindow.append(Sample(now, sum_commit, sum_max, max_latency))
            while twindow and twindow[0].at_ms < horizon:
                twindow.popleft()
            eta_window = [s for s in twindow if s.at_ms >= eta_horizon]
            group_status = evaluate_group(statuses)
            group_statuses.setdefault(group, []).append(group_status)
            rows.append(
                GroupTopicLag(
                    group=group,
                    topic=topic,
                    lag=sum_max - sum_commit,
                    inflight=sum_inflight,
                    ready=sum_ready,
                    latency_ms=max_latency,
                    status=group_status,
                    eta_s=eta_seconds(eta_window),
                    consumed_total=self._consumed.get(tkey, 0),
                )
            )
        self._forget(live_queue_keys, {(r.group, r.topic) for r in rows})
        self.snapshot = LagSnapshot(
            at_ms=now,
            topics=tuple(rows),
            queues=tuple(queues),
            groups={g: evaluate_group(s) for g, s in group_statuses.items()},
            messages_in=self._messages_in(),
            dlq=self._dlq(set(group_statuses)),
            dropped_pairs=dropped,
            tick_seconds=time.perf_counter() - started,
        )
        return self.snapshot

    def _latency(self, topic: str, qid: int, commit: int, lag: int, now: int) -> int:
        """now minus the store time of the oldest unconsumed message (the one at ``commit``)."""
        if lag <= 0:
            return 0
        cached = self._store_times.get((topic, qid))
        if cached is not None and cached[0] == commit:
            stored = cached[1]
        else:
            stored = self.store.get_message_store_timestamp(topic, qid, commit)
            if stored <= 0:
                # the committed offset's message expired: the oldest unconsumed is the first kept
                low = self.store.get_min_offset_in_queue(topic, qid)
                stored = self.store.get_message_store_timestamp(topic, qid, max(0, low))
            if stored <= 0:
                return 0
            self._store_times[(topic, qid)] = (commit, stored)
        return max(0, now - stored)

    def _forget(
        self, queue_keys: set[tuple[str, str, int]], topic_keys: set[tuple[str, str]]
    ) -> None:
        """Windows of pairs no longer sampled (group deleted, topic gone) are dropped."""
        for key in [k for k in self._queue_windows if k not in queue_keys]:
            del self._queue_windows[key]
        for tkey in [k for k in self._topic_windows if k not in topic_keys]:
            del self._topic_windows[tkey]
            self._consumed.pop(tkey, None)
        live_queues = {(t, q) for _, t, q in queue_keys}
        for skey in [k for k in self._store_times if k not in live_queues]:
            del self._store_times[skey]

    def _messages_in(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for topic, config in list(self.topics.table.items()):
            total = 0
            for qid in range(config.write_queue_nums):
                total += max(0, self.store.get_max_offset_in_queue(topic, qid))
            out[topic] = total
        return out

    def _dlq(self, groups: set[str]) -> dict[str, int]:
        """Messages in each group's DLQ topic; 0 for a sampled group without one yet."""
        out: dict[str, int] = dict.fromkeys(groups, 0)
        for topic, config in list(self.topics.table.items()):
            if topic.startswith(DLQ_GROUP_TOPIC_PREFIX):
                group = topic[len(DLQ_GROUP_TOPIC_PREFIX) :]
                out[group] = sum(
                    max(0, self.store.get_max_offset_in_queue(topic, q))
                    for q in range(config.write_queue_nums)
                )
        return out

    def top_queues(self) -> Iterator[QueueLag]:
        """The per-queue rows to export: the most lagging first, at most the configured bound."""
        rows = sorted(self.snapshot.queues, key=lambda q: q.lag, reverse=True)
        yield from rows[: self.config.consumer_lag_max_queue_series]
