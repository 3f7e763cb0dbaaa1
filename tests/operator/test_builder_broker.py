"""Broker builder: every spec field lands where it should; manifests are valid Kubernetes objects."""

from __future__ import annotations

from typing import Any

import javaproperties
import kubernetes_validate
import pytest
from ferrymq_operator.builders import broker, names, pod
from ferrymq_operator.builders.names import Owner
from ferrymq_operator.models import parse_broker_spec

ADDR = "routes-namesrv-0.routes-namesrv-hs.prod.svc.cluster.local:9876"
REF = {"nameServerRef": {"name": "routes"}}


def build(
    owner: Owner, pdb: str = "policy/v1", **spec: Any
) -> dict[tuple[str, str], dict[str, Any]]:
    objects = broker.desired(owner, parse_broker_spec({**REF, **spec}), ADDR, pdb)
    return {(o["kind"], o["metadata"]["name"]): o for o in objects}


def conf(objs: dict[tuple[str, str], dict[str, Any]], group: int, broker_id: int) -> dict[str, str]:
    cm = objs[("ConfigMap", f"orders-broker-{group}-config")]
    parsed: dict[str, str] = javaproperties.loads(cm["data"][f"broker-{broker_id}.conf"])
    return parsed


def container(sts: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = sts["spec"]["template"]["spec"]["containers"][0]
    return result


def test_one_statefulset_configmap_pdb_per_group(broker_owner: Owner) -> None:
    objs = build(broker_owner, groups=3)
    assert sorted(objs) == sorted(
        [("Service", "orders-broker-hs")]
        + [("StatefulSet", f"orders-broker-{g}") for g in range(3)]
        + [("ConfigMap", f"orders-broker-{g}-config") for g in range(3)]
        + [("PodDisruptionBudget", f"orders-broker-{g}") for g in range(3)]
    )


def test_apply_order_puts_config_before_pods(broker_owner: Owner) -> None:
    objects = broker.desired(
        broker_owner, parse_broker_spec({**REF, "groups": 2}), ADDR, "policy/v1"
    )
    kinds = [o["kind"] for o in objects]
    assert kinds == ["Service"] + ["ConfigMap", "StatefulSet", "PodDisruptionBudget"] * 2


def test_pod_ordinal_is_broker_id_and_only_zero_is_master(broker_owner: Owner) -> None:
    objs = build(broker_owner, groups=2, replicasPerGroup=3, brokerRole="SYNC_MASTER")
    for group in range(2):
        sts = objs[("StatefulSet", f"orders-broker-{group}")]
        assert sts["spec"]["replicas"] == 3
        for broker_id in range(3):
            c = conf(objs, group, broker_id)
            assert c["brokerId"] == str(broker_id)
            assert c["brokerName"] == f"orders-broker-{group}"
            assert c["brokerRole"] == ("SYNC_MASTER" if broker_id == 0 else "SLAVE")
    # The container chooses its file by the ordinal at the end of POD_NAME (on the host network
    # the hostname is the node's).
    command = " ".join(container(objs[("StatefulSet", "orders-broker-0")])["command"])
    assert "broker-${POD_NAME##*-}.conf" in command and "exec ferrymq broker -c" in command


def test_broker_conf_upstream_names(broker_owner: Owner) -> None:
    objs = build(
        broker_owner,
        flushDiskType="SYNC_FLUSH",
        clusterName="PaymentsCluster",
        config={"fileReservedTime": "48", "deleteWhen": "04"},
    )
    c = conf(objs, 0, 0)
    assert c == {
        "brokerClusterName": "PaymentsCluster",
        "brokerName": "orders-broker-0",
        "brokerId": "0",
        "brokerRole": "ASYNC_MASTER",
        "flushDiskType": "SYNC_FLUSH",
        "namesrvAddr": ADDR,
        "listenPort": "10911",
        "haListenPort": "10912",
        "storePathRootDir": "/home/ferrymq/store",
        "fileReservedTime": "48",
        "deleteWhen": "04",
        "metricsPort": "5557",  # on by default (upstream's metricsPromExporterPort)
    }


def test_cluster_name_defaults_to_resource_name(broker_owner: Owner) -> None:
    assert conf(build(broker_owner), 0, 0)["brokerClusterName"] == "orders"


def test_namesrv_addr_is_dns_never_ip(broker_owner: Owner) -> None:
    addr = names.namesrv_addresses("routes", "prod", 3, "cluster.local")
    assert addr.split(";") == [
        f"routes-namesrv-{i}.routes-namesrv-hs.prod.svc.cluster.local:9876" for i in range(3)
    ]
    objs = broker.desired(broker_owner, parse_broker_spec(REF), addr, "policy/v1")
    cm = next(o for o in objs if o["kind"] == "ConfigMap")
    assert javaproperties.loads(cm["data"]["broker-0.conf"])["namesrvAddr"] == addr


def test_storage_claim_template(broker_owner: Owner) -> None:
    objs = build(broker_owner, storage={"storageClassName": "ssd", "size": "200Gi"})
    sts = objs[("StatefulSet", "orders-broker-0")]
    (claim,) = sts["spec"]["volumeClaimTemplates"]
    assert claim["metadata"]["name"] == "store"
    assert claim["spec"]["storageClassName"] == "ssd"
    assert claim["spec"]["resources"]["requests"]["storage"] == "200Gi"
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    mounts = {m["name"]: m["mountPath"] for m in container(sts)["volumeMounts"]}
    assert mounts["store"] == "/home/ferrymq/store" == conf(objs, 0, 0)["storePathRootDir"]


def test_default_storage_class_left_to_cluster(broker_owner: Owner) -> None:
    sts = build(broker_owner)[("StatefulSet", "orders-broker-0")]
    assert "storageClassName" not in sts["spec"]["volumeClaimTemplates"][0]["spec"]


def test_image_resources_and_scheduling(broker_owner: Owner) -> None:
    objs = build(
        broker_owner,
        image="registry.local/ferrymq:1.2.3",
        imagePullPolicy="Always",
        imagePullSecrets=["regcred"],
        resources={"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"memory": "4Gi"}},
        nodeSelector={"disk": "ssd"},
        tolerations=[
            {"key": "dedicated", "operator": "Equal", "value": "mq", "effect": "NoSchedule"}
        ],
        priorityClassName="mq-critical",
    )
    sts = objs[("StatefulSet", "orders-broker-0")]
    pod = sts["spec"]["template"]["spec"]
    c = container(sts)
    assert c["image"] == "registry.local/ferrymq:1.2.3"
    assert c["imagePullPolicy"] == "Always"
    assert c["resources"] == {
        "requests": {"cpu": "1", "memory": "2Gi"},
        "limits": {"memory": "4Gi"},
    }
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod["nodeSelector"] == {"disk": "ssd"}
    assert pod["tolerations"] == [
        {"key": "dedicated", "operator": "Equal", "value": "mq", "effect": "NoSchedule"}
    ]
    assert pod["priorityClassName"] == "mq-critical"


def test_required_anti_affinity_separates_master_and_slaves(broker_owner: Owner) -> None:
    sts = build(broker_owner, groups=2)[("StatefulSet", "orders-broker-1")]
    affinity = sts["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    (term,) = affinity["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    # The term selects exactly this group's pods (they carry these labels; other groups do not).
    assert term["labelSelector"]["matchLabels"] == sts["spec"]["selector"]["matchLabels"]
    assert term["labelSelector"]["matchLabels"][names.LABEL_GROUP] == "orders-broker-1"


def test_preferred_anti_affinity(broker_owner: Owner) -> None:
    sts = build(broker_owner, podAntiAffinity="Preferred")[("StatefulSet", "orders-broker-0")]
    affinity = sts["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in affinity
    (weighted,) = affinity["preferredDuringSchedulingIgnoredDuringExecution"]
    assert weighted["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"


def test_non_root_security_context(broker_owner: Owner) -> None:
    sts = build(broker_owner)[("StatefulSet", "orders-broker-0")]
    pod_sc = sts["spec"]["template"]["spec"]["securityContext"]
    assert (
        pod_sc["runAsNonRoot"] is True
        and pod_sc["runAsUser"] != 0
        and pod_sc["fsGroup"] == pod_sc["runAsUser"]
    )
    c_sc = container(sts)["securityContext"]
    assert c_sc["allowPrivilegeEscalation"] is False
    assert c_sc["readOnlyRootFilesystem"] is True
    assert c_sc["capabilities"] == {"drop": ["ALL"]}


def test_probes_target_the_broker_port(broker_owner: Owner) -> None:
    c = container(build(broker_owner)[("StatefulSet", "orders-broker-0")])
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"broker": 10911, "ha": 10912, "fast": 10909, "metrics": 5557}
    # Every probe reads the marker the broker keeps fresh once it serves (its own port's).
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        command = c[probe]["exec"]["command"]
        assert command[:2] == ["/bin/sh", "-c"]
        assert f'find "{pod.PROBE_DIR}/serving-10911" -newermt' in command[2]
        assert "python" not in command[2]
    assert {"name": pod.PROBE_DIR_ENV, "value": pod.PROBE_DIR} in c["env"]
    # liveness tolerates a longer stall than readiness (a loaded node)
    ready, live = c["readinessProbe"], c["livenessProbe"]
    assert pod.LIVE_FRESH_S > pod.READY_FRESH_S
    assert live["periodSeconds"] * live["failureThreshold"] > ready["periodSeconds"] * 3
    # Store recovery may take long: the startup probe allows it before liveness applies.
    startup = c["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 1800


def test_metrics_port_is_a_named_container_port(broker_owner: Owner) -> None:
    """The chart's PodMonitor scrapes the container port named "metrics"."""
    c = container(
        build(broker_owner, config={"metricsPort": "5557"})[("StatefulSet", "orders-broker-0")]
    )
    assert {p["name"]: p["containerPort"] for p in c["ports"]}["metrics"] == 5557
    assert conf(build(broker_owner, config={"metricsPort": "5557"}), 0, 0)["metricsPort"] == "5557"


def test_pdb_max_unavailable_one_per_group(broker_owner: Owner) -> None:
    objs = build(broker_owner, pdb="policy/v1beta1", groups=2)
    for group in range(2):
        pdb = objs[("PodDisruptionBudget", f"orders-broker-{group}")]
        assert pdb["apiVersion"] == "policy/v1beta1"
        assert pdb["spec"]["maxUnavailable"] == 1
        sts = objs[("StatefulSet", f"orders-broker-{group}")]
        assert pdb["spec"]["selector"] == sts["spec"]["selector"]


def test_headless_service(broker_owner: Owner) -> None:
    svc = build(broker_owner)[("Service", "orders-broker-hs")]
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["publishNotReadyAddresses"] is True
    sts = build(broker_owner)[("StatefulSet", "orders-broker-0")]
    assert sts["spec"]["serviceName"] == "orders-broker-hs"
    # The Service selects every broker pod of this Broker (all groups).
    assert svc["spec"]["selector"].items() <= sts["spec"]["template"]["metadata"]["labels"].items()


def test_every_child_is_owned_and_labelled(broker_owner: Owner) -> None:
    for obj in build(broker_owner, groups=2).values():
        meta = obj["metadata"]
        assert meta["namespace"] == "prod"
        (ref,) = meta["ownerReferences"]
        assert ref == {
            "apiVersion": "ferrymq.io/v1alpha1",
            "kind": "Broker",
            "name": "orders",
            "uid": "uid-broker-1",
            "controller": True,
            "blockOwnerDeletion": True,
        }
        assert meta["labels"][names.LABEL_MANAGED_BY] == "ferrymq-operator"
        assert meta["labels"][names.LABEL_INSTANCE] == "orders"


def test_selector_matches_template_labels(broker_owner: Owner) -> None:
    sts = build(broker_owner)[("StatefulSet", "orders-broker-0")]
    selector = sts["spec"]["selector"]["matchLabels"]
    assert selector.items() <= sts["spec"]["template"]["metadata"]["labels"].items()


def test_config_change_changes_pod_template_hash(broker_owner: Owner) -> None:
    before = build(broker_owner)[("StatefulSet", "orders-broker-0")]
    after = build(broker_owner, config={"fileReservedTime": "24"})[
        ("StatefulSet", "orders-broker-0")
    ]
    same = build(broker_owner)[("StatefulSet", "orders-broker-0")]
    key = names.ANNOTATION_CONFIG_HASH
    annotations = [
        s["spec"]["template"]["metadata"]["annotations"][key] for s in (before, after, same)
    ]
    assert annotations[0] != annotations[1]
    assert annotations[0] == annotations[2]


def test_scale_out_keeps_existing_groups_identical(broker_owner: Owner) -> None:
    two = build(broker_owner, groups=2)
    three = build(broker_owner, groups=3)
    for key, obj in two.items():
        assert three[key] == obj
    assert ("StatefulSet", "orders-broker-2") in three


def test_replica_scaling_adds_conf_files(broker_owner: Owner) -> None:
    objs = build(broker_owner, replicasPerGroup=4)
    cm = objs[("ConfigMap", "orders-broker-0-config")]
    assert sorted(cm["data"]) == [f"broker-{i}.conf" for i in range(4)]


def test_too_long_name_refused() -> None:
    owner = Owner("ferrymq.io/v1alpha1", "Broker", "x" * 41, "prod", "uid")
    with pytest.raises(ValueError, match="at most 40"):
        broker.desired(owner, parse_broker_spec(REF), ADDR, "policy/v1")


def test_longest_name_fits_kubernetes_limits() -> None:
    owner = Owner("ferrymq.io/v1alpha1", "Broker", "x" * 40, "prod", "uid")
    objects = broker.desired(owner, parse_broker_spec({**REF, "groups": 64}), ADDR, "policy/v1")
    for obj in objects:
        assert len(obj["metadata"]["name"]) <= 63
        if obj["kind"] == "StatefulSet":
            assert len(obj["metadata"]["name"]) <= 52


@pytest.mark.parametrize("groups", [1, 3])
def test_manifests_pass_kubernetes_schema(broker_owner: Owner, groups: int) -> None:
    spec: dict[str, Any] = {
        "groups": groups,
        "resources": {"requests": {"cpu": "500m"}},
        "tolerations": [{"key": "k", "operator": "Exists"}],
        "storage": {"storageClassName": "ssd"},
    }
    for obj in build(broker_owner, **spec).values():
        kubernetes_validate.validate(obj, "1.25.0", strict=True)


def test_every_port_names_its_protocol(broker_owner: Owner) -> None:
    """Server-side apply on Kubernetes < 1.21 needs the list-map key `protocol` on every port."""
    for obj in build(broker_owner).values():
        if obj["kind"] == "Service":
            assert all(p["protocol"] == "TCP" for p in obj["spec"]["ports"])
        if obj["kind"] == "StatefulSet":
            assert all(p["protocol"] == "TCP" for p in container(obj)["ports"])
