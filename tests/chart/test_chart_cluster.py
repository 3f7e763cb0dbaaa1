"""charts/ferrymq-operator against a real kube-apiserver 1.20 (see tests/k8s/control_plane.py).

The server-side dry run is the only check that validates the chart's objects (and its CRDs) with the API
server's own rules. There is no kubelet, so the operator Deployment never becomes available: installs
are not run with --wait; the tests check the objects the API server stored.
"""

from __future__ import annotations

import base64
import re
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import polling
import pytest
import yaml
from ferrymq.broker.local_cluster import pick_free_port
from k8s.control_plane import KubeApi, write_kubeconfig
from kubernetes import client as k8s
from subprocess_helpers import popen

from chart.helm import CHART, by_kind, documents, run, template

pytestmark = pytest.mark.k8s


wait_for = polling.poll_value


def release_name() -> str:
    # Cluster-scoped objects (ClusterRole, bindings) carry the release name: one per test.
    return f"fmq-{secrets.token_hex(3)}"


def test_server_side_dry_run_accepts_the_rendered_chart(
    helm_bin: Path, kubectl_bin: Path, kube_api: KubeApi, k8s_namespace: str
) -> None:
    # --validate: .Capabilities come from the server's discovery (1.20: no policy/v1 PDB).
    rendered = template(
        helm_bin, "--validate", "--include-crds", namespace=k8s_namespace, env=kube_api.env()
    ).stdout
    out = run(
        [kubectl_bin, "apply", "--dry-run=server", "-n", k8s_namespace, "-f", "-"],
        env=kube_api.env(),
        stdin=rendered,
    )
    applied = [line for line in out.stdout.splitlines() if "(server dry run)" in line]
    assert len(applied) == len(documents(rendered)), out.stdout


