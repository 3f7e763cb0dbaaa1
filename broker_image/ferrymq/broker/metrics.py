"""Prometheus ``/metrics`` for a broker: a collector that reads the live counters at scrape time
(no module-level registry; one CollectorRegistry per broker), served by prometheus-client's HTTP
server thread on ``metricsPort`` (0 disables it).

``LagCollector`` exports the consumer-lag snapshot of ``ferrymq.broker.lag.sampler`` with the
metric names and labels of upstream RocketMQ 5.x (BrokerMetricsConstant: ``cluster``,
``node_type``, ``node_id``, ``topic``, ``consumer_group``, ``is_retry``, ``is_system``), plus
ferrymq's Burrow-style status and ETA. Scraping reads the last snapshot only: no store access
on the scrape thread and nothing on the send path. Series: one per (group, topic) per metric,
at most ``consumerLagMaxGroupTopics``; per-queue series only with
``consumerLagPerQueueMetrics=true``, at most ``consumerLagMaxQueueSeries`` (the most lagging).
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ferrymq.broker.lag.sampler import ConsumerLagSampler, is_system
from ferrymq.store.dispatch import RoundRecords

log = logging.getLogger(__name__)


@dataclass(slots=True)
class BrokerFigures:
    put_messages: int
    put_bytes: int
    put_failures: int
    got_messages: int
    got_bytes: int
    held_pulls: int
    consumer_groups: int
    consumers: int
    producers: int
    topics: int
    commit_log_max_offset: int
    dispatch_behind_bytes: int
    writable: bool
    store_corrupt_records_skipped: int = 0


class BrokerCollector(Collector):
    def __init__(self, labels: dict[str, str], read: Callable[[], BrokerFigures]) -> None:
        self.labels = labels
        self.read = read

    def collect(self) -> Iterator[Metric]:
        figures = self.read()
        names = list(self.labels)
        values = list(self.labels.values())

        def counter(name: str, doc: str, value: float) -> Metric:
            metric = CounterMetricFamily(name, doc, labels=names)
            metric.add_metric(values, value)
            return metric

        def gauge(name: str, doc: str, value: float) -> Metric:
            metric = GaugeMetricFamily(name, doc, labels=names)
            metric.add_metric(values, value)
            return metric

        yield counter("ferrymq_broker_put_messages", "Messages stored", figures.put_messages)
        yield counter("ferrymq_broker_put_bytes", "Body bytes stored", figures.put_bytes)
        yield counter(
            "ferrymq_broker_put_failures", "Refused or failed sends", figures.put_failures
        )
        yield counter(
            "ferrymq_broker_get_messages", "Messages served by pulls", figures.got_messages
        )
        yield counter("ferrymq_broker_get_bytes", "Bytes served by pulls", figures.got_bytes)
        yield gauge(
            "ferrymq_broker_held_pulls", "Pull requests held (long polling)", figures.held_pulls
        )
        yield gauge(
            "ferrymq_broker_consumer_groups", "Consumer groups online", figures.consumer_groups
        )
        yield gauge("ferrymq_broker_consumers", "Consumer connections", figures.consumers)
        yield gauge("ferrymq_broker_producers", "Producer connections", figures.producers)
        yield gauge("ferrymq_broker_topics", "Topics configured", figures.topics)
        yield gauge(
            "ferrymq_broker_commitlog_max_offset",
            "CommitLog end offset",
            figures.commit_log_max_offset,
        )
        yield gauge(
            "ferrymq_broker_dispatch_behind_bytes",
            "CommitLog bytes not yet in ConsumeQueues",
            figures.dispatch_behind_bytes,
        )
        yield gauge(
            "ferrymq_broker_writable", "1 when the broker accepts sends", float(figures.writable)
        )
        yield counter(
            "ferrymq_broker_store_corrupt_records_skipped",
            "Damaged CommitLog records skipped by recovery or dispatch",
            figures.store_corrupt_records_skipped,
        )


class TopicInCounter:
    """Records and record bytes stored per topic, fed by a store dispatch round listener (off
    the send path: the reput task calls it once per round)."""

    def __init__(self) -> None:
        self.messages: dict[str, int] = {}
        self.bytes: dict[str, int] = {}

    def on_dispatch_round(self, arrived: RoundRecords) -> None:
        messages, sizes = self.messages, self.bytes
        for topic, (count, size) in arrived.topic_totals().items():
            messages[topic] = messages.get(topic, 0) + count
            sizes[topic] = sizes.get(topic, 0) + size


def _flag(value: bool) -> str:
    return "true" if value else "false"


class LagCollector(Collector):
    """rocketmq_consumer_* / rocketmq_messages_* series from the lag sampler's snapshot."""

    def __init__(
        self, labels: dict[str, str], sampler: ConsumerLagSampler, inflow: TopicInCounter
    ) -> None:
        # upstream's node labels: cluster, node_type, node_id
        self.base = {
            "cluster": labels.get("cluster", ""),
            "node_type": "broker",
            "node_id": labels.get("broker", ""),
        }
        self.sampler = sampler
        self.inflow = inflow

    def collect(self) -> Iterator[Metric]:
        snap = self.sampler.snapshot
        base_names = list(self.base)
        base_values = list(self.base.values())
        group_labels = [*base_names, "topic", "consumer_group", "is_retry", "is_system"]

        def family(kind: Callable[..., Any], name: str, doc: str, labels: list[str]) -> Any:
            return kind(name, doc, labels=labels)

        lag = family(
            GaugeMetricFamily,
            "rocketmq_consumer_lag_messages",
            "Messages stored but not yet committed by the group",
            group_labels,
        )
        latency = family(
            GaugeMetricFamily,
            "rocketmq_consumer_lag_latency",
            "Milliseconds since the oldest unconsumed message was stored (0 without lag)",
            group_labels,
        )
        inflight = family(
            GaugeMetricFamily,
            "rocketmq_consumer_inflight_messages",
            "Messages pulled by the group but not yet committed",
            group_labels,
        )
        ready = family(
            GaugeMetricFamily,
            "rocketmq_consumer_ready_messages",
            "Messages stored and not yet pulled by the group",
            group_labels,
        )
        out = family(
            CounterMetricFamily,
            "rocketmq_messages_out",
            "Messages the group committed past (since broker start)",
            group_labels,
        )
        status = family(
            GaugeMetricFamily,
            "ferrymq_consumer_lag_status",
            "Burrow status of the group on the topic: 0 NOTFOUND 1 OK 2 WARN 3 ERR",
            group_labels,
        )
        eta = family(
            GaugeMetricFamily,
            "ferrymq_consumer_lag_eta_seconds",
            "Seconds until the backlog clears at the current drain rate; 0 no lag; -1 not clearing",
            group_labels,
        )
        for row in snap.topics:
            values = [
                *base_values,
                row.topic,
                row.group,
                _flag(row.is_retry),
                _flag(is_system(row.group, row.topic)),
            ]
            lag.add_metric(values, row.lag)
            latency.add_metric(values, row.latency_ms)
            inflight.add_metric(values, row.inflight)
            ready.add_metric(values, row.ready)
            out.add_metric(values, row.consumed_total)
            status.add_metric(values, int(row.status))
            eta.add_metric(values, row.eta_s)
        yield from (lag, latency, inflight, ready, out, status, eta)

        group_status = family(
            GaugeMetricFamily,
            "ferrymq_consumer_group_status",
            "Burrow status of the group on this broker: 0 NOTFOUND 1 OK 2 WARN 3 ERR",
            [*base_names, "consumer_group"],
        )
        for group, value in snap.groups.items():
            group_status.add_metric([*base_values, group], int(value))
        yield group_status

        topic_labels = [*base_names, "topic", "is_system"]
        messages_in = family(
            CounterMetricFamily,
            "rocketmq_messages_in",
            "Messages stored in the topic's queues",
            topic_labels,
        )
        for topic, count in snap.messages_in.items():
            messages_in.add_metric([*base_values, topic, _flag(is_system("", topic))], count)
        yield messages_in
        throughput = family(
            CounterMetricFamily,
            "rocketmq_throughput_in",
            "Bytes of records stored in the topic since broker start",
            topic_labels,
        )
        # a slave stores the master's records again: its copy would double the sums
        inflow = {} if self.sampler.is_slave() else dict(self.inflow.bytes)
        for topic, size in inflow.items():
            throughput.add_metric([*base_values, topic, _flag(is_system("", topic))], size)
        yield throughput
        dlq = family(
            CounterMetricFamily,
            "rocketmq_send_to_dlq_messages",
            "Messages moved to the group's dead letter queue",
            [*base_names, "consumer_group"],
        )
        for group, count in snap.dlq.items():
            dlq.add_metric([*base_values, group], count)
        yield dlq

        if self.sampler.config.consumer_lag_per_queue_metrics:
            queue_labels = [*base_names, "topic", "consumer_group", "queue_id"]
            q_lag = family(
                GaugeMetricFamily,
                "ferrymq_consumer_queue_lag_messages",
                "Per-queue lag (opt-in, most lagging queues only)",
                queue_labels,
            )
            q_latency = family(
                GaugeMetricFamily,
                "ferrymq_consumer_queue_lag_latency",
                "Per-queue lag latency in ms (opt-in)",
                queue_labels,
            )
            q_status = family(
                GaugeMetricFamily,
                "ferrymq_consumer_queue_status",
                "Per-queue Burrow status: 1 OK 2 WARN 4 STOP 5 STALL 6 REWIND",
                queue_labels,
            )
            for q in self.sampler.top_queues():
                values = [*base_values, q.topic, q.group, str(q.queue_id)]
                q_lag.add_metric(values, q.lag)
                q_latency.add_metric(values, q.latency_ms)
                q_status.add_metric(values, int(q.status))
            yield from (q_lag, q_latency, q_status)

        meta = family(
            GaugeMetricFamily,
            "ferrymq_consumer_lag_dropped_pairs",
            "(group, topic) pairs over consumerLagMaxGroupTopics, not sampled",
            base_names,
        )
        meta.add_metric(base_values, snap.dropped_pairs)
        yield meta
        tick = family(
            GaugeMetricFamily,
            "ferrymq_consumer_lag_sample_seconds",
            "Time the last lag sample took",
            base_names,
        )
        tick.add_metric(base_values, snap.tick_seconds)
        yield tick


