"""Children the spec no longer wants are deleted, against a real kube-apiserver 1.20 (operator
in-process): a Broker's per-pod NodePort Services once ``spec.externalAccess`` is removed, while
the Services it still wants stay."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kopf.testing import KopfRunner

from k8s.control_plane import KubeApi
from k8s.operator_env import Cluster, ferrymq_crds, operator, wait_for

__all__ = ["ferrymq_crds", "operator"]

# Away from the default nodePortBase (30911) other tests' Brokers allocate on the same API server.
NODE_PORT_BASE = 32311


@pytest.fixture
def cluster(kube_api: KubeApi, k8s_namespace: str) -> Iterator[Cluster]:
    with kube_api.api_client() as api_client:
        yield Cluster(api_client, k8s_namespace)


def test_node_port_services_go_with_external_access(cluster: Cluster, operator: KopfRunner) -> None:
    cluster.create("nameservers", "routes", {"replicas": 1})
    cluster.create(
        "brokers",
        "edge",
        {
            "nameServerRef": {"name": "routes"},
            "groups": 1,
            "replicasPerGroup": 2,
            "externalAccess": {"type": "NodePort", "nodePortBase": NODE_PORT_BASE},
        },
    )
    external = ["edge-broker-0-0-external", "edge-broker-0-1-external"]
    services = wait_for(
        "the per-pod NodePort Services",
        lambda: (
            [cluster.service(n) for n in external] if all(map(cluster.service, external)) else None
        ),
    )
    assert sorted(s.spec.ports[0].node_port for s in services) == [
        NODE_PORT_BASE,
        NODE_PORT_BASE + 10,
    ]

    cluster.patch_spec("brokers", "edge", {"externalAccess": None})
    wait_for(
        "the NodePort Services to be deleted",
        lambda: not any(cluster.service(n) for n in external),
    )
    # the Services the spec still wants are kept
    assert cluster.service("edge-broker-hs") is not None
    assert cluster.statefulset("edge-broker-0") is not None
