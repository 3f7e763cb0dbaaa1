"""Least privilege, proven: the operator runs with the token of the chart's ServiceAccount, bound
only to the chart's rendered ClusterRoles, and still reconciles a NameServer to Ready.

The chart's RBAC objects are rendered with helm and applied to the real kube-apiserver; the
controller-manager's token controller issues the ServiceAccount token (Kubernetes 1.20). There is
no kubelet: the test marks the pod Ready through the Pod status subresource, as a kubelet would.
"""

from __future__ import annotations

import base64
import logging
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kopf.testing import KopfRunner
from kubernetes import client as k8s

from k8s.control_plane import KubeApi, write_kubeconfig
from k8s.operator_env import ROOT, Cluster, ferrymq_crds, wait_for

__all__ = ["ferrymq_crds"]

RBAC_KINDS = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}


def render_rbac(helm: Path, release: str, namespace: str) -> list[dict[str, Any]]:
    out = subprocess.run(
        [
            str(helm),
            "template",
            release,
            str(ROOT / "charts" / "ferrymq-operator"),
            "-n",
            namespace,
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d and d["kind"] in RBAC_KINDS]


def kubectl(kubectl_bin: Path, kube_api: KubeApi, verb: str, docs: list[dict[str, Any]]) -> None:
    subprocess.run(
        [str(kubectl_bin), verb, "-f", "-"],
        input=yaml.safe_dump_all(docs),
        env=kube_api.env(),
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )


@pytest.fixture
def service_account_kubeconfig(
    helm_bin: Path, kubectl_bin: Path, kube_api: KubeApi, k8s_namespace: str, tmp_path: Path
) -> Iterator[Path]:
    release = f"rbac-{secrets.token_hex(3)}"
    docs = render_rbac(helm_bin, release, k8s_namespace)
    kubectl(kubectl_bin, kube_api, "apply", docs)
    account = next(d for d in docs if d["kind"] == "ServiceAccount")["metadata"]["name"]
    with kube_api.api_client() as api_client:
        core = k8s.CoreV1Api(api_client)

        def token() -> str | None:
            sa = core.read_namespaced_service_account(account, k8s_namespace)
            for ref in sa.secrets or []:
                if ref.name is None:
                    continue
                secret = core.read_namespaced_secret(ref.name, k8s_namespace)
                if secret.data and "token" in secret.data:
                    return base64.b64decode(secret.data["token"]).decode()
            return None

        sa_token = wait_for("the ServiceAccount token", token)
    path = tmp_path / "operator.kubeconfig"
    write_kubeconfig(path, kube_api.server, kube_api.ca_file, sa_token)
    yield path
    kubectl(kubectl_bin, kube_api, "delete", [d for d in docs if d["kind"] != "ServiceAccount"])


def test_operator_works_with_the_chart_rbac_only(
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
            cluster.create("nameservers", "rbac", {"replicas": 1})
            wait_for("the StatefulSet", lambda: cluster.statefulset("rbac-namesrv"))
            wait_for("the PDB", lambda: cluster.pdb("rbac-namesrv"))
            cluster.wait_pods_and_mark_ready(["rbac-namesrv-0"])
            cluster.wait_condition("nameservers", "rbac", "Ready", "True")
            wait_for(
                "events posted by the operator",
                lambda: any(e.reason == "Created" for e in cluster.events_for("rbac")),
            )
    assert runner.exception is None
    # RBAC denials name the identity; other 403s (e.g. posting into a namespace that an earlier
    # test is deleting) are not about the chart's rules.
    denied = [
        r.getMessage()
        for r in caplog.records
        if "forbidden" in r.getMessage().lower() and "system:serviceaccount" in r.getMessage()
    ]
    assert not denied, denied