class DiskCollector(Collector):
    """Disk use of the store's CommitLog directory, read at scrape (a statvfs call), for the
    "disk almost full" alert next to the broker's own ``diskMaxUsedSpaceRatio``."""

    def __init__(
        self, labels: dict[str, str], path: Callable[[], str], max_used_ratio: Callable[[], float]
    ) -> None:
        self.labels = labels
        self.path = path
        self.max_used_ratio = max_used_ratio

    def collect(self) -> Iterator[Metric]:
        names = list(self.labels)
        values = list(self.labels.values())
        try:
            usage = shutil.disk_usage(self.path())
        except OSError:
            return
        used = GaugeMetricFamily(
            "ferrymq_broker_disk_used_ratio",
            "Used share of the CommitLog directory's file system (0-1)",
            labels=names,
        )
        used.add_metric(values, usage.used / usage.total if usage.total else 0.0)
        yield used
        free = GaugeMetricFamily(
            "ferrymq_broker_disk_free_bytes", "Free bytes of that file system", labels=names
        )
        free.add_metric(values, usage.free)
        yield free
        limit = GaugeMetricFamily(
            "ferrymq_broker_disk_max_used_ratio",
            "diskMaxUsedSpaceRatio: above it the broker deletes files early / refuses writes",
            labels=names,
        )
        limit.add_metric(values, self.max_used_ratio())
        yield limit


class MetricsServer:
    def __init__(self, host: str, port: int, collector: Collector) -> None:
        self.host = host
        self.port = port
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(collector)
        self._server: Any = None
        self._thread: Any = None

    def start(self) -> None:
        self._server, self._thread = start_http_server(self.port, self.host, registry=self.registry)
        self.port = self._server.server_port
        log.info("metrics on http://%s:%d/metrics", self.host, self.port)

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
