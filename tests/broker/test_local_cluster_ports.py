"""local-cluster's port layout: no broker's VIP port (listenPort - 2) or HA port (listenPort + 1)
is another broker's port, for any number of groups and slaves (a client's VIP channel to a slave
once reached its master)."""

from __future__ import annotations

from pathlib import Path

import pytest
from ferrymq.broker.local_cluster import LocalCluster, group_port_step


@pytest.mark.parametrize("slaves", [0, 1, 2, 3, 4])
@pytest.mark.parametrize("groups", [1, 2, 5])
def test_no_broker_port_collides_with_another_brokers_ports(
    tmp_path: Path, groups: int, slaves: int
) -> None:
    cluster = LocalCluster(tmp_path, groups=groups, slaves=slaves, broker_port=10911)
    used: dict[int, str] = {}
    for spec in cluster.broker_specs():
        name = f"{spec.group}-{spec.broker_id}"
        for port in (spec.listen_port - 2, spec.listen_port, spec.listen_port + 1):
            assert port not in used, f"{name} port {port} is also {used[port]}'s"
            used[port] = name
    masters = [s.listen_port for s in cluster.broker_specs() if s.broker_id == 0]
    assert masters[:2] == [10911, 10911 + group_port_step(slaves)][: len(masters[:2])]


def test_upstream_convention_kept_for_small_groups() -> None:
    assert group_port_step(0) == 10 and group_port_step(1) == 10
    assert group_port_step(2) == 20 and group_port_step(4) == 20
