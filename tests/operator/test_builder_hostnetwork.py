"""Builders on a real node: host networking with per-pod ports, external access, a writable $HOME,
and a pod-template hash that adding a slave does not change (issue 16, defects 6 and 9)."""

from __future__ import annotations

from typing import Any

import javaproperties
import kubernetes_validate
import pytest
from ferrymq_operator.builders import audit, broker, names, namesrv, pod
from ferrymq_operator.builders.names import Owner
from ferrymq_operator.models import (
    InvalidSpec,
    parse_broker_spec,
    parse_nameserver_spec,
)

ADDR = "routes-namesrv-0.routes-namesrv-hs.prod.svc.cluster.local:9876"
REF = {"nameServerRef": {"name": "routes"}}
Objects = dict[tuple[str, str], dict[str, Any]]


def build(owner: Owner, **spec: Any) -> Objects:
    objects = broker.desired(owner, parse_broker_spec({**REF, **spec}), ADDR, "policy/v1")
    return {(o["kind"], o["metadata"]["name"]): o for o in objects}


def conf(objs: Objects, group: int, broker_id: int) -> dict[str, str]:
    cm = objs[("ConfigMap", f"orders-broker-{group}-config")]
    parsed: dict[str, str] = javaproperties.loads(cm["data"][f"broker-{broker_id}.conf"])
    return parsed


def template(objs: Objects, group: int) -> dict[str, Any]:
    result: dict[str, Any] = objs[("StatefulSet", f"orders-broker-{group}")]["spec"]["template"]
    return result


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


# --- defect 9: $HOME writable on a read-only root filesystem ---


def _writable_mounts(pod_spec: dict[str, Any], container: dict[str, Any]) -> list[str]:
    volumes = {v["name"]: v for v in pod_spec["volumes"]}
    return [
        m["mountPath"]
        for m in container["volumeMounts"]
        if not m.get("readOnly") and "configMap" not in volumes.get(m["name"], {})
    ]


def _home_is_a_writable_mount(pod_spec: dict[str, Any]) -> None:
    for container in pod_spec["containers"]:
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        home = env_of(container)["HOME"]
        # $HOME itself must be a mount point: writing *under* a root-owned image directory fails
        assert home in _writable_mounts(pod_spec, container), (container["name"], home)


def test_home_is_writable_in_broker_namesrv_and_audit_pods(
    broker_owner: Owner, namesrv_owner: Owner
) -> None:
    objs = build(broker_owner, audit={"schedule": "@daily"})
    _home_is_a_writable_mount(template(objs, 0)["spec"])
    ns_spec = parse_nameserver_spec({})
    ns_sts = namesrv.statefulset(namesrv_owner, ns_spec)
    _home_is_a_writable_mount(ns_sts["spec"]["template"]["spec"])
    spec = parse_broker_spec({**REF, "audit": {"schedule": "@daily"}})
    assert spec.audit is not None
    cron = audit.cronjob(broker_owner, spec, spec.audit, ADDR, "batch/v1")
    _home_is_a_writable_mount(cron["spec"]["jobTemplate"]["spec"]["template"]["spec"])


# --- defect 6: adding a slave restarts nobody ---


@pytest.mark.parametrize("host_network", [False, True])
def test_adding_a_slave_changes_no_existing_pod_template(
    broker_owner: Owner, host_network: bool
) -> None:
    before = build(broker_owner, groups=1, replicasPerGroup=1, hostNetwork=host_network)
    after = build(broker_owner, groups=1, replicasPerGroup=2, hostNetwork=host_network)
    assert template(before, 0) == template(after, 0)
    # the existing pod's own file is unchanged too; only the new pod's file is added
    assert conf(before, 0, 0) == conf(after, 0, 0)
    assert "broker-1.conf" in after[("ConfigMap", "orders-broker-0-config")]["data"]


def test_a_config_change_still_changes_the_template_hash(broker_owner: Owner) -> None:
    a = build(broker_owner, replicasPerGroup=2)
    b = build(broker_owner, replicasPerGroup=2, config={"fileReservedTime": "24"})
    hash_a = template(a, 0)["metadata"]["annotations"][names.ANNOTATION_CONFIG_HASH]
    hash_b = template(b, 0)["metadata"]["annotations"][names.ANNOTATION_CONFIG_HASH]
    assert hash_a != hash_b


