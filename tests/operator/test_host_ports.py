"""Node ports of hostNetwork custom resources and clashes between them (pure)."""

from __future__ import annotations

from typing import Any

from ferrymq_operator import host_ports
from ferrymq_operator.host_ports import PortUser
from ferrymq_operator.models import parse_broker_spec, parse_nameserver_spec

REF = {"nameServerRef": {"name": "routes"}}


def broker(created: str, name: str = "orders", ns: str = "a", **spec: Any) -> PortUser:
    ranges = host_ports.broker_ranges(parse_broker_spec({**REF, **spec}))
    return PortUser("Broker", ns, name, created, ranges)


def nameserver(created: str, name: str = "routes", ns: str = "a", **spec: Any) -> PortUser:
    ranges = host_ports.nameserver_ranges(parse_nameserver_spec(spec))
    return PortUser("NameServer", ns, name, created, ranges)


def test_pod_network_resources_open_no_node_ports() -> None:
    assert host_ports.broker_ranges(parse_broker_spec(REF)) == ()
    assert host_ports.nameserver_ranges(parse_nameserver_spec({})) == ()


def test_ranges_cover_fast_listen_and_ha_ports_of_every_pod() -> None:
    ranges = host_ports.broker_ranges(
        parse_broker_spec({**REF, "hostNetwork": True, "groups": 2, "replicasPerGroup": 2})
    )
    assert ranges == ((10909, 10912), (10919, 10922), (10929, 10932), (10939, 10942))
    ns = host_ports.nameserver_ranges(parse_nameserver_spec({"hostNetwork": True, "replicas": 3}))
    assert ns == ((9876, 9878),)


def test_the_later_resource_is_the_one_in_conflict() -> None:
    first = broker("2026-11-24T10:00:00Z", "first", hostNetwork=True)
    second = broker("2026-11-24T10:00:05Z", "second", ns="b", hostNetwork=True, listenPort=10912)
    clashes = host_ports.conflicts(second, [first, second])
    assert len(clashes) == 1 and "Broker a/first" in clashes[0]
    assert host_ports.conflicts(first, [first, second]) == []
    message = host_ports.conflict_message(second, clashes)
    assert (
        "spec.listenPort" in message and "10910-10923" in message
    )  # two pods (replicasPerGroup 2)


def test_ranges_side_by_side_do_not_conflict() -> None:
    first = broker("2026-11-24T10:00:00Z", "first", hostNetwork=True, replicasPerGroup=2)
    # pod 1 of "first" uses 10919-10922; 10923 and up are free
    second = broker("2026-11-24T10:00:05Z", "second", hostNetwork=True, listenPort=10925)
    routes = nameserver("2026-11-24T10:00:06Z", hostNetwork=True, replicas=2)
    assert host_ports.conflicts(second, [first, second, routes]) == []
    assert host_ports.conflicts(routes, [first, second, routes]) == []


def test_same_second_is_decided_by_namespace_and_name() -> None:
    a = nameserver("2026-11-24T10:00:00Z", "a", hostNetwork=True)
    b = nameserver("2026-11-24T10:00:00Z", "b", hostNetwork=True)
    assert host_ports.conflicts(a, [a, b]) == []
    assert host_ports.conflicts(b, [a, b]) != []
    assert "spec.port" in host_ports.conflict_message(b, host_ports.conflicts(b, [a, b]))


def test_controller_mode_ranges_follow_the_broker_ids_and_add_the_controller_pods() -> None:
    ranges = host_ports.broker_ranges(
        parse_broker_spec(
            {**REF, "hostNetwork": True, "replicasPerGroup": 2, "failover": "controller"}
        )
    )
    # brokerId = ordinal + 1, so the pods are on listenPort + 10 and + 20; the controller pods
    # take listenPort - 5 and - 4
    assert ranges == ((10919, 10922), (10929, 10932), (10906, 10907))
