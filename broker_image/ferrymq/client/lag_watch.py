"""LagWatcher: live consumer lag with Burrow-style status and ETA, seen from an admin client
(``ferrymq admin lag --watch``). Each ``sample()`` asks every master for
GET_BROKER_CONSUME_STATS (317: every group's committed and max offsets), QUERY_CONSUME_TIME_SPAN
(303: the lag latency of each queue) and whether the group is online, then judges the window
with the broker's own pure rules (``ferrymq.broker.lag.status``), so the CLI works against any
RocketMQ-compatible broker, not only ferrymq's /metrics."""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass

from ferrymq.broker.lag.status import (
    LagStatus,
    Rules,
    Sample,
    eta_seconds,
    evaluate_group,
    evaluate_queue,
)
from ferrymq.client.admin import AdminClient
from ferrymq.client.errors import MQClientError
from ferrymq.topic_validator import RETRY_GROUP_TOPIC_PREFIX

QueueKey = tuple[str, str, str, int]  # group, topic, broker, queue


@dataclass(frozen=True, slots=True)
class LagRow:
    group: str
    topic: str
    lag: int
    latency_ms: int
    status: LagStatus
    eta_s: float
    online: bool


class LagWatcher:
    def __init__(
        self,
        admin: AdminClient,
        *,
        group: str | None = None,
        window_s: float = 60.0,
        eta_window_s: float = 30.0,
        rules: Rules = Rules(),
        include_retry: bool = False,
    ) -> None:
        self.admin = admin
        self.group = group
        self.window_ms = int(window_s * 1000)
        self.eta_window_ms = int(eta_window_s * 1000)
        self.rules = rules
        self.include_retry = include_retry
        self._queues: dict[QueueKey, deque[Sample]] = {}
        self._topics: dict[tuple[str, str], deque[Sample]] = {}

    async def _online(self, group: str) -> bool:
        try:
            conn = await self.admin.consumer_connection(group)
        except MQClientError:
            return False
        return bool(conn.connection_set)

    async def sample(self) -> list[LagRow]:
        now = int(time.time() * 1000)
        # (group, topic) -> queue -> (commit, max)
        seen: dict[tuple[str, str], dict[tuple[str, int], tuple[int, int]]] = {}
        for addr in (await self.admin.master_addrs()).values():
            stats_list = await self.admin.broker_consume_stats(addr)
            for item in stats_list.consume_stats_list:
                for group, per_topic in item.items():
                    if self.group is not None and group != self.group:
                        continue
                    for stats in per_topic:
                        for mq, w in stats.offset_table.items():
                            if (
                                mq.topic.startswith(RETRY_GROUP_TOPIC_PREFIX)
                                and not self.include_retry
                            ):
                                continue
                            table = seen.setdefault((group, mq.topic), {})
                            table[(mq.broker_name, mq.queue_id)] = (
                                w.consumer_offset,
                                w.broker_offset,
                            )
        rows: list[LagRow] = []
        for (group, topic), queues in sorted(seen.items()):
            online = await self._online(group)
            latency = await self._latencies(group, topic, queues)
            statuses = []
            total_commit = total_max = max_latency = 0
            for (broker, qid), (commit, max_offset) in queues.items():
                lat = latency.get((broker, qid), 0) if max_offset > commit else 0
                window = self._queues.setdefault((group, topic, broker, qid), deque())
                window.append(Sample(now, commit, max_offset, lat))
                while window[0].at_ms < now - self.window_ms:
                    window.popleft()
                statuses.append(evaluate_queue(window, consumer_online=online, rules=self.rules))
                total_commit += commit
                total_max += max_offset
                max_latency = max(max_latency, lat)
            twindow = self._topics.setdefault((group, topic), deque())
            twindow.append(Sample(now, total_commit, total_max, max_latency))
            while twindow[0].at_ms < now - self.window_ms:
                twindow.popleft()
            eta = eta_seconds([s for s in twindow if s.at_ms >= now - self.eta_window_ms])
            rows.append(
                LagRow(
                    group=group,
                    topic=topic,
                    lag=max(0, total_max - total_commit),
                    latency_ms=max_latency,
                    status=evaluate_group(statuses),
                    eta_s=eta,
                    online=online,
                )
            )
        return rows

    async def _latencies(
        self, group: str, topic: str, queues: dict[tuple[str, int], tuple[int, int]]
    ) -> dict[tuple[str, int], int]:
        if all(max_offset <= commit for commit, max_offset in queues.values()):
            return {}
        try:
            spans = await self.admin.consume_time_span(group, topic)
        except MQClientError:
            return {}
        return {
            (s.message_queue.broker_name, s.message_queue.queue_id): max(0, s.delay_time)
            for s in spans
        }


def format_eta(eta_s: float) -> str:
    if eta_s < 0:
        return "not clearing"
    if eta_s == 0:
        return "-"
    seconds = round(eta_s)
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"