def test_server_side_dry_run_rejects_a_broken_object(
    helm_bin: Path, kubectl_bin: Path, kube_api: KubeApi, k8s_namespace: str
) -> None:
    """The dry run is a real check: the same stream with one Deployment field broken is refused."""
    docs = documents(template(helm_bin, namespace=k8s_namespace).stdout)
    [deployment] = by_kind(docs, "Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["name"] = "Not_A_DNS_Label"
    out = run(
        [kubectl_bin, "apply", "--dry-run=server", "-n", k8s_namespace, "-f", "-"],
        env=kube_api.env(),
        stdin=yaml.safe_dump(deployment),
        check=False,
    )
    assert out.returncode != 0
    assert "Not_A_DNS_Label" in out.stderr


def _deployment(apps: k8s.AppsV1Api, namespace: str) -> dict[str, Any] | None:
    """The namespace's only Deployment as plain JSON (the shape the chart templates write)."""
    items = apps.list_namespaced_deployment(namespace).items
    if len(items) != 1:
        return None
    as_json: dict[str, Any] = apps.api_client.sanitize_for_serialization(items[0])
    return as_json


def crd_names(ext: k8s.ApiextensionsV1Api) -> set[str]:
    return {getattr(c.metadata, "name", "") for c in ext.list_custom_resource_definition().items}


def test_helm_install_upgrade_uninstall(
    helm_bin: Path, kube_api: KubeApi, k8s_client: k8s.ApiClient, k8s_namespace: str
) -> None:
    env = kube_api.env()
    release = release_name()
    apps = k8s.AppsV1Api(k8s_client)
    ext = k8s.ApiextensionsV1Api(k8s_client)
    rbac = k8s.RbacAuthorizationV1Api(k8s_client)
    selector = f"app.kubernetes.io/instance={release}"

    run([helm_bin, "install", release, CHART, "-n", k8s_namespace], env=env)
    deployment = wait_for("the operator Deployment", lambda: _deployment(apps, k8s_namespace))
    assert deployment["metadata"]["generation"] == 1
    crds = crd_names(ext)
    assert {"nameservers.ferrymq.io", "brokers.ferrymq.io"} <= crds
    assert (
        rbac.list_cluster_role(label_selector=selector).items
        or rbac.list_namespaced_role(k8s_namespace, label_selector=selector).items
    )

    run(
        [
            helm_bin, "upgrade", release, CHART, "-n", k8s_namespace, "--reuse-values",
            "--set", "resources.limits.memory=321Mi",
        ],
        env=env,
    )  # fmt: skip
    upgraded = _deployment(apps, k8s_namespace)
    assert upgraded is not None
    assert upgraded["metadata"]["generation"] == 2
    container = upgraded["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["memory"] == "321Mi"
    history = run([helm_bin, "history", release, "-n", k8s_namespace, "-o", "json"], env=env)
    assert '"revision":2' in history.stdout.replace(" ", "")

    run([helm_bin, "uninstall", release, "-n", k8s_namespace], env=env)
    wait_for("the Deployment to be deleted", lambda: _deployment(apps, k8s_namespace) is None)
    assert not rbac.list_cluster_role(label_selector=selector).items
    assert not rbac.list_cluster_role_binding(label_selector=selector).items
    # helm never deletes CRDs from a chart's crds/ directory (that would delete every CR).
    assert "brokers.ferrymq.io" in crd_names(ext)


def _versions_of(docs: list[dict[str, Any]], kind: str) -> set[str]:
    return {d["apiVersion"] for d in by_kind(docs, kind)}


def test_capabilities_pick_api_versions_the_server_serves(
    helm_bin: Path, kube_api: KubeApi, k8s_namespace: str
) -> None:
    """Against 1.20 (discovery: no policy/v1, no batch/v1 CronJob) the chart falls back to v1beta1."""
    against_120 = documents(
        template(helm_bin, "--validate", namespace=k8s_namespace, env=kube_api.env()).stdout
    )
    offline = documents(
        template(helm_bin, "--api-versions", "policy/v1", "--api-versions", "batch/v1").stdout
    )
    checked = 0
    for kind, new, old in (
        ("PodDisruptionBudget", "policy/v1", "policy/v1beta1"),
        ("CronJob", "batch/v1", "batch/v1beta1"),
    ):
        if not by_kind(offline, kind):
            continue
        checked += 1
        assert _versions_of(offline, kind) == {new}
        assert _versions_of(against_120, kind) == {old}
    if not checked:
        pytest.skip("the chart renders no PodDisruptionBudget or CronJob with default values")


def test_the_1_20_server_refuses_the_offline_pdb(
    helm_bin: Path, kubectl_bin: Path, kube_api: KubeApi, k8s_namespace: str
) -> None:
    """Why the capability switch matters: 1.20 has no policy/v1 PodDisruptionBudget at all."""
    [pdb] = by_kind(
        documents(template(helm_bin, namespace=k8s_namespace).stdout), "PodDisruptionBudget"
    )
    assert pdb["apiVersion"] == "policy/v1"
    out = run(
        [kubectl_bin, "apply", "--dry-run=server", "-n", k8s_namespace, "-f", "-"],
        env=kube_api.env(),
        stdin=yaml.safe_dump(pdb),
        check=False,
    )
    assert out.returncode != 0
    assert 'no matches for kind "PodDisruptionBudget" in version "policy/v1"' in out.stderr


def service_account_kubeconfig(
    kube_api: KubeApi, core: k8s.CoreV1Api, namespace: str, account: str, path: Path
) -> Path:
    """A kubeconfig holding the ServiceAccount's token (1.20: from its token Secret)."""

    def token() -> str | None:
        sa = core.read_namespaced_service_account(account, namespace)
        for ref in sa.secrets or []:
            secret = core.read_namespaced_secret(str(ref.name), namespace)
            if secret.type == "kubernetes.io/service-account-token" and secret.data:
                return base64.b64decode(secret.data["token"]).decode()
        return None

    write_kubeconfig(path, kube_api.server, kube_api.ca_file, wait_for("the SA token", token))
    return path


@pytest.mark.parametrize("watch", ["one-namespace", "all-namespaces"])
def test_operator_reconciles_with_only_the_charts_rbac(
    helm_bin: Path,
    kube_api: KubeApi,
    k8s_client: k8s.ApiClient,
    k8s_namespace: str,
    tmp_path: Path,
    watch: str,
) -> None:
    """Least privilege that still works: the operator, authenticated as the chart's ServiceAccount
    and started with the chart's own args, reconciles a NameServer without a single 403.

    The operator runs as a local process (kopf run, as the image's entrypoint) rather than as the
    Deployment's Pod, since there is no kubelet; the liveness endpoint moves to a free loopback port.
    """
    release = release_name()
    # default: the release namespace only; all: watchNamespaces={*}
    extra = [] if watch == "one-namespace" else ["--set", "watchNamespaces={*}"]
    run([helm_bin, "install", release, CHART, "-n", k8s_namespace, *extra], env=kube_api.env())
    docs = documents(
        run([helm_bin, "get", "manifest", release, "-n", k8s_namespace], env=kube_api.env()).stdout
    )
    [deployment] = by_kind(docs, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    args = [a for a in pod["containers"][0]["args"] if not a.startswith("--liveness")]
    core = k8s.CoreV1Api(k8s_client)
    kubeconfig = service_account_kubeconfig(
        kube_api, core, k8s_namespace, pod["serviceAccountName"], tmp_path / "sa-kubeconfig"
    )
    env = kube_api.env()
    env["KUBECONFIG"] = str(kubeconfig)
    env.update({e["name"]: e["value"] for e in pod["containers"][0].get("env", []) if "value" in e})
    # the downward API's values, as the kubelet would set them; no /metrics on the host's
    # addresses (the chart's metricsPort would listen on 0.0.0.0)
    env.update(
        POD_NAMESPACE=k8s_namespace, POD_NAME="operator-0", FERRYMQ_OPERATOR_METRICS_PORT="0"
    )
    log_path = tmp_path / "operator.log"
    argv = [
        sys.executable, "-m", "ferrymq_operator",  # the image's entrypoint
        *args,
        f"--liveness=http://127.0.0.1:{pick_free_port('127.0.0.1')}/healthz",
    ]  # fmt: skip
    custom = k8s.CustomObjectsApi(k8s_client)
    apps = k8s.AppsV1Api(k8s_client)
    with log_path.open("wb") as log:
        proc = popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            custom.create_namespaced_custom_object(
                "ferrymq.io",
                "v1alpha1",
                k8s_namespace,
                "nameservers",
                {
                    "apiVersion": "ferrymq.io/v1alpha1",
                    "kind": "NameServer",
                    "metadata": {"name": "rbac"},
                    "spec": {"replicas": 1},
                },
            )

            def statefulset() -> bool:
                assert proc.poll() is None, log_path.read_text()
                names = [
                    getattr(s.metadata, "name", "")
                    for s in apps.list_namespaced_stateful_set(k8s_namespace).items
                ]
                return "rbac-namesrv" in names

            def status_written() -> bool:
                got = custom.get_namespaced_custom_object(
                    "ferrymq.io", "v1alpha1", k8s_namespace, "nameservers", "rbac"
                )
                assert isinstance(got, dict)
                return bool((got.get("status") or {}).get("conditions"))

            wait_for("the operator to create the StatefulSet", statefulset, timeout=90)
            wait_for("the operator to write status conditions", status_written, timeout=90)
            # it reconciles as the holder of the leader Lease (the chart enables election)
            lease = k8s.CoordinationV1Api(k8s_client).read_namespaced_lease(
                "ferrymq-operator", k8s_namespace
            )
            assert lease.spec.holder_identity == "operator-0"
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)
    output = log_path.read_text()
    # A denial reads "Forbidden"/"is forbidden" or carries the status code; a bare "403" would also
    # match log timestamps (",403]").
    denials = re.findall(r".*(?:forbidden|[(\s'\"]403[)\s,'\"}]).*", output, re.IGNORECASE)
    assert not denials, output