def test_host_network_ports_move_with_the_layout_and_roll_those_pods(broker_owner: Owner) -> None:
    """Pod i = group * replicasPerGroup + brokerId: more replicas move the ports of group 1, whose
    pods must then restart (their template changes); group 0 keeps its ports and its pods."""
    before = build(broker_owner, groups=2, replicasPerGroup=1, hostNetwork=True)
    after = build(broker_owner, groups=2, replicasPerGroup=2, hostNetwork=True)
    assert conf(before, 1, 0)["listenPort"] == "10921"
    assert conf(after, 1, 0)["listenPort"] == "10931"
    assert template(before, 0) == template(after, 0)
    assert template(before, 1) != template(after, 1)


# --- hostNetwork: per-pod ports, probes, advertised address ---


def test_host_network_gives_every_pod_its_own_ports(broker_owner: Owner) -> None:
    objs = build(broker_owner, groups=2, replicasPerGroup=2, hostNetwork=True, listenPort=20911)
    seen = set()
    for group in range(2):
        for broker_id in range(2):
            c = conf(objs, group, broker_id)
            index = group * 2 + broker_id
            assert c["listenPort"] == str(20911 + 10 * index)
            assert c["haListenPort"] == str(20911 + 10 * index + 1)
            seen |= {int(c["listenPort"]) - 2, int(c["listenPort"]), int(c["haListenPort"])}
    assert len(seen) == 12  # fast, listen and HA ports of four pods: none shared


def test_host_network_metrics_port_is_per_pod_too(broker_owner: Owner) -> None:
    objs = build(
        broker_owner, replicasPerGroup=2, hostNetwork=True, config={"metricsPort": "10914"}
    )
    assert [conf(objs, 0, i)["metricsPort"] for i in range(2)] == ["10914", "10924"]


