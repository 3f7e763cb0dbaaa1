"""What the lifecycle steps share: how a broker pod is addressed, how events are collected."""

from __future__ import annotations

from collections.abc import Callable

from ferrymq_operator.builders import names
from ferrymq_operator.builders.names import Owner

Events = list[tuple[str, str, str]]
# (group, brokerId) -> the pod's listenPort (BrokerSpec.pod_ports); None: every pod on the default.
PortOf = Callable[[int, int], int]


def pod_address(
    owner: Owner, group: int, broker_id: int, domain: str, port_of: PortOf | None
) -> str:
    port = names.BROKER_PORT if port_of is None else port_of(group, broker_id)
    return names.broker_pod_address(owner.name, owner.namespace, group, broker_id, domain, port)
