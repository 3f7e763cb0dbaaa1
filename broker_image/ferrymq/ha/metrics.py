"""Prometheus metrics of replication, served on the broker's ``metricsPort`` next to its own.

Read from the live :class:`~ferrymq.ha.service.HAService` at scrape time (no module registry):

- master: connected slaves, each slave's acknowledged offset and lag in bytes behind the master's
  CommitLog end, the highest acknowledged offset (push2SlaveMaxOffset), and under SYNC_MASTER the
  replica waits by result (ok / FLUSH_SLAVE_TIMEOUT / SLAVE_NOT_AVAILABLE / cancelled) and those
  pending;
- slave: the master address followed and whether it is connected, the offset fetched so far
  (the slave's CommitLog end), bytes received and connects made.

The scrape runs in prometheus-client's HTTP thread: figures are copied into plain values by
:func:`ha_figures` first, so the collector only formats them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ferrymq.ha.service import HAService


@dataclass(slots=True)
class SlaveLag:
    peer: str
    ack_offset: int
    lag_bytes: int


@dataclass(slots=True)
class HAFigures:
    role: str
    local_max_offset: int
    # master side
    slaves: list[SlaveLag] = field(default_factory=list)
    push2slave_max_offset: int = 0
    sync_waits_ok: int = 0
    sync_waits_timeout: int = 0
    sync_waits_slave_not_available: int = 0
    sync_waits_cancelled: int = 0
    sync_waits_pending: int = 0
    # slave side
    master_address: str = ""
    master_connected: bool = False
    bytes_received: int = 0
    connects: int = 0


def slave_lag(master_max_offset: int, ack_offset: int) -> int:
    """Bytes a slave still lacks; a slave that has not reported yet (-1) lacks everything."""
    return max(0, master_max_offset - max(ack_offset, 0))


def ha_figures(service: HAService) -> HAFigures:
    """A consistent-enough copy of the service's counters (each value read once)."""
    local_max = service.port.max_offset()
    figures = HAFigures(role=service.role.value, local_max_offset=local_max)
    if service.master is not None:
        for peer, ack in sorted(service.master.slave_ack_offsets().items()):
            figures.slaves.append(SlaveLag(peer, ack, slave_lag(local_max, ack)))
    transfer = service.transfer
    if transfer is not None:
        figures.push2slave_max_offset = transfer.push2slave_max_offset
        figures.sync_waits_ok = transfer.acked
        figures.sync_waits_timeout = transfer.timeouts
        figures.sync_waits_slave_not_available = transfer.not_available
        figures.sync_waits_cancelled = transfer.cancelled
        figures.sync_waits_pending = transfer.pending
    client = service.client
    if client is not None:
        figures.master_address = client.master_address or ""
        figures.master_connected = client.connected
        figures.bytes_received = client.bytes_received
        figures.connects = client.connects
    return figures


class HACollector(Collector):
    def __init__(self, labels: dict[str, str], read: Callable[[], HAFigures]) -> None:
        self.labels = labels
        self.read = read

    def collect(self) -> Iterator[Metric]:
        f = self.read()
        names = list(self.labels)
        values = list(self.labels.values())

        def gauge(name: str, doc: str, value: float, **extra: str) -> Metric:
            metric = GaugeMetricFamily(name, doc, labels=[*names, *extra])
            metric.add_metric([*values, *extra.values()], value)
            return metric

        def counter(name: str, doc: str, value: float) -> Metric:
            metric = CounterMetricFamily(name, doc, labels=names)
            metric.add_metric(values, value)
            return metric

        yield gauge("ferrymq_ha_role", "This broker's brokerRole (always 1)", 1, role=f.role)
        yield gauge(
            "ferrymq_ha_commitlog_max_offset",
            "This broker's CommitLog end offset as replication sees it",
            f.local_max_offset,
        )
        if f.role != "SLAVE":
            yield gauge("ferrymq_ha_connected_slaves", "Slaves connected", len(f.slaves))
            ack = GaugeMetricFamily(
                "ferrymq_ha_slave_ack_offset",
                "Last CommitLog offset a slave acknowledged (-1: no report yet)",
                labels=[*names, "slave"],
            )
            lag = GaugeMetricFamily(
                "ferrymq_ha_slave_lag_bytes",
                "CommitLog bytes a slave has not acknowledged yet",
                labels=[*names, "slave"],
            )
            for slave in f.slaves:
                ack.add_metric([*values, slave.peer], slave.ack_offset)
                lag.add_metric([*values, slave.peer], slave.lag_bytes)
            yield ack
            yield lag
            yield gauge(
                "ferrymq_ha_push2slave_max_offset",
                "Highest offset any slave acknowledged since start",
                f.push2slave_max_offset,
            )
            waits = CounterMetricFamily(
                "ferrymq_ha_sync_waits",
                "SYNC_MASTER replica waits (puts asking for a slave ack), by result",
                labels=[*names, "result"],
            )
            for result, count in (
                ("ok", f.sync_waits_ok),
                ("flush_slave_timeout", f.sync_waits_timeout),
                ("slave_not_available", f.sync_waits_slave_not_available),
                ("cancelled", f.sync_waits_cancelled),
            ):
                waits.add_metric([*values, result], count)
            yield waits
            yield gauge(
                "ferrymq_ha_sync_waits_pending",
                "SYNC_MASTER puts waiting for a slave now",
                f.sync_waits_pending,
            )
        else:
            yield gauge(
                "ferrymq_ha_master_connected",
                "1 when connected to the master named by the label",
                float(f.master_connected),
                master=f.master_address,
            )
            yield gauge(
                "ferrymq_ha_slave_fetched_offset",
                "CommitLog offset fetched from the master so far",
                f.local_max_offset,
            )
            yield counter(
                "ferrymq_ha_slave_received_bytes", "Bytes received from masters", f.bytes_received
            )
            yield counter("ferrymq_ha_slave_connects", "Connections made to masters", f.connects)
