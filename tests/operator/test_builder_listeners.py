"""spec.listeners: Services per broker pod, the advertised address, status.listeners (pure)."""

from __future__ import annotations

from typing import Any

import javaproperties
import kubernetes_validate
import pytest
from ferrymq_operator.builders import broker, listeners, namesrv
from ferrymq_operator.builders.names import Owner
from ferrymq_operator.models import InvalidSpec, parse_broker_spec, parse_nameserver_spec

ADDR = "routes-namesrv-0.routes-namesrv-hs.prod.svc.cluster.local:9876"
REF = {"nameServerRef": {"name": "routes"}}
DOMAIN = "cluster.local"


def objects(owner: Owner, **spec: Any) -> dict[tuple[str, str], dict[str, Any]]:
    built = broker.desired(owner, parse_broker_spec({**REF, **spec}), ADDR, "policy/v1")
    return {(o["kind"], o["metadata"]["name"]): o for o in built}


def lb_service(name: str, ip: str | None) -> dict[str, Any]:
    status = {"loadBalancer": {"ingress": [{"ip": ip}]}} if ip else {"loadBalancer": {}}
    return {"metadata": {"name": name}, "status": status}


def test_loadbalancer_listener_one_service_per_broker_pod(broker_owner: Owner) -> None:
    listener = {
        "name": "ext",
        "type": "loadbalancer",
        "annotations": {"service.beta.kubernetes.io/aws-load-balancer-type": "nlb"},
        "loadBalancerSourceRanges": ["203.0.113.0/24"],
    }
    objs = objects(broker_owner, groups=2, listeners=[listener])
    services = [o for (kind, name), o in objs.items() if name.endswith("-external")]
    assert sorted(s["metadata"]["name"] for s in services) == [
        f"orders-broker-{g}-{i}-external" for g in range(2) for i in range(2)
    ]
    svc = objs[("Service", "orders-broker-1-0-external")]
    kubernetes_validate.validate(svc, "1.25", strict=True)
    assert svc["spec"]["type"] == "LoadBalancer"
    assert svc["spec"]["selector"] == {"statefulset.kubernetes.io/pod-name": "orders-broker-1-0"}
    assert svc["spec"]["ports"][0]["port"] == 10911
    assert "nodePort" not in svc["spec"]["ports"][0]
    assert svc["spec"]["loadBalancerSourceRanges"] == ["203.0.113.0/24"]
    assert svc["metadata"]["annotations"] == listener["annotations"]
    # every pod listens on the same port; the load balancer address is what differs
    conf = javaproperties.loads(
        objs[("ConfigMap", "orders-broker-1-config")]["data"]["broker-1.conf"]
    )
    assert conf["listenPort"] == "10911"


