"""Health-gated rolling updates, stalls and the lifecycle annotations against a real
kube-apiserver 1.20 with its StatefulSet controller, the operator in-process (KopfRunner).

No kubelet runs here: the StatefulSet controller creates the pods, and the tests mark them Ready
through the Pod status subresource where a kubelet would (saying so at each step). A pod that is
never marked Ready plays a pod that does not start (a bad image).

Groups of one pod (replicasPerGroup 1) keep the broker admin protocol out of these tests: with a
slave, the replication gate asks the brokers (tests/operator/test_lifecycle.py covers that part
against real brokers).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kopf.testing import KopfRunner
from kubernetes import client as k8s

from k8s.control_plane import KubeApi
from k8s.operator_env import Cluster, ferrymq_crds, wait_for

__all__ = ["ferrymq_crds"]

STALL_S = 20
PAUSE = "ferrymq.io/pause-reconciliation"
RESTART = "ferrymq.io/manual-rolling-restart"


@pytest.fixture(scope="module")
def lifecycle_operator(kube_api: KubeApi, ferrymq_crds: list[str]) -> Iterator[KopfRunner]:
    """The operator with a short roll-out stall deadline (the default is 10 minutes)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KUBECONFIG", str(kube_api.kubeconfig_path))
        mp.setenv("FERRYMQ_OPERATOR_RESYNC_SECONDS", "3")
        mp.setenv("FERRYMQ_OPERATOR_RETRY_DELAY_SECONDS", "2")
        mp.setenv("FERRYMQ_OPERATOR_ADMIN_TIMEOUT_SECONDS", "1")
        mp.setenv("FERRYMQ_OPERATOR_ROLLOUT_STALL_SECONDS", str(STALL_S))
        args = ["run", "--standalone", "--all-namespaces", "-m", "ferrymq_operator.handlers"]
        # stopping waits for kopf's event-post retries into namespaces being deleted (its
        # backoffs add up to about a minute), so give teardown more than that
        with KopfRunner(args, timeout=180) as runner:
            yield runner
    assert runner.exception is None, runner.output
    assert runner.exit_code == 0, runner.output


@pytest.fixture
def cluster(kube_api: KubeApi, k8s_namespace: str) -> Iterator[Cluster]:
    with kube_api.api_client() as api_client:
        yield Cluster(api_client, k8s_namespace)


def pod(cluster: Cluster, name: str) -> Any | None:
    try:
        return cluster.core.read_namespaced_pod(name, cluster.ns)
    except k8s.ApiException as exc:
        if exc.status == 404:
            return None
        raise


def uid(cluster: Cluster, name: str) -> str | None:
    found = pod(cluster, name)
    return None if found is None else str(found.metadata.uid)


def replaced(cluster: Cluster, name: str, old_uid: str) -> str | None:
    """The new pod's uid once the operator deleted the old one and the controller made a new one."""
    now = uid(cluster, name)
    return now if now is not None and now != old_uid else None


def status(cluster: Cluster, name: str = "orders") -> dict[str, Any]:
    return (cluster.get("brokers", name) or {}).get("status") or {}


def start_cluster(cluster: Cluster, groups: int) -> list[str]:
    cluster.create("nameservers", "routes", {"replicas": 1})
    cluster.create(
        "brokers",
        "orders",
        {"nameServerRef": {"name": "routes"}, "groups": groups, "replicasPerGroup": 1},
    )
    pods = [f"orders-broker-{g}-0" for g in range(groups)]
    # no kubelet: mark the pods Ready as a kubelet would once the brokers answer their probe
    cluster.wait_pods_and_mark_ready(pods)
    cluster.wait_condition("brokers", "orders", "Ready", "True")
    return pods


def test_update_rolls_one_pod_at_a_time_and_stalls_on_a_pod_that_never_starts(
    cluster: Cluster, lifecycle_operator: KopfRunner
) -> None:
    pods = start_cluster(cluster, groups=3)
    sts = cluster.statefulset("orders-broker-0")
    assert sts.spec.update_strategy.type == "OnDelete"
    uids = {p: uid(cluster, p) for p in pods}

    cluster.patch_spec("brokers", "orders", {"image": "ferrymq/broker:rollout-2"})
    # Group 0 first; the others are left alone while its new pod is not Ready.
    new0 = wait_for("group 0 rolled", lambda: replaced(cluster, pods[0], str(uids[pods[0]])))
    cluster.wait_event("orders", "RollingPod")
    progressing = cluster.wait_condition(
        "brokers", "orders", "Progressing", "True", "RollingUpdate"
    )
    assert "orders-broker-0-0" in progressing["message"]
    assert status(cluster)["rollout"]["pod"] == "orders-broker-0-0"
    for p in pods[1:]:
        assert uid(cluster, p) == uids[p], f"{p} was rolled while group 0 was not Ready"

    # the kubelet would report the new pod Ready once the broker is up: the next group rolls
    cluster.mark_ready(pods[0])
    new1 = wait_for("group 1 rolled", lambda: replaced(cluster, pods[1], str(uids[pods[1]])))
    assert uid(cluster, pods[0]) == new0 and uid(cluster, pods[2]) == uids[pods[2]]

    # Group 1's new pod never becomes Ready (a broken image): after the stall deadline the roll
    # stops with Degraded, and group 2 keeps its old, working pod.
    degraded = cluster.wait_condition("brokers", "orders", "Degraded", "True", "RolloutStalled")
    assert "orders-broker-1-0" in degraded["message"] and "not Ready" in degraded["message"]
    cluster.wait_event("orders", "RolloutStalled", "Warning")
    assert uid(cluster, pods[2]) == uids[pods[2]]
    assert uid(cluster, pods[1]) == new1

    # The user fixes the spec: the broken pod is rolled at once (it serves nothing), then the rest.
    cluster.patch_spec("brokers", "orders", {"image": "ferrymq/broker:rollout-3"})
    new1b = wait_for("the broken pod rolled again", lambda: replaced(cluster, pods[1], str(new1)))
    cluster.mark_ready(pods[1])  # kubelet: the fixed image starts
    wait_for("group 0 rolled to the fix", lambda: replaced(cluster, pods[0], str(new0)))
    cluster.mark_ready(pods[0])
    wait_for("group 2 rolled", lambda: replaced(cluster, pods[2], str(uids[pods[2]])))
    cluster.mark_ready(pods[2])
    cluster.wait_condition("brokers", "orders", "Ready", "True")
    cluster.wait_condition("brokers", "orders", "Degraded", "False")
    wait_for("status.rollout cleared", lambda: "rollout" not in status(cluster) or None)
    assert uid(cluster, pods[1]) == new1b
    for group, name in enumerate(pods):
        current = cluster.statefulset(f"orders-broker-{group}").status.update_revision
        found = pod(cluster, name)
        assert found is not None
        assert found.metadata.labels["controller-revision-hash"] == current