def test_host_network_pod_spec(broker_owner: Owner) -> None:
    objs = build(broker_owner, hostNetwork=True)
    pod_spec = template(objs, 0)["spec"]
    assert pod_spec["hostNetwork"] is True
    assert pod_spec["dnsPolicy"] == "ClusterFirstWithHostNet"
    (container,) = pod_spec["containers"]
    # a declared port would be a host port shared by every pod of the template: none declared
    assert "ports" not in container
    env = env_of(container)
    assert env[broker.BROKER_IP1_ENV] == {"fieldRef": {"fieldPath": "status.hostIP"}}
    assert env["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        command = container[probe]["exec"]["command"]
        assert command[:2] == ["/bin/sh", "-c"], probe
        # the marker of the pod's own port, read from the file the pod runs with; no Python
        assert (
            f"{pod.PROBE_DIR}/serving-$(sed -n 's/^listenPort=//p' "
            "/etc/ferrymq/broker-${POD_NAME##*-}.conf)" in command[2]
        ), command
        assert "python" not in command[2]
    service = objs[("Service", "orders-broker-hs")]
    assert all(isinstance(p["targetPort"], int) for p in service["spec"]["ports"])


def test_without_host_network_every_pod_uses_the_base_ports(broker_owner: Owner) -> None:
    objs = build(broker_owner, groups=2, replicasPerGroup=2, listenPort=12911)
    for group in range(2):
        for broker_id in range(2):
            assert conf(objs, group, broker_id)["listenPort"] == "12911"
            assert conf(objs, group, broker_id)["haListenPort"] == "12912"
    pod_spec = template(objs, 0)["spec"]
    assert "hostNetwork" not in pod_spec
    (container,) = pod_spec["containers"]
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {
        "broker": 12911,
        "ha": 12912,
        "fast": 12909,
        "metrics": 5557,
    }
    assert broker.BROKER_IP1_ENV not in env_of(container)
    assert f'{pod.PROBE_DIR}/serving-12911"' in container["readinessProbe"]["exec"]["command"][2]


def test_nameserver_host_network_pod_k_listens_on_port_plus_k(namesrv_owner: Owner) -> None:
    spec = parse_nameserver_spec({"replicas": 3, "hostNetwork": True, "port": 19876})
    sts = namesrv.statefulset(namesrv_owner, spec)
    pod_spec = sts["spec"]["template"]["spec"]
    assert pod_spec["hostNetwork"] is True and pod_spec["dnsPolicy"] == "ClusterFirstWithHostNet"
    (container,) = pod_spec["containers"]
    assert "ports" not in container
    script = container["command"][2]
    assert 'export FERRYMQ_listenPort="$((19876 + ${POD_NAME##*-}))"' in script
    assert script.endswith("exec ferrymq namesrv -c /etc/ferrymq/namesrv.conf")
    probe = container["readinessProbe"]["exec"]["command"]
    assert f"{pod.PROBE_DIR}/serving-$((19876 + ${{POD_NAME##*-}}))" in probe[2]
    addrs = names.namesrv_addresses("routes", "prod", 3, "cluster.local", 19876, per_pod=True)
    assert [a.rsplit(":", 1)[1] for a in addrs.split(";")] == ["19876", "19877", "19878"]


def test_nameserver_port_without_host_network(namesrv_owner: Owner) -> None:
    spec = parse_nameserver_spec({"replicas": 2, "port": 19876})
    (container,) = namesrv.statefulset(namesrv_owner, spec)["spec"]["template"]["spec"][
        "containers"
    ]
    assert container["ports"][0]["containerPort"] == 19876
    assert "FERRYMQ_listenPort" not in str(container)
    assert "listenPort=19876" in namesrv.configmap(namesrv_owner, spec)["data"]["namesrv.conf"]
    addrs = names.namesrv_addresses("routes", "prod", 2, "cluster.local", 19876)
    assert [a.rsplit(":", 1)[1] for a in addrs.split(";")] == ["19876", "19876"]


# --- external access ---


def test_external_access_host_network_advertises_the_node(broker_owner: Owner) -> None:
    objs = build(broker_owner, hostNetwork=True, externalAccess={"type": "HostNetwork"})
    env = env_of(template(objs, 0)["spec"]["containers"][0])
    assert env[broker.BROKER_IP1_ENV] == {"fieldRef": {"fieldPath": "status.hostIP"}}
    assert not [k for k in objs if k[1].endswith("-external")]


def test_external_access_node_port_one_service_per_pod(broker_owner: Owner) -> None:
    objs = build(
        broker_owner,
        groups=2,
        replicasPerGroup=2,
        externalAccess={"type": "NodePort", "nodePortBase": 31000},
    )
    for group in range(2):
        for broker_id in range(2):
            pod = f"orders-broker-{group}-{broker_id}"
            svc = objs[("Service", f"{pod}-external")]
            assert svc["spec"]["type"] == "NodePort"
            assert svc["spec"]["externalTrafficPolicy"] == "Local"
            assert svc["spec"]["selector"] == {"statefulset.kubernetes.io/pod-name": pod}
            (port,) = svc["spec"]["ports"]
            listen = int(conf(objs, group, broker_id)["listenPort"])
            # the broker advertises brokerIP1:listenPort, so it listens on its own nodePort
            assert port["nodePort"] == port["port"] == port["targetPort"] == listen
            assert listen == 31000 + 10 * (group * 2 + broker_id)
    pod_spec = template(objs, 0)["spec"]
    assert "hostNetwork" not in pod_spec
    env = env_of(pod_spec["containers"][0])
    assert env[broker.BROKER_IP1_ENV] == {"fieldRef": {"fieldPath": "status.hostIP"}}


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ({"externalAccess": {"type": "HostNetwork"}}, "set hostNetwork: true"),
        ({"hostNetwork": True, "externalAccess": {"type": "NodePort"}}, "hostNetwork is true"),
        (
            {"groups": 64, "replicasPerGroup": 8, "externalAccess": {"type": "NodePort"}},
            "lower nodePortBase",
        ),
        ({"hostNetwork": True, "listenPort": 65000, "groups": 64}, "lower spec.listenPort"),
        ({"externalAccess": {"type": "Ingress"}}, "spec.externalAccess.type"),
    ],
)
def test_bad_external_access_or_port_layout_is_refused(spec: dict[str, Any], words: str) -> None:
    with pytest.raises(InvalidSpec, match=words.replace(".", r"\.")):
        parse_broker_spec({**REF, **spec})


def test_nameserver_port_range_checked() -> None:
    with pytest.raises(InvalidSpec, match=r"lower spec\.port"):
        parse_nameserver_spec({"replicas": 4, "hostNetwork": True, "port": 65534})


@pytest.mark.parametrize(
    "spec",
    [
        {"hostNetwork": True, "groups": 2},
        {"externalAccess": {"type": "NodePort"}, "groups": 2},
        {"hostNetwork": True, "externalAccess": {"type": "HostNetwork"}},
    ],
)
def test_manifests_pass_kubernetes_schema(broker_owner: Owner, spec: dict[str, Any]) -> None:
    for obj in build(broker_owner, **spec).values():
        kubernetes_validate.validate(obj, "1.25.0", strict=True)


def test_nameserver_manifests_pass_kubernetes_schema(namesrv_owner: Owner) -> None:
    spec = parse_nameserver_spec({"hostNetwork": True, "replicas": 2})
    for obj in namesrv.desired(namesrv_owner, spec, "policy/v1"):
        kubernetes_validate.validate(obj, "1.25.0", strict=True)
