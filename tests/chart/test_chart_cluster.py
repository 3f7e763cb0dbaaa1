"""charts/ferrymq-operator against a real kube-apiserver 1.20 (see tests/k8s/control_plane.py).

The server-side dry run is the only check that validates the chart's objects (and its CRDs) with the API
server's own rules. There is no kubelet, so the operator Deployment never becomes available: installs
are not run with --wait; the tests check the objects the API server stored.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml
from k8s.control_plane import KubeApi
from kubernetes import client as k8s

from chart.helm import CHART, by_kind, documents, run, template

pytestmark = pytest.mark.k8s

T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = 60.0) -> T:
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(0.2)  # poll interval
    pytest.fail(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")


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