def test_loadbalancer_pods_wait_for_their_address(broker_owner: Owner) -> None:
    objs = objects(broker_owner, listeners=[{"name": "ext", "type": "loadbalancer"}])
    pod = objs[("StatefulSet", "orders-broker-0")]["spec"]["template"]["spec"]
    main = pod["containers"][0]
    script = main["command"][-1]
    assert script.startswith('until [ -s "/etc/ferrymq-advertised/$POD_NAME" ]')
    assert 'export FERRYMQ_brokerIP1="$(cat "/etc/ferrymq-advertised/$POD_NAME")"' in script
    assert script.endswith('exec ferrymq broker -c "/etc/ferrymq/broker-${POD_NAME##*-}.conf"')
    env = {e["name"]: e for e in main["env"]}
    assert "FERRYMQ_brokerIP1" not in env  # from the file, not the node
    # replication stays on the pod network (upstream's haServerAddr is brokerIP2)
    assert env["FERRYMQ_brokerIP2"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    assert {
        "name": "advertised",
        "configMap": {"name": "orders-broker-advertised", "optional": True},
    } in pod["volumes"]


def test_advertised_configmap_and_status_follow_the_assigned_addresses(
    broker_owner: Owner,
) -> None:
    spec = parse_broker_spec({**REF, "listeners": [{"name": "ext", "type": "loadbalancer"}]})
    services = [
        lb_service("orders-broker-0-0-external", "198.51.100.7"),
        lb_service("orders-broker-0-1-external", None),
        lb_service("unrelated", "198.51.100.9"),
    ]
    hosts = listeners.broker_lb_hosts(broker_owner, spec, services)
    assert hosts == {"orders-broker-0-0": "198.51.100.7"}
    cm = listeners.advertised_configmap(broker_owner, spec, hosts)
    assert cm is not None and cm["data"] == {"orders-broker-0-0": "198.51.100.7"}
    status = listeners.broker_status(broker_owner, spec, DOMAIN, hosts, {})
    assert status[0]["type"] == "internal"
    assert status[0]["addresses"][0] == (
        "orders-broker-0-0.orders-broker-hs.prod.svc.cluster.local:10911"
    )
    assert status[1] == {
        "name": "ext",
        "type": "loadbalancer",
        "addresses": ["198.51.100.7:10911"],
        "pending": ["orders-broker-0-1-external"],
    }
    host_name = {"status": {"loadBalancer": {"ingress": [{"hostname": "a.elb.example"}]}}}
    assert listeners.load_balancer_host(host_name) == "a.elb.example"


def test_nodeport_listener_is_the_nodeport_access(broker_owner: Owner) -> None:
    new = objects(
        broker_owner, listeners=[{"name": "np", "type": "nodeport", "nodePortBase": 31000}]
    )
    old = objects(broker_owner, externalAccess={"type": "NodePort", "nodePortBase": 31000})
    assert new == old
    svc = new[("Service", "orders-broker-0-1-external")]
    assert svc["spec"]["type"] == "NodePort"
    assert svc["spec"]["ports"][0]["nodePort"] == 31010
    spec = parse_broker_spec({**REF, "listeners": [{"name": "np", "type": "nodeport"}]})
    status = listeners.broker_status(
        broker_owner, spec, DOMAIN, {}, {"orders-broker-0-0": "192.0.2.1"}
    )
    assert status[1] == {"name": "np", "type": "nodeport", "addresses": ["192.0.2.1:30911"]}


def test_nameserver_loadbalancer_listener(namesrv_owner: Owner) -> None:
    spec = parse_nameserver_spec({"listeners": [{"name": "ext", "type": "loadbalancer"}]})
    built = {o["metadata"]["name"]: o for o in namesrv.desired(namesrv_owner, spec, "policy/v1")}
    svc = built["routes-namesrv-external"]
    kubernetes_validate.validate(svc, "1.25", strict=True)
    assert svc["spec"]["type"] == "LoadBalancer"
    assert svc["spec"]["externalTrafficPolicy"] == "Cluster"
    internal = "a:9876;b:9876"
    pending = listeners.namesrv_status(namesrv_owner, spec, internal, None, [])
    assert pending[1]["pending"] == ["routes-namesrv-external"]
    ready = listeners.namesrv_status(
        namesrv_owner, spec, internal, lb_service("x", "203.0.113.5"), []
    )
    assert ready[0]["addresses"] == ["a:9876", "b:9876"]
    assert ready[1]["addresses"] == ["203.0.113.5:9876"]
    nodeport = parse_nameserver_spec({"listeners": [{"name": "np", "type": "nodeport"}]})
    built = {
        o["metadata"]["name"]: o for o in namesrv.desired(namesrv_owner, nodeport, "policy/v1")
    }
    assert built["routes-namesrv-external"]["spec"]["ports"][0]["nodePort"] == 30876
    status = listeners.namesrv_status(namesrv_owner, nodeport, internal, None, ["192.0.2.2"] * 2)
    assert status[1]["addresses"] == ["192.0.2.2:30876"]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            {
                "listeners": [
                    {"name": "a", "type": "nodeport"},
                    {"name": "b", "type": "loadbalancer"},
                ]
            },
            "advertises one address",
        ),
        ({"listeners": [{"name": "a", "type": "internal"}] * 2}, "used twice"),
        (
            {"listeners": [{"name": "a", "type": "loadbalancer", "nodePortBase": 30000}]},
            "nodePortBase applies to type nodeport only",
        ),
        (
            {"hostNetwork": True, "listeners": [{"name": "a", "type": "loadbalancer"}]},
            "needs pods on the pod network",
        ),
        (
            {
                "externalAccess": {"type": "NodePort"},
                "listeners": [{"name": "a", "type": "loadbalancer"}],
            },
            "keep the listener and remove externalAccess",
        ),
        (
            {"groups": 64, "listeners": [{"name": "a", "type": "nodeport", "nodePortBase": 32000}]},
            "leaves no room",
        ),
    ],
)
def test_listener_rules_are_explained(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidSpec, match=message):
        parse_broker_spec({**REF, **spec})
