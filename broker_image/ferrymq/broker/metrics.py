"""Prometheus ``/metrics`` for a broker: a collector that reads the live counters at scrape time
(no module-level registry; one CollectorRegistry per broker), served by prometheus-client's HTTP
server thread on ``metricsPort`` (0 disables it)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

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
