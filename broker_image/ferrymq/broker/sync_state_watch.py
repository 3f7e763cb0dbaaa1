"""How long a controller-mode replica has been outside its group's SyncStateSet, made visible.

A replica outside the set holds no guaranteed copy: the group runs with one copy less, and an
election cannot pick it. Catching up after a restart takes it out for a while; staying out (it
never learnt the master's HA address, a partition, a full disk) must not go unnoticed. Each
controller answer (every heartbeat) updates the watch; past ``bound_s`` one warning is logged
per episode, and the broker's metrics show the figures (alert: ``FerrymqReplicaOutOfSyncStateSet``
in the chart's rules).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ferrymq.controller.protocol import ReplicaInfo

log = logging.getLogger(__name__)

# a fresh replica of an empty group joins within a few heartbeats; one that catches up a
# large backlog may take longer, which is why the alert waits minutes on top of this
OUT_OF_SYNC_BOUND_S = 30.0


@dataclass(frozen=True, slots=True)
class SyncStateFigures:
    replica_id: int
    in_sync_state_set: bool
    out_of_sync_seconds: float


class SyncStateWatch:
    def __init__(
        self,
        group: str,
        replica_id: int,
        *,
        bound_s: float = OUT_OF_SYNC_BOUND_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.group = group
        self.replica_id = replica_id
        self.bound_s = bound_s
        self.clock = clock
        self.started = clock()
        # None while in the set; out of it since the broker started, until the first answer
        self.out_since: float | None = self.started
        self.warned = False

    def observe(self, info: ReplicaInfo, *, detail: str = "") -> None:
        """One controller answer: is this replica a member of the SyncStateSet it names?"""
        now = self.clock()
        if self.replica_id in info.sync_state_set:
            if self.warned:
                log.warning(
                    "replica %d of %s is in the SyncStateSet %s again after %.1f s outside",
                    self.replica_id,
                    self.group,
                    sorted(info.sync_state_set),
                    now - (self.out_since or now),
                )
            self.out_since = None
            self.warned = False
            return
        if self.out_since is None:
            self.out_since = now
        if not self.warned and now - self.out_since > self.bound_s:
            self.warned = True
            log.warning(
                "replica %d of %s has been outside the SyncStateSet %s for %.1f s "
                "(bound %.0f s; master %s, epoch %d%s): the group has one copy less",
                self.replica_id,
                self.group,
                sorted(info.sync_state_set),
                now - self.out_since,
                self.bound_s,
                info.master_broker_id,
                info.master_epoch,
                f"; {detail}" if detail else "",
            )

    def figures(self) -> SyncStateFigures:
        since = self.out_since
        return SyncStateFigures(
            self.replica_id,
            since is None,
            0.0 if since is None else max(0.0, self.clock() - since),
        )


class SyncStateCollector(Collector):
    """``ferrymq_controller_replica_in_sync_state_set`` and
    ``ferrymq_controller_replica_out_of_sync_state_set_seconds`` (label ``replica``: brokerId)."""

    def __init__(self, labels: dict[str, str], read: Callable[[], SyncStateFigures]) -> None:
        self.labels = labels
        self.read = read

    def collect(self) -> Iterator[Metric]:
        f = self.read()
        names = [*self.labels, "replica"]
        values = [*self.labels.values(), str(f.replica_id)]

        def gauge(name: str, doc: str, value: float) -> Metric:
            metric = GaugeMetricFamily(name, doc, labels=names)
            metric.add_metric(values, value)
            return metric

        yield gauge(
            "ferrymq_controller_replica_in_sync_state_set",
            "1 when the controller names this replica a member of its group's SyncStateSet",
            float(f.in_sync_state_set),
        )
        yield gauge(
            "ferrymq_controller_replica_out_of_sync_state_set_seconds",
            "Seconds this replica has been outside its group's SyncStateSet (0: a member)",
            f.out_of_sync_seconds,
        )
