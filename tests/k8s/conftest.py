"""Fixtures for tests against a real Kubernetes 1.20 API server (see control_plane.py).

- ``kube_api`` (session): etcd + kube-apiserver + kube-controller-manager on 127.0.0.1, a ``KubeApi`` with
  ``kubeconfig_path``, ``server``, ``token``, ``ca_file``, ``api_client()`` and ``env()``.
- ``k8s_client`` (function): an ``ApiClient`` for it, closed after the test.
- ``kubeconfig_env`` (function): ``KUBECONFIG`` pointed at it for the test (kopf, helm, kubectl).
- ``k8s_namespace`` (function): a fresh namespace, deleted after the test.
- ``helm_bin`` / ``kubectl_bin`` (session): paths from the provisioned cache.

Every test under this directory gets the ``k8s`` marker. Without the provisioned cache the tests skip
with a message naming scripts/k8s-control-plane.sh; with ``FERRYMQ_K8S_REQUIRED=1`` (CI) they fail instead.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from k8s.fixtures import (
    helm_bin,
    k8s_client,
    k8s_namespace,
    kube_api,
    kubeconfig_env,
    kubectl_bin,
)

__all__ = ["helm_bin", "k8s_client", "k8s_namespace", "kube_api", "kubeconfig_env", "kubectl_bin"]

_HERE = Path(__file__).parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _HERE in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.k8s)
