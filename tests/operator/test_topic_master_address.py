"""Where the Topic/ConsumerGroup reconciler finds a group's master in the cluster (pure)."""

from __future__ import annotations

from typing import Any

from ferrymq_operator.topics.reconcile import DnsAddresses

DOMAIN = "cluster.local"


def broker_body(spec: dict[str, Any], status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": "orders", "namespace": "prod"},
        "spec": {"nameServerRef": {"name": "routes"}, **spec},
        "status": status or {},
    }


def test_default_ports_and_pod_0() -> None:
    addr = DnsAddresses(DOMAIN).master(broker_body({"groups": 2}), 1)
    assert addr == "orders-broker-1-0.orders-broker-hs.prod.svc.cluster.local:10911"


def test_host_network_uses_the_masters_own_port() -> None:
    body = broker_body(
        {"groups": 2, "replicasPerGroup": 2, "hostNetwork": True, "listenPort": 20911}
    )
    # global index of group 1's master = 1 * 2 + 0: listenPort + 20
    assert (
        DnsAddresses(DOMAIN)
        .master(body, 1)
        .endswith("orders-broker-1-0.orders-broker-hs.prod.svc.cluster.local:20931")
    )


def test_controller_mode_follows_the_elected_master() -> None:
    spec = {
        "replicasPerGroup": 2,
        "hostNetwork": True,
        "listenPort": 21911,
        "failover": "controller",
    }
    elected = {"groupMasters": [{"brokerName": "orders-broker-0", "masterBrokerId": 2}]}
    addr = DnsAddresses(DOMAIN).master(broker_body(spec, elected), 0)
    # brokerId 2 is pod ordinal 1, on listenPort + 10 * 2
    assert addr == "orders-broker-0-1.orders-broker-hs.prod.svc.cluster.local:21931"
    # before any election: the first replica (pod 0, brokerId 1)
    first = DnsAddresses(DOMAIN).master(broker_body(spec), 0)
    assert first == "orders-broker-0-0.orders-broker-hs.prod.svc.cluster.local:21921"
