"""The chart's RBAC suffices for spec.failover controller: the operator, running with only the
chart's ServiceAccount token, creates the controller's ServiceAccount, Role (RBAC refuses to let
anyone grant Lease/ConfigMap verbs it does not hold itself), RoleBinding and StatefulSet."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from kopf.testing import KopfRunner

from k8s.control_plane import KubeApi
from k8s.operator_env import Cluster, ferrymq_crds, wait_for
from k8s.test_operator_rbac import service_account_kubeconfig

__all__ = ["ferrymq_crds", "service_account_kubeconfig"]


def test_chart_rbac_lets_the_operator_deploy_the_controller(
    kube_api: KubeApi,
    ferrymq_crds: list[str],
    k8s_namespace: str,
    service_account_kubeconfig: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KUBECONFIG", str(service_account_kubeconfig))
        mp.setenv("FERRYMQ_OPERATOR_RETRY_DELAY_SECONDS", "2")
        # the chart's default RBAC: the release namespace only (here the test's namespace)
        args = ["run", "--standalone", "--namespace", k8s_namespace]
        args += ["-m", "ferrymq_operator.handlers"]
        with kube_api.api_client() as admin_client, KopfRunner(args, timeout=180) as runner:
            cluster = Cluster(admin_client, k8s_namespace)
            cluster.create("nameservers", "routes", {"replicas": 1})
            cluster.create(
                "brokers",
                "orders",
                {
                    "nameServerRef": {"name": "routes"},
                    "replicasPerGroup": 2,
                    "failover": "controller",
                    "storage": {"size": "1Gi"},
                },
            )
            wait_for("the controller StatefulSet", lambda: cluster.statefulset("orders-controller"))
            rbac = cluster.dynamic.resources.get(
                api_version="rbac.authorization.k8s.io/v1", kind="Role"
            )
            role = rbac.get(name="orders-controller", namespace=k8s_namespace)
            assert {r["resources"][0] for r in role.rules} == {"leases", "configmaps"}
            wait_for("the broker StatefulSet", lambda: cluster.statefulset("orders-broker-0"))
    assert runner.exception is None
    denied = [
        r.getMessage()
        for r in caplog.records
        if "forbidden" in r.getMessage().lower() and "system:serviceaccount" in r.getMessage()
    ]
    assert not denied, denied
