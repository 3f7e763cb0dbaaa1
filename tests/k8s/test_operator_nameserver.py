"""The operator against a real kube-apiserver 1.20: CRDs, server-side validation, NameServer
reconcile, status conditions, recreation of deleted children, garbage collection, invalid specs.

No kubelet runs here: pods created by the StatefulSet controller stay Pending, and the tests mark
them Ready through the Pod status subresource, as a kubelet would, to drive the status logic.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kopf.testing import KopfRunner
from kubernetes import client as k8s

from k8s.control_plane import KubeApi
from k8s.operator_env import Cluster, ferrymq_crds, operator, wait_for

__all__ = ["ferrymq_crds", "operator"]

# The controller-manager's garbage collector is shared with every namespace being torn down.
GC_WAIT_S = 120.0

SELECTOR = "app.kubernetes.io/instance=routes,app.kubernetes.io/component=namesrv"


@pytest.fixture
def cluster(kube_api: KubeApi, k8s_namespace: str) -> Iterator[Cluster]:
    with kube_api.api_client() as api_client:
        yield Cluster(api_client, k8s_namespace)


def test_crds_are_served_with_printer_columns_and_short_names(
    kube_api: KubeApi, ferrymq_crds: list[str]
) -> None:
    with kube_api.api_client() as api_client:
        ext = k8s.ApiextensionsV1Api(api_client)
        broker = ext.read_custom_resource_definition("brokers.ferrymq.io")
        columns = [c.name for c in broker.spec.versions[0].additional_printer_columns or []]
        assert columns == ["Ready", "Groups", "Phase", "Age"]
        assert "fmqb" in (broker.spec.names.short_names or [])
        subresources = broker.spec.versions[0].subresources
        assert subresources is not None and subresources.status is not None


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"nameServerRef": {"name": "routes"}, "groups": 0}, "spec.groups"),
        ({"nameServerRef": {"name": "routes"}, "brokerRole": "SLAVE"}, "spec.brokerRole"),
        ({"nameServerRef": {"name": "routes"}, "storage": {"size": "lots"}}, "spec.storage.size"),
        ({"groups": 1}, "spec.nameServerRef"),
    ],
)
def test_server_refuses_invalid_broker(
    cluster: Cluster, ferrymq_crds: list[str], spec: dict[str, Any], field: str
) -> None:
    with pytest.raises(k8s.ApiException) as info:
        cluster.create("brokers", "bad", spec)
    assert info.value.status == 422
    assert field in str(info.value.body)


def test_server_applies_schema_defaults(cluster: Cluster, ferrymq_crds: list[str]) -> None:
    created = cluster.create("nameservers", "defaults", {})
    assert created["spec"]["replicas"] == 2
    assert created["spec"]["image"].startswith("ferrymq/")


def test_nameserver_children_status_and_recovery(cluster: Cluster, operator: KopfRunner) -> None:
    cluster.create(
        "nameservers", "routes", {"replicas": 2, "config": {"scanNotActiveBrokerInterval": "5000"}}
    )

    sts = wait_for("the NameServer StatefulSet", lambda: cluster.statefulset("routes-namesrv"))
    assert sts.spec.replicas == 2
    owner = sts.metadata.owner_references[0]
    assert (owner.kind, owner.name, owner.controller) == ("NameServer", "routes", True)
    assert (
        wait_for("headless Service", lambda: cluster.service("routes-namesrv-hs")).spec.cluster_ip
        == "None"
    )
    assert (
        wait_for("client Service", lambda: cluster.service("routes-namesrv")).spec.type
        == "ClusterIP"
    )
    cm = wait_for("ConfigMap", lambda: cluster.configmap("routes-namesrv-config"))
    assert "scanNotActiveBrokerInterval=5000" in cm.data["namesrv.conf"]
    # Kubernetes 1.20 has no policy/v1: discovery picked policy/v1beta1.
    pdb = wait_for("PodDisruptionBudget", lambda: cluster.pdb("routes-namesrv"))
    assert pdb["apiVersion"] == "policy/v1beta1" and pdb["spec"]["maxUnavailable"] == 1

    # The StatefulSet controller (controller-manager) creates the pods; they stay Pending.
    wait_for("2 NameServer pods", lambda: len(cluster.pods(SELECTOR)) == 2)
    progressing = cluster.wait_condition("nameservers", "routes", "Progressing", "True", "Creating")
    assert progressing["observedGeneration"] == 1
    body = cluster.get("nameservers", "routes") or {}
    assert body["status"]["observedGeneration"] == 1
    assert body["status"]["phase"] == "Creating"
    assert (
        body["status"]["addresses"]
        .split(";")[0]
        .startswith(f"routes-namesrv-0.routes-namesrv-hs.{cluster.ns}.svc.")
    )

    cluster.wait_pods_and_mark_ready(["routes-namesrv-0", "routes-namesrv-1"])
    ready = cluster.wait_condition("nameservers", "routes", "Ready", "True")
    assert ready["reason"] == "AllPodsReady"
    body = cluster.get("nameservers", "routes") or {}
    assert body["status"]["phase"] == "Running" and body["status"]["ready"] == "2/2"
    cluster.wait_event("routes", "Created")
    cluster.wait_event("routes", "Running")

    # A pod turning unready after the cluster was ready: Degraded, not Progressing.
    cluster.mark_ready("routes-namesrv-1", ready=False)
    degraded = cluster.wait_condition("nameservers", "routes", "Degraded", "True")
    assert "routes-namesrv-1" in degraded["message"]
    cluster.mark_ready("routes-namesrv-1")
    cluster.wait_condition("nameservers", "routes", "Ready", "True")

    # Children deleted by hand come back (new uid).
    old_uid = cluster.configmap("routes-namesrv-config").metadata.uid
    cluster.delete_child("v1", "ConfigMap", "routes-namesrv-config")
    cluster.delete_child("v1", "Service", "routes-namesrv")
    wait_for(
        "the ConfigMap to be recreated",
        lambda: (
            (cm := cluster.configmap("routes-namesrv-config")) is not None
            and cm.metadata.uid != old_uid
        ),
    )
    wait_for("the client Service to be recreated", lambda: cluster.service("routes-namesrv"))
    sts_uid = cluster.statefulset("routes-namesrv").metadata.uid
    cluster.delete_child("apps/v1", "StatefulSet", "routes-namesrv")
    wait_for(
        "the StatefulSet to be recreated",
        lambda: (
            (s := cluster.statefulset("routes-namesrv")) is not None and s.metadata.uid != sts_uid
        ),
    )

    # Scaling: the StatefulSet follows the spec, status goes back to Progressing (Updating).
    cluster.patch_spec("nameservers", "routes", {"replicas": 3})
    wait_for("3 replicas", lambda: cluster.statefulset("routes-namesrv").spec.replicas == 3)
    cluster.wait_condition("nameservers", "routes", "Progressing", "True", generation=2)


def test_deleting_the_resource_garbage_collects_children(
    cluster: Cluster, operator: KopfRunner
) -> None:
    cluster.create("nameservers", "gone", {"replicas": 1})
    wait_for("the StatefulSet", lambda: cluster.statefulset("gone-namesrv"))
    wait_for("the ConfigMap", lambda: cluster.configmap("gone-namesrv-config"))
    cluster.delete("nameservers", "gone")
    wait_for("the NameServer to be deleted", lambda: cluster.get("nameservers", "gone") is None)
    # The controller-manager's garbage collector follows the ownerReferences.
    wait_for(
        "the StatefulSet to be collected",
        lambda: cluster.statefulset("gone-namesrv") is None,
        timeout=GC_WAIT_S,
    )
    wait_for(
        "the ConfigMap to be collected",
        lambda: cluster.configmap("gone-namesrv-config") is None,
        timeout=GC_WAIT_S,
    )
    wait_for(
        "the Services to be collected",
        lambda: cluster.service("gone-namesrv-hs") is None,
        timeout=GC_WAIT_S,
    )
    wait_for(
        "the PDB to be collected", lambda: cluster.pdb("gone-namesrv") is None, timeout=GC_WAIT_S
    )


def test_invalid_spec_sets_reconcile_failed_then_recovers(
    cluster: Cluster, operator: KopfRunner
) -> None:
    """The schema cannot express 'listenPort is operator-owned'; the operator refuses it."""
    cluster.create("nameservers", "badconf", {"replicas": 1, "config": {"listenPort": "1234"}})
    failed = cluster.wait_condition(
        "nameservers", "badconf", "ReconcileFailed", "True", "InvalidSpec"
    )
    assert "spec.config" in failed["message"] and "listenPort" in failed["message"]
    body = cluster.get("nameservers", "badconf") or {}
    assert body["status"]["phase"] == "Failed"
    assert body["status"]["observedGeneration"] == 1
    assert cluster.statefulset("badconf-namesrv") is None
    wait_for(
        "a Warning event naming the problem",
        lambda: any(
            e.type == "Warning" and e.reason == "InvalidSpec" for e in cluster.events_for("badconf")
        ),
    )

    # A merge patch with null removes the key.
    cluster.patch_spec("nameservers", "badconf", {"config": {"listenPort": None}})
    wait_for("the StatefulSet after the fix", lambda: cluster.statefulset("badconf-namesrv"))
    cluster.wait_condition("nameservers", "badconf", "ReconcileFailed", "False", generation=2)


def test_kubectl_shows_printer_columns(
    cluster: Cluster, ferrymq_crds: list[str], kubectl_bin: Path, kube_api: KubeApi
) -> None:
    cluster.create("nameservers", "cols", {"replicas": 1})
    cluster.create("brokers", "cols", {"nameServerRef": {"name": "cols"}, "groups": 3})

    def get(what: str) -> str:
        return subprocess.run(
            [str(kubectl_bin), "get", what, "-n", cluster.ns],
            env=kube_api.env(),
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout

    brokers = get("fmqb").splitlines()
    assert brokers[0].split() == ["NAME", "READY", "GROUPS", "PHASE", "AGE"]
    assert brokers[1].split()[:1] == ["cols"] and "3" in brokers[1].split()
    assert get("fmqns").splitlines()[0].split() == ["NAME", "READY", "REPLICAS", "PHASE", "AGE"]
    # The "ferrymq" category lists both kinds.
    both = get("ferrymq")
    assert "broker.ferrymq.io/cols" in both and "nameserver.ferrymq.io/cols" in both
