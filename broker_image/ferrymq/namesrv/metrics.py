"""Prometheus ``/metrics`` of a NameServer on ``metricsPort`` (the broker's key; 0 disables it).

Served by prometheus-client's HTTP server thread from a registry of this NameServer only; the
collectors read the live figures at scrape time. Families: the security ones with the broker's
names (``ferrymq_acl_refused_requests_total{code,reason}``, ACL reloads, TLS plaintext refusals,
handshake failures, ``ferrymq_tls_certificate_expiry_days{path}``: ``ferrymq.acl.metrics``) and
the size of the route table.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ferrymq.acl.metrics import SecurityCollector
from ferrymq.acl.service import AclService
from ferrymq.namesrv.route_table import RouteTable
from ferrymq.remoting.tls import ServerTls

log = logging.getLogger(__name__)


class RouteCollector(Collector):
    def __init__(self, routes: RouteTable) -> None:
        self.routes = routes

    def collect(self) -> Iterator[Metric]:
        # a snapshot of the dicts: the event loop may change them while the scrape thread reads
        table = dict(self.routes.broker_addr_table)
        brokers = GaugeMetricFamily(
            "ferrymq_namesrv_brokers",
            "Broker addresses registered, by cluster and broker name",
            labels=["cluster", "broker"],
        )
        for name, data in sorted(table.items()):
            brokers.add_metric([data.cluster, name], len(dict(data.broker_addrs)))
        yield brokers
        clusters = GaugeMetricFamily("ferrymq_namesrv_clusters", "Clusters with a broker")
        clusters.add_metric([], len(self.routes.cluster_addr_table))
        yield clusters


class NamesrvMetrics:
    def __init__(
        self,
        host: str,
        port: int,
        routes: RouteTable,
        acl: AclService | None,
        tls: ServerTls | None,
    ) -> None:
        self.host = host
        self.port = port
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(RouteCollector(routes))
        self.registry.register(SecurityCollector({}, acl, tls))
        self._server: Any = None
        self._thread: Any = None

    def start(self) -> None:
        self._server, self._thread = start_http_server(self.port, self.host, registry=self.registry)
        self.port = self._server.server_port
        log.info("NameServer metrics on http://%s:%d/metrics", self.host, self.port)

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