def test_pause_annotation_freezes_the_cluster(
    cluster: Cluster, lifecycle_operator: KopfRunner
) -> None:
    pods = start_cluster(cluster, groups=1)
    before = uid(cluster, pods[0])
    template = cluster.statefulset("orders-broker-0").spec.template.spec.containers[0].image
    cluster.custom.patch_namespaced_custom_object(
        "ferrymq.io", "v1alpha1", cluster.ns, "brokers", "orders",
        {"metadata": {"annotations": {PAUSE: "true"}}},
    )  # fmt: skip
    paused = cluster.wait_condition("brokers", "orders", "ReconciliationPaused", "True")
    assert PAUSE in paused["message"]
    cluster.patch_spec("brokers", "orders", {"image": "ferrymq/broker:paused-2"})
    # A reconcile pass saw the new generation (the condition carries it) and changed nothing.
    cluster.wait_condition("brokers", "orders", "ReconciliationPaused", "True", generation=2)
    sts = cluster.statefulset("orders-broker-0")
    assert sts.spec.template.spec.containers[0].image == template
    assert uid(cluster, pods[0]) == before

    cluster.custom.patch_namespaced_custom_object(
        "ferrymq.io", "v1alpha1", cluster.ns, "brokers", "orders",
        {"metadata": {"annotations": {PAUSE: None}}},
    )  # fmt: skip
    wait_for(
        "the new image applied after resuming",
        lambda: (
            cluster.statefulset("orders-broker-0").spec.template.spec.containers[0].image
            == "ferrymq/broker:paused-2"
            or None
        ),
    )
    wait_for(
        "ReconciliationPaused gone",
        lambda: cluster.condition("brokers", "orders", "ReconciliationPaused") is None or None,
    )
    cluster.wait_event("orders", "ReconciliationResumed")
    wait_for("the pod rolled after resuming", lambda: replaced(cluster, pods[0], str(before)))


def test_manual_rolling_restart_is_one_shot(
    cluster: Cluster, lifecycle_operator: KopfRunner
) -> None:
    pods = start_cluster(cluster, groups=2)
    uids = {p: uid(cluster, p) for p in pods}
    cluster.custom.patch_namespaced_custom_object(
        "ferrymq.io", "v1alpha1", cluster.ns, "brokers", "orders",
        {"metadata": {"annotations": {RESTART: "now"}}},
    )  # fmt: skip
    new0 = wait_for(
        "pod of group 0 restarted", lambda: replaced(cluster, pods[0], str(uids[pods[0]]))
    )
    assert uid(cluster, pods[1]) == uids[pods[1]]
    cluster.mark_ready(pods[0])  # kubelet: the restarted broker is up
    wait_for("pod of group 1 restarted", lambda: replaced(cluster, pods[1], str(uids[pods[1]])))
    cluster.mark_ready(pods[1])
    wait_for(
        "the annotation removed",
        lambda: (
            RESTART
            not in ((cluster.get("brokers", "orders") or {})["metadata"].get("annotations") or {})
            or None
        ),
    )
    cluster.wait_event("orders", "RollingRestartDone")
    cluster.wait_condition("brokers", "orders", "Ready", "True")
    # one-shot: no further restarts
    assert uid(cluster, pods[0]) == new0


def test_nameserver_scaling_reaches_brokers_without_a_restart(
    cluster: Cluster, lifecycle_operator: KopfRunner
) -> None:
    """The new namesrvAddr goes into broker.conf (for the next start) and to the running brokers
    through UPDATE_BROKER_CONFIG; the pod template does not change, so no pod is restarted. The
    brokers' DNS names do not resolve here, so the push is reported pending (and retried)."""
    pods = start_cluster(cluster, groups=1)
    before = uid(cluster, pods[0])
    template = cluster.statefulset("orders-broker-0").spec.template.metadata.annotations
    cluster.patch_spec("nameservers", "routes", {"replicas": 2})

    def conf_lists_two() -> bool | None:
        cm = cluster.configmap("orders-broker-0-config")
        return (cm is not None and "routes-namesrv-1." in cm.data["broker-0.conf"]) or None

    wait_for("broker.conf to list both NameServers", conf_lists_two)
    progressing = cluster.wait_condition("brokers", "orders", "Progressing", "True")
    wait_for(
        "the pending namesrvAddr push reported",
        lambda: (
            "namesrvAddr not yet updated on orders-broker-0-0"
            in (cluster.condition("brokers", "orders", "Progressing") or progressing)["message"]
            or None
        ),
    )
    assert cluster.statefulset("orders-broker-0").spec.template.metadata.annotations == template
    assert uid(cluster, pods[0]) == before
