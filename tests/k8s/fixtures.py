"""pytest fixtures over control_plane.py, shared by tests/k8s and tests/chart (their conftests import them).

Each conftest that imports ``kube_api`` gets its own session instance, so running tests/k8s and tests/chart
together starts two control planes (a few seconds each), one per directory.
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client as k8s

from k8s.control_plane import (
    CONTROL_PLANE_BINARIES,
    ControlPlaneError,
    KubeApi,
    binary_path,
    running_control_plane,
    skip_reason,
)

REQUIRED_ENV = "FERRYMQ_K8S_REQUIRED"


def skip_or_fail(reason: str) -> None:
    """Skip when the cache is not provisioned, unless CI said the environment must be there."""
    if os.environ.get(REQUIRED_ENV) == "1":
        pytest.fail(f"{reason} ({REQUIRED_ENV}=1)", pytrace=False)
    pytest.skip(reason)


def _tool(name: str) -> Path:
    reason = skip_reason((name,))
    if reason:
        skip_or_fail(reason)
    return binary_path(name)


@pytest.fixture(scope="session")
def kube_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeApi]:
    reason = skip_reason(CONTROL_PLANE_BINARIES)
    if reason:
        skip_or_fail(reason)
    workdir = tmp_path_factory.mktemp("kube-control-plane")
    try:
        with running_control_plane(workdir) as api:
            yield api
    except ControlPlaneError as exc:
        pytest.fail(f"the Kubernetes control plane did not start: {exc}", pytrace=False)


@pytest.fixture
def k8s_client(kube_api: KubeApi) -> Iterator[k8s.ApiClient]:
    with kube_api.api_client() as c:
        yield c


@pytest.fixture
def kubeconfig_env(kube_api: KubeApi, monkeypatch: pytest.MonkeyPatch) -> KubeApi:
    monkeypatch.setenv("KUBECONFIG", str(kube_api.kubeconfig_path))
    return kube_api


def namespace_name(test_name: str) -> str:
    """A DNS-1123 label from the test name plus a random suffix (names are reused across reruns)."""
    base = re.sub(r"[^a-z0-9-]+", "-", test_name.lower()).strip("-")[:48].strip("-") or "t"
    return f"{base}-{secrets.token_hex(3)}"


@pytest.fixture
def k8s_namespace(kube_api: KubeApi, request: pytest.FixtureRequest) -> Iterator[str]:
    name = namespace_name(request.node.name)
    with kube_api.api_client() as c:
        core = k8s.CoreV1Api(c)
        core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=name)))
        try:
            yield name
        finally:
            # The namespace controller (controller-manager) empties and removes it in the background.
            try:
                core.delete_namespace(name, propagation_policy="Background")
            except k8s.ApiException as exc:
                if exc.status != 404:
                    raise


@pytest.fixture(scope="session")
def helm_bin() -> Path:
    return _tool("helm")


@pytest.fixture(scope="session")
def kubectl_bin() -> Path:
    return _tool("kubectl")
