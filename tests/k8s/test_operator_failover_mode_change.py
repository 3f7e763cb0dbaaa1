"""Changing spec.failover of a running Broker (none <-> controller), against a real kube-apiserver
with the operator running: the change is refused with Ready=False reason
FailoverModeChangeUnsupported and nothing the brokers run with changes (no controller deployed or
removed, broker confs and pod templates untouched); setting it back resumes normal reconciling.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import javaproperties
import pytest
from kopf.testing import KopfRunner

from k8s.control_plane import KubeApi
from k8s.operator_env import Cluster, ferrymq_crds, operator, wait_for

__all__ = ["ferrymq_crds", "operator"]

REASON = "FailoverModeChangeUnsupported"


@pytest.fixture
def cluster(kube_api: KubeApi, k8s_namespace: str) -> Iterator[Cluster]:
    with kube_api.api_client() as api_client:
        yield Cluster(api_client, k8s_namespace)


def _broker(failover: str) -> dict[str, Any]:
    return {
        "nameServerRef": {"name": "routes"},
        "groups": 1,
        "replicasPerGroup": 2,
        "brokerRole": "SYNC_MASTER",
        "failover": failover,
        "storage": {"size": "1Gi"},
    }


def _deployed(cluster: Cluster, name: str) -> tuple[Any, Any, Any]:
    """What the pods run with: group 0's broker confs and pod template, and the controller."""
    cm = cluster.configmap(f"{name}-broker-0-config")
    sts = cluster.statefulset(f"{name}-broker-0")
    controller = cluster.statefulset(f"{name}-controller")
    template = cluster.api_client.sanitize_for_serialization(sts.spec.template)
    return dict(cm.data), template, controller is not None


def _generation(cluster: Cluster, name: str) -> int:
    body = cluster.get("brokers", name) or {}
    return int(body["metadata"]["generation"])


def test_failover_mode_change_refused_and_nothing_changes(
    cluster: Cluster, operator: KopfRunner
) -> None:
    cluster.create("nameservers", "routes", {"replicas": 1})
    cluster.create("brokers", "plain", _broker("none"))
    cluster.create("brokers", "elected", _broker("controller"))
    for name in ("plain", "elected"):
        wait_for(f"{name} StatefulSet", functools.partial(cluster.statefulset, f"{name}-broker-0"))
    wait_for("elected's controller", functools.partial(cluster.statefulset, "elected-controller"))
    before = {name: _deployed(cluster, name) for name in ("plain", "elected")}
    conf = javaproperties.loads(before["plain"][0]["broker-0.conf"])
    assert "enableControllerMode" not in conf and conf["brokerId"] == "0"
    assert before["plain"][2] is False and before["elected"][2] is True

    cluster.patch_spec("brokers", "plain", {"failover": "controller"})
    cluster.patch_spec("brokers", "elected", {"failover": "none"})
    for name, deployed, wanted in (
        ("plain", "none", "controller"),
        ("elected", "controller", "none"),
    ):
        ready = cluster.wait_condition(
            "brokers", name, "Ready", "False", REASON, _generation(cluster, name)
        )
        assert f"spec.failover is '{wanted}'" in ready["message"], ready
        assert f"run with failover '{deployed}'" in ready["message"], ready
        assert _deployed(cluster, name) == before[name], f"{name}: the refused change was applied"
        failed = cluster.condition("brokers", name, "ReconcileFailed") or {}
        assert (failed.get("status"), failed.get("reason")) == ("True", REASON), failed

    # back to the mode it runs in: reconciled again (the pods become Ready, so does the Broker)
    cluster.patch_spec("brokers", "plain", {"failover": "none"})
    generation = _generation(cluster, "plain")

    def refusal_gone() -> bool:
        cond = cluster.condition("brokers", "plain", "Ready") or {}
        return cond.get("observedGeneration") == generation and cond.get("reason") != REASON

    wait_for("plain reconciled after the revert", refusal_gone)
    cluster.wait_pods_and_mark_ready(["plain-broker-0-0", "plain-broker-0-1"])
    cluster.wait_condition("brokers", "plain", "Ready", "True", None, generation)
    assert _deployed(cluster, "plain") == before["plain"]
    # the other one still refuses: its spec still asks for the change
    ready = cluster.condition("brokers", "elected", "Ready") or {}
    assert ready.get("reason") == REASON, ready
