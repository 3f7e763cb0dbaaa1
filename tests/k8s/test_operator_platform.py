"""Issue 33 against a real kube-apiserver 1.20 (operator in-process; no kubelet, no cloud, no CSI):
a LoadBalancer listener's addresses (set on the Service status as a cloud controller would) reach
the advertised ConfigMap and status.listeners; storage growth expands claims of an expandable
class and recreates the StatefulSet object with the pods kept, and refuses a class that cannot
expand; the pod template lands on the pods' template; a Console's objects are made."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kopf.testing import KopfRunner
from kubernetes import client as k8s

from k8s.control_plane import KubeApi
from k8s.operator_env import Cluster, ferrymq_crds, operator, wait_for

__all__ = ["ferrymq_crds", "operator"]


@pytest.fixture
def cluster(kube_api: KubeApi, k8s_namespace: str) -> Iterator[Cluster]:
    with kube_api.api_client() as api_client:
        yield Cluster(api_client, k8s_namespace)


def status_of(cluster: Cluster, plural: str, name: str) -> dict[str, Any]:
    found = cluster.get(plural, name) or {}
    status: dict[str, Any] = found.get("status") or {}
    return status


def test_loadbalancer_addresses_are_advertised(cluster: Cluster, operator: KopfRunner) -> None:
    cluster.create("nameservers", "lbns", {"replicas": 1})
    cluster.create(
        "brokers",
        "lb",
        {
            "nameServerRef": {"name": "lbns"},
            "replicasPerGroup": 1,
            "listeners": [{"name": "ext", "type": "loadbalancer"}],
            "template": {"pod": {"metadata": {"annotations": {"team": "payments"}}}},
        },
    )
    svc = wait_for("the LoadBalancer Service", lambda: cluster.service("lb-broker-0-0-external"))
    assert svc.spec.type == "LoadBalancer"
    sts = wait_for("the StatefulSet", lambda: cluster.statefulset("lb-broker-0"))
    assert sts.spec.template.metadata.annotations["team"] == "payments"
    pending = wait_for(
        "status.listeners with a pending Service",
        lambda: [
            entry
            for entry in status_of(cluster, "brokers", "lb").get("listeners", [])
            if entry.get("pending")
        ],
    )
    assert pending[0]["pending"] == ["lb-broker-0-0-external"]
    # what a cloud's service controller does: give the Service an address
    cluster.core.patch_namespaced_service_status(
        "lb-broker-0-0-external",
        cluster.ns,
        {"status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.10"}]}}},
    )
    cm = wait_for(
        "the advertised address in the ConfigMap",
        lambda: (
            (c := cluster.configmap("lb-broker-advertised")) is not None
            and (c.data or {}).get("lb-broker-0-0") == "203.0.113.10"
            and c
        ),
    )
    assert cm.data == {"lb-broker-0-0": "203.0.113.10"}
    listeners = wait_for(
        "status.listeners with the address",
        lambda: [
            entry
            for entry in status_of(cluster, "brokers", "lb").get("listeners", [])
            if entry.get("addresses") == ["203.0.113.10:10911"]
        ],
    )
    assert listeners[0]["name"] == "ext" and not listeners[0].get("pending")


def storage_class(name: str, expandable: bool) -> k8s.V1StorageClass:
    return k8s.V1StorageClass(
        metadata=k8s.V1ObjectMeta(name=name),
        provisioner="example.com/none",
        allow_volume_expansion=expandable,
    )


def claim_sizes(cluster: Cluster, prefix: str) -> dict[str, str]:
    claims = cluster.core.list_namespaced_persistent_volume_claim(cluster.ns).items
    return {
        c.metadata.name: c.spec.resources.requests["storage"]
        for c in claims
        if c.metadata.name.startswith(prefix)
    }


def test_storage_growth_and_refusal(
    cluster: Cluster, operator: KopfRunner, k8s_namespace: str
) -> None:
    storage = k8s.StorageV1Api(cluster.core.api_client)
    grow, fixed = f"grow-{k8s_namespace}"[:60], f"fixed-{k8s_namespace}"[:60]
    storage.create_storage_class(storage_class(grow, True))
    storage.create_storage_class(storage_class(fixed, False))
    try:
        # no provisioner: volumes made by hand, each pre-bound to the claim the StatefulSet
        # will make (only a bound claim may grow)
        for name, cls in (("big", grow), ("stuck", fixed)):
            claim = f"store-{name}-broker-0-0"
            cluster.core.create_persistent_volume(
                k8s.V1PersistentVolume(
                    metadata=k8s.V1ObjectMeta(name=f"{cls}-pv"[:63]),
                    spec=k8s.V1PersistentVolumeSpec(
                        capacity={"storage": "1Gi"},
                        access_modes=["ReadWriteOnce"],
                        storage_class_name=cls,
                        host_path=k8s.V1HostPathVolumeSource(path=f"/tmp/{cls}"),
                        claim_ref=k8s.V1ObjectReference(namespace=cluster.ns, name=claim),
                    ),
                )
            )
        cluster.create("nameservers", "stns", {"replicas": 1})
        for name, cls in (("big", grow), ("stuck", fixed)):
            cluster.create(
                "brokers",
                name,
                {
                    "nameServerRef": {"name": "stns"},
                    "replicasPerGroup": 1,
                    "storage": {"size": "1Gi", "storageClassName": cls},
                },
            )
        # no kubelet: the StatefulSet controller creates the pods' claims; the pods stay Pending
        wait_for("the claims", lambda: len(claim_sizes(cluster, "store-")) == 2)

        def bound() -> bool:
            claims = cluster.core.list_namespaced_persistent_volume_claim(cluster.ns).items
            return all(c.status.phase == "Bound" for c in claims)

        wait_for("the claims to bind (PV controller)", bound)
        old_uid = cluster.statefulset("big-broker-0").metadata.uid
        pod_uid = wait_for(
            "the pod", lambda: cluster.core.read_namespaced_pod("big-broker-0-0", cluster.ns)
        ).metadata.uid

        cluster.patch_spec("brokers", "big", {"storage": {"size": "2Gi"}})
        cluster.patch_spec("brokers", "stuck", {"storage": {"size": "2Gi"}})
        refused = cluster.wait_condition("brokers", "stuck", "ReconcileFailed", "True")
        assert refused["reason"] == "StorageResizeUnsupported"
        assert fixed in refused["message"]
        wait_for(
            "the expandable claim to grow",
            lambda: claim_sizes(cluster, "store-big-")["store-big-broker-0-0"] == "2Gi",
        )
        sts = wait_for(
            "the recreated StatefulSet",
            lambda: (
                (s := cluster.statefulset("big-broker-0")) is not None
                and s.metadata.uid != old_uid
                and s
            ),
        )
        template = sts.spec.volume_claim_templates[0].spec.resources.requests["storage"]
        assert template == "2Gi"
        # orphaned, not deleted: the same pod object, adopted by the new StatefulSet
        pod = cluster.core.read_namespaced_pod("big-broker-0-0", cluster.ns)
        assert pod.metadata.uid == pod_uid
        # the class that cannot expand changed nothing
        assert claim_sizes(cluster, "store-stuck-") == {"store-stuck-broker-0-0": "1Gi"}
        stuck = cluster.statefulset("stuck-broker-0")
        assert stuck.spec.volume_claim_templates[0].spec.resources.requests["storage"] == "1Gi"
    finally:
        storage.delete_storage_class(grow)
        storage.delete_storage_class(fixed)
        for cls in (grow, fixed):
            cluster.core.delete_persistent_volume(f"{cls}-pv"[:63])


def test_console_objects(cluster: Cluster, operator: KopfRunner) -> None:
    cluster.create("nameservers", "cns", {"replicas": 2})
    cluster.create("brokers", "cb", {"nameServerRef": {"name": "cns"}, "replicasPerGroup": 1})
    cluster.create(
        "consoles",
        "ops",
        {
            "brokerRef": {"name": "cb"},
            "image": "registry.example/rocketmq-dashboard:test",
            "auth": {"secretName": "console-users"},
        },
    )
    apps = k8s.AppsV1Api(cluster.core.api_client)
    deploy = wait_for(
        "the dashboard Deployment",
        lambda: next(
            (
                d
                for d in apps.list_namespaced_deployment(cluster.ns).items
                if d.metadata.name == "ops-console"
            ),
            None,
        ),
    )
    opts = deploy.spec.template.spec.containers[0].env[0].value
    assert "cns-namesrv-0.cns-namesrv-hs" in opts and "cns-namesrv-1.cns-namesrv-hs" in opts
    assert "-Drocketmq.config.loginRequired=true" in opts
    assert cluster.service("ops-console") is not None
    net = k8s.NetworkingV1Api(cluster.core.api_client)
    assert net.read_namespaced_network_policy("ops-console", cluster.ns).spec.ingress
    status = wait_for(
        "the Console status", lambda: status_of(cluster, "consoles", "ops").get("url")
    )
    assert status.startswith("http://ops-console.")
