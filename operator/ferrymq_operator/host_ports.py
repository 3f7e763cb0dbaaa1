"""Ports that hostNetwork custom resources open on a node, and clashes between them (pure).

Pods on the host network share the node's ports. The operator spreads the pods of one custom
resource over distinct ports (NameServer pod k: ``port + k``; broker pod i: ``listenPort + 10 * i``
and its fast/HA ports), but two custom resources can still pick overlapping ranges. The scheduler
does not know about ports that pods do not declare, so such pods would land on one node and the
second would crash-loop on "address already in use". Instead, the custom resource created later is
refused with a ``PortConflict`` failure that names the other one and what to change.

Every hostNetwork resource can land on any node (the operator sets no node affinity between
resources), so any overlap counts, whatever the namespaces.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ferrymq_operator import models
from ferrymq_operator.builders import controller

PortRange = tuple[int, int]  # inclusive


@dataclass(frozen=True)
class PortUser:
    """One hostNetwork custom resource and the node ports its pods open."""

    kind: str
    namespace: str
    name: str
    created: str  # RFC 3339 creationTimestamp: the earlier resource keeps its ports
    ranges: tuple[PortRange, ...]

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.created, self.namespace, self.name)

    def describe(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


def nameserver_ranges(spec: models.NameServerSpec) -> tuple[PortRange, ...]:
    if not spec.host_network:
        return ()
    return ((spec.pod_port(0), spec.pod_port(spec.replicas - 1)),)


def broker_ranges(spec: models.BrokerSpec) -> tuple[PortRange, ...]:
    """Per pod: the fast channel (listenPort - 2) up to haListenPort (listenPort + 1)."""
    if not spec.host_network:
        return ()
    out = []
    # in controller mode brokerId is ordinal + 1, and the controller pods take ports too
    first_id = 1 if spec.failover == "controller" else 0
    for group in range(spec.groups):
        for broker_id in range(first_id, first_id + spec.replicas_per_group):
            listen, ha = spec.pod_ports(group, broker_id)
            out.append((listen - 2, ha))
    if spec.failover == "controller":
        out.append(controller.port_range(spec))
    return tuple(out)


def _overlap(a: PortRange, b: PortRange) -> bool:
    return a[0] <= b[1] and b[0] <= a[1]


def _span(ranges: tuple[PortRange, ...]) -> str:
    low, high = min(r[0] for r in ranges), max(r[1] for r in ranges)
    return f"{low}-{high}" if low != high else str(low)


def conflicts(me: PortUser, others: Iterable[PortUser]) -> list[str]:
    """Earlier resources whose ports overlap ``me``'s, each described for a status message."""
    out = []
    for other in sorted(others, key=lambda o: o.key):
        if (other.kind, other.namespace, other.name) == (me.kind, me.namespace, me.name):
            continue
        if other.key >= me.key:
            continue  # the later one of the two is the one refused
        clash = sorted({max(a[0], b[0]) for a in me.ranges for b in other.ranges if _overlap(a, b)})
        if clash:
            out.append(f"{other.describe()} (node ports {_span(other.ranges)}, from {clash[0]})")
    return out


def conflict_message(me: PortUser, clashes: list[str]) -> str:
    field = "spec.port" if me.kind == "NameServer" else "spec.listenPort"
    return (
        f"hostNetwork ports {_span(me.ranges)} overlap those of {'; '.join(clashes)}, created "
        f"earlier; pods of both can land on one node and fail to bind. Change {field} so that "
        f"the ranges do not overlap (nothing is created until then)"
    )
