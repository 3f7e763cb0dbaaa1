"""Broker spec.proxy against a real kube-apiserver 1.20 with its controller-manager: the proxy's
ConfigMap, Service and Deployment appear; the Deployment controller makes its pods, which the test
marks Ready as a kubelet would; status.proxy and ProxyReady follow; removing spec.proxy deletes the
objects."""

from __future__ import annotations

import json
from typing import Any

from kopf.testing import KopfRunner

from k8s.operator_env import Cluster, cluster, ferrymq_crds, operator, wait_for

__all__ = ["cluster", "ferrymq_crds", "operator"]

SELECTOR = "app.kubernetes.io/instance=orders,app.kubernetes.io/component=proxy"


def proxy_status(cluster: Cluster) -> dict[str, Any] | None:
    found: dict[str, Any] | None = (
        (cluster.get("brokers", "orders") or {}).get("status") or {}
    ).get("proxy")
    return found


def ready_proxy_status(cluster: Cluster, ready: int) -> dict[str, Any] | None:
    status = proxy_status(cluster)
    return status if status is not None and status["readyReplicas"] == ready else None


def test_proxy_follows_spec_proxy(cluster: Cluster, operator: KopfRunner) -> None:
    cluster.create("nameservers", "routes", {"replicas": 1})
    cluster.create(
        "brokers",
        "orders",
        {
            "nameServerRef": {"name": "routes"},
            "replicasPerGroup": 1,
            "storage": {"type": "ephemeral", "size": "1Gi"},
            "proxy": {"replicas": 2, "grpcPort": 8081},
        },
    )
    deploy = wait_for("the proxy Deployment", lambda: cluster.deployment("orders-proxy"))
    main = deploy.spec.template.spec.containers[0]
    assert main.args == ["proxy", "-pc", "/etc/ferrymq-proxy/rmq-proxy.json", "-pm", "cluster"]
    assert main.readiness_probe.tcp_socket.port == "grpc"
    assert deploy.metadata.owner_references[0].kind == "Broker"
    config = json.loads(cluster.configmap("orders-proxy").data["rmq-proxy.json"])
    assert config["rocketMQClusterName"] == "orders"
    assert config["grpcServerPort"] == 8081
    ns_addr = f"routes-namesrv-0.routes-namesrv-hs.{cluster.ns}.svc.cluster.local:9876"
    assert config["namesrvAddr"] == ns_addr
    svc = cluster.service("orders-proxy")
    assert svc.spec.type == "ClusterIP" and svc.spec.ports[0].port == 8081
    assert (
        wait_for("the proxy PDB", lambda: cluster.pdb("orders-proxy"))["spec"]["maxUnavailable"]
        == 1
    )

    cluster.wait_condition("brokers", "orders", "ProxyReady", "False")
    # the ReplicaSet controller makes the pods; mark them Ready as their kubelet would
    pods = wait_for(
        "2 proxy pods", lambda: cluster.pods(SELECTOR) if len(cluster.pods(SELECTOR)) == 2 else None
    )
    for pod in pods:
        cluster.mark_ready(pod.metadata.name)
    cluster.wait_condition("brokers", "orders", "ProxyReady", "True", "ProxyPodsReady")
    status = wait_for("status.proxy with 2 ready", lambda: ready_proxy_status(cluster, 2))
    assert status["endpoint"] == f"orders-proxy.{cluster.ns}.svc.cluster.local:8081"
    assert status["replicas"] == 2

    cluster.patch_spec("brokers", "orders", {"proxy": None})
    wait_for(
        "the proxy Deployment to be deleted", lambda: cluster.deployment("orders-proxy") is None
    )
    wait_for("the proxy Service to be deleted", lambda: cluster.service("orders-proxy") is None)
    wait_for("the proxy ConfigMap to be deleted", lambda: cluster.configmap("orders-proxy") is None)
    wait_for("the proxy PDB to be deleted", lambda: cluster.pdb("orders-proxy") is None)
    wait_for("status.proxy to be cleared", lambda: proxy_status(cluster) is None)
    assert cluster.condition("brokers", "orders", "ProxyReady") is None


def test_proxy_with_acl_is_refused_with_what_to_change(
    cluster: Cluster, operator: KopfRunner
) -> None:
    cluster.create("nameservers", "routes", {"replicas": 1})
    cluster.create(
        "brokers", "orders", {"nameServerRef": {"name": "routes"}, "acl": {}, "proxy": {}}
    )
    cond = cluster.wait_condition("brokers", "orders", "ReconcileFailed", "True", "InvalidSpec")
    assert "remove spec.proxy or spec.acl" in cond["message"]
    assert cluster.deployment("orders-proxy") is None
