"""Fixtures for the Helm chart tests: helm/kubectl from the provisioned cache, the real API server.

The control-plane fixtures are the ones tests/k8s uses (k8s.fixtures); this directory gets its own
session instance of ``kube_api``. Tests that need it carry the ``k8s`` marker.
"""

from __future__ import annotations

import pytest
from k8s.fixtures import (
    helm_bin,
    k8s_client,
    k8s_namespace,
    kube_api,
    kubectl_bin,
)

from chart.helm import CHART

__all__ = ["helm_bin", "k8s_client", "k8s_namespace", "kube_api", "kubectl_bin"]


@pytest.fixture(autouse=True, scope="session")
def _chart_present() -> None:
    if not (CHART / "Chart.yaml").is_file():
        pytest.fail(f"{CHART / 'Chart.yaml'} is missing", pytrace=False)
