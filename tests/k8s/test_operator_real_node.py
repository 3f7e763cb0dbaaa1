"""What a real node showed (issue 16), against a real kube-apiserver 1.20 with its controllers and
the operator in-process: lifecycle annotations acted on at once, a roll that logs no ERROR, the
audit CronJob's Jobs removed with it, host networking with per-pod ports, NodePort external access,
port clashes between custom resources reported as a condition, and a change of anti-affinity that
does not deadlock the roll.

No kubelet and no scheduler run here: the tests mark pods Ready through the Pod status subresource
where a kubelet would, and report a pod unschedulable where the scheduler would (saying so at each
step).
"""

from __future__ import annotations

import functools
import json
import logging
import time
from collections.abc import Iterator
from typing import Any

import javaproperties
import pytest
from kopf.testing import KopfRunner
from kubernetes import client as k8s

from k8s.control_plane import KubeApi
from k8s.operator_env import Cluster, ferrymq_crds, wait_for

__all__ = ["ferrymq_crds"]

PAUSE = "ferrymq.io/pause-reconciliation"
RESTART = "ferrymq.io/manual-rolling-restart"
LAST_HANDLED = "kopf.ferrymq.io/last-handled-configuration"
# What a user may expect of the lifecycle annotations (issue 16: "within 10 s").
ANNOTATION_S = 10.0
# The controller-manager's garbage collector is shared with every namespace being torn down.
GC_WAIT_S = 120.0
ANTI_AFFINITY = (
    "0/1 nodes are available: 1 node(s) didn't match pod affinity/anti-affinity, "
    "1 node(s) didn't satisfy existing pods anti-affinity rules."
)


@pytest.fixture(scope="module")
def node_operator(kube_api: KubeApi, ferrymq_crds: list[str]) -> Iterator[KopfRunner]:
    """The operator with a resync far beyond any wait here: whatever happens within a test happens
    because of a watch event, not the periodic resync. --verbose: DEBUG records reach caplog."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KUBECONFIG", str(kube_api.kubeconfig_path))
        mp.setenv("FERRYMQ_OPERATOR_RESYNC_SECONDS", "600")
        mp.setenv("FERRYMQ_OPERATOR_RETRY_DELAY_SECONDS", "2")
        mp.setenv("FERRYMQ_OPERATOR_ADMIN_TIMEOUT_SECONDS", "1")
        args = [
            "run",
            "--standalone",
            "--all-namespaces",
            "--verbose",
            "-m",
            "ferrymq_operator.handlers",
        ]
        with KopfRunner(args, timeout=180) as runner:
            yield runner
    assert runner.exception is None, runner.output
    assert runner.exit_code == 0, runner.output


@pytest.fixture
def cluster(kube_api: KubeApi, k8s_namespace: str) -> Iterator[Cluster]:
    with kube_api.api_client() as api_client:
        yield Cluster(api_client, k8s_namespace)


def uid(cluster: Cluster, name: str) -> str | None:
    try:
        return str(cluster.core.read_namespaced_pod(name, cluster.ns).metadata.uid)
    except k8s.ApiException as exc:
        if exc.status == 404:
            return None
        raise


def replaced(cluster: Cluster, name: str, old_uid: str | None) -> str | None:
    now = uid(cluster, name)
    return now if now is not None and now != old_uid else None


def annotate(cluster: Cluster, plural: str, name: str, values: dict[str, str | None]) -> None:
    cluster.custom.patch_namespaced_custom_object(
        "ferrymq.io", "v1alpha1", cluster.ns, plural, name, {"metadata": {"annotations": values}}
    )


def annotations(cluster: Cluster, plural: str, name: str) -> dict[str, str]:
    found: dict[str, str] = (cluster.get(plural, name) or {})["metadata"].get("annotations") or {}
    return found


def start_cluster(cluster: Cluster, groups: int, **spec: Any) -> list[str]:
    cluster.create("nameservers", "routes", {"replicas": 1})
    cluster.create(
        "brokers",
        "orders",
        {"nameServerRef": {"name": "routes"}, "groups": groups, "replicasPerGroup": 1, **spec},
    )
    pods = [f"orders-broker-{g}-0" for g in range(groups)]
    # no kubelet: mark the pods Ready as a kubelet would once the brokers answer their probe
    cluster.wait_pods_and_mark_ready(pods)
    cluster.wait_condition("brokers", "orders", "Ready", "True")
    return pods


def broker_conf(cluster: Cluster, name: str, group: int, broker_id: int) -> dict[str, str]:
    cm = wait_for("ConfigMap", lambda: cluster.configmap(f"{name}-broker-{group}-config"))
    conf: dict[str, str] = javaproperties.loads(cm.data[f"broker-{broker_id}.conf"])
    return conf


# --- defect 1: the annotations are acted on at once, not at the next resync ---


def test_pause_and_manual_restart_take_effect_within_10_seconds(
    cluster: Cluster, node_operator: KopfRunner
) -> None:
    (pod,) = start_cluster(cluster, groups=1)
    before = uid(cluster, pod)

    annotate(cluster, "brokers", "orders", {PAUSE: "true"})
    wait_for(
        "ReconciliationPaused",
        lambda: cluster.condition("brokers", "orders", "ReconciliationPaused"),
        timeout=ANNOTATION_S,
    )
    # kopf handled the change as an update (its diff includes ferrymq.io/ annotations): the
    # configuration it records has the annotation, so no resync was needed. kopf writes that
    # record after the handler's status patch, so wait for it rather than read it at once.

    def recorded_pause() -> bool | None:
        handled = json.loads(annotations(cluster, "brokers", "orders").get(LAST_HANDLED, "{}"))
        return handled.get("metadata", {}).get("annotations", {}).get(PAUSE) == "true" or None

    wait_for("kopf's record of the paused configuration", recorded_pause, timeout=ANNOTATION_S)

    annotate(cluster, "brokers", "orders", {PAUSE: None})
    wait_for(
        "ReconciliationPaused removed",
        lambda: cluster.condition("brokers", "orders", "ReconciliationPaused") is None or None,
        timeout=ANNOTATION_S,
    )

    annotate(cluster, "brokers", "orders", {RESTART: "now"})
    wait_for("the pod restarted", lambda: replaced(cluster, pod, before), timeout=ANNOTATION_S)
    cluster.mark_ready(pod)  # kubelet: the restarted broker is up
    wait_for(
        "the one-shot annotation removed",
        lambda: RESTART not in annotations(cluster, "brokers", "orders") or None,
    )


# --- defect 10: waiting during a roll is not an error ---


def test_a_roll_logs_no_error(
    cluster: Cluster, node_operator: KopfRunner, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    pods = start_cluster(cluster, groups=2)
    uids = {p: uid(cluster, p) for p in pods}
    cluster.patch_spec("brokers", "orders", {"image": "ferrymq/broker:roll-2"})
    wait_for("group 0 rolled", lambda: replaced(cluster, pods[0], uids[pods[0]]))

    # the roll waits for the new pod (no kubelet yet): the operator checks again and again
    def follow_ups() -> int:
        return sum("pending work, again in" in r.getMessage() for r in caplog.records)

    wait_for("the roll to wait twice", lambda: follow_ups() >= 2 or None)
    cluster.mark_ready(pods[0])  # kubelet: the new broker is up
    wait_for("group 1 rolled", lambda: replaced(cluster, pods[1], uids[pods[1]]))
    cluster.mark_ready(pods[1])
    cluster.wait_condition("brokers", "orders", "Ready", "True", generation=2)

    # Records about this test's objects (kopf's object loggers carry the object's reference; other
    # tests' namespaces being deleted make kopf log event-posting errors that are not ours).
    errors = [
        f"{r.name}: {r.getMessage()}"
        for r in caplog.records
        if r.levelno >= logging.ERROR
        and (
            (getattr(r, "k8s_ref", None) or {}).get("namespace") == cluster.ns
            or cluster.ns in r.getMessage()
            or r.name.startswith("ferrymq")
        )
    ]
    assert not errors, errors
    assert any(r.name.startswith("kopf") for r in caplog.records)  # the capture did work


# --- defect 2: turning the audit off removes its Jobs and their pods too ---


def test_audit_off_deletes_the_cronjob_with_its_jobs(
    cluster: Cluster, node_operator: KopfRunner
) -> None:
    cluster.create("nameservers", "routes", {"replicas": 1})
    cluster.create(
        "brokers",
        "orders",
        {
            "nameServerRef": {"name": "routes"},
            "replicasPerGroup": 1,
            "audit": {"schedule": "@daily"},
        },
    )
    cronjobs = cluster.dynamic.resources.get(api_version="batch/v1beta1", kind="CronJob")
    cron = wait_for(
        "the audit CronJob",
        lambda: next(iter(cronjobs.get(namespace=cluster.ns).items), None),
    )
    # A Job as the CronJob controller creates one at a scheduled time (owned by the CronJob);
    # the Job controller then creates its pod.
    batch = k8s.BatchV1Api(cluster.api_client)
    job = batch.create_namespaced_job(
        cluster.ns,
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": "orders-audit-1",
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1beta1",
                        "kind": "CronJob",
                        "name": cron.metadata.name,
                        "uid": cron.metadata.uid,
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": {
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "audit", "image": "ferrymq/ferrymq-spark:0.1.0"}],
                    }
                }
            },
        },
    )
    selector = f"controller-uid={job.metadata.uid}"
    wait_for("the Job's pod", lambda: cluster.pods(selector))

    cluster.custom.patch_namespaced_custom_object(
        "ferrymq.io", "v1alpha1", cluster.ns, "brokers", "orders", {"spec": {"audit": None}}
    )
    wait_for("the CronJob deleted", lambda: not cronjobs.get(namespace=cluster.ns).items or None)
    wait_for(
        "the Job deleted with it",
        lambda: not batch.list_namespaced_job(cluster.ns).items or None,
        timeout=GC_WAIT_S,
    )
    wait_for("the Job's pod deleted", lambda: not cluster.pods(selector) or None, timeout=GC_WAIT_S)


# --- hostNetwork, per-pod ports, external access, port clashes ---


def test_host_network_ports_per_pod_in_each_conf(
    cluster: Cluster, node_operator: KopfRunner
) -> None:
    cluster.create("nameservers", "routes", {"replicas": 2, "hostNetwork": True, "port": 19876})
    cluster.create(
        "brokers",
        "orders",
        {
            "nameServerRef": {"name": "routes"},
            "groups": 2,
            "replicasPerGroup": 2,
            "hostNetwork": True,
            "listenPort": 21911,
            "externalAccess": {"type": "HostNetwork"},
        },
    )
    for group in range(2):
        for broker_id in range(2):
            conf = broker_conf(cluster, "orders", group, broker_id)
            index = group * 2 + broker_id
            assert conf["listenPort"] == str(21911 + 10 * index)
            assert conf["haListenPort"] == str(21912 + 10 * index)
            ports = [a.rsplit(":", 1)[1] for a in conf["namesrvAddr"].split(";")]
            assert ports == ["19876", "19877"]
    sts = wait_for("StatefulSet", lambda: cluster.statefulset("orders-broker-1"))
    assert sts.spec.template.spec.host_network is True
    assert sts.spec.template.spec.dns_policy == "ClusterFirstWithHostNet"
    env = {e.name: e for e in sts.spec.template.spec.containers[0].env}
    assert env["FERRYMQ_brokerIP1"].value_from.field_ref.field_path == "status.hostIP"
    ns_status = wait_for(
        "NameServer addresses",
        lambda: ((cluster.get("nameservers", "routes") or {}).get("status") or {}).get("addresses"),
    )
    assert [a.rsplit(":", 1)[1] for a in ns_status.split(";")] == ["19876", "19877"]


def test_node_port_external_access(cluster: Cluster, node_operator: KopfRunner) -> None:
    cluster.create("nameservers", "routes", {"replicas": 1})
    cluster.create(
        "brokers",
        "orders",
        {
            "nameServerRef": {"name": "routes"},
            "replicasPerGroup": 2,
            "externalAccess": {"type": "NodePort", "nodePortBase": 31511},
        },
    )
    for broker_id in range(2):
        name = f"orders-broker-0-{broker_id}-external"
        svc = wait_for(name, functools.partial(cluster.service, name))
        assert svc.spec.type == "NodePort"
        (port,) = svc.spec.ports
        listen = int(broker_conf(cluster, "orders", 0, broker_id)["listenPort"])
        assert port.node_port == listen == 31511 + 10 * broker_id

    # external access turned off: the NodePort Services go, the pods listen on listenPort again
    cluster.custom.patch_namespaced_custom_object(
        "ferrymq.io",
        "v1alpha1",
        cluster.ns,
        "brokers",
        "orders",
        {"spec": {"externalAccess": None}},
    )
    for broker_id in range(2):
        name = f"orders-broker-0-{broker_id}-external"
        wait_for(f"{name} deleted", lambda name=name: cluster.service(name) is None or None)
        wait_for(
            "the default port back in the conf",
            lambda i=broker_id: (
                broker_conf(cluster, "orders", 0, i)["listenPort"] == "10911" or None
            ),
        )


def test_port_clash_between_resources_is_a_condition(
    cluster: Cluster, node_operator: KopfRunner
) -> None:
    cluster.create("nameservers", "first", {"replicas": 2, "hostNetwork": True, "port": 22000})
    wait_for("the first StatefulSet", lambda: cluster.statefulset("first-namesrv"))
    time.sleep(1.1)  # creationTimestamp has a resolution of one second: "later" must be later
    cluster.create("nameservers", "second", {"replicas": 2, "hostNetwork": True, "port": 22001})
    cond = cluster.wait_condition(
        "nameservers", "second", "ReconcileFailed", "True", "PortConflict"
    )
    assert f"NameServer {cluster.ns}/first" in cond["message"] and "spec.port" in cond["message"]
    assert cluster.statefulset("second-namesrv") is None  # nothing to crash-loop
    # the earlier one is not blamed
    assert (cluster.condition("nameservers", "first", "ReconcileFailed") or {}).get(
        "status"
    ) != "True"

    cluster.patch_spec("nameservers", "second", {"port": 22100})
    cluster.wait_condition("nameservers", "second", "ReconcileFailed", "False")
    wait_for("the second StatefulSet", lambda: cluster.statefulset("second-namesrv"))

    # a Broker whose fast-channel port (listenPort - 2) lands on the second NameServer's ports
    time.sleep(1.1)
    cluster.create(
        "brokers",
        "orders",
        {"nameServerRef": {"name": "second"}, "hostNetwork": True, "listenPort": 22103},
    )
    cond = cluster.wait_condition("brokers", "orders", "ReconcileFailed", "True", "PortConflict")
    assert f"NameServer {cluster.ns}/second" in cond["message"]
    assert "spec.listenPort" in cond["message"]
    assert cluster.statefulset("orders-broker-0") is None


# --- defect 7: Required -> Preferred anti-affinity does not stall the roll ---


def test_anti_affinity_change_does_not_deadlock_the_roll(
    cluster: Cluster, node_operator: KopfRunner
) -> None:
    cluster.create("nameservers", "routes", {"replicas": 1})
    cluster.create(
        "brokers",
        "orders",
        {"nameServerRef": {"name": "routes"}, "replicasPerGroup": 2, "podAntiAffinity": "Required"},
    )
    master, slave = "orders-broker-0-0", "orders-broker-0-1"
    cluster.wait_pods_and_mark_ready([master])  # kubelet: the master runs
    wait_for(f"pod {slave}", lambda: uid(cluster, slave))
    old_master, old_slave = uid(cluster, master), uid(cluster, slave)

    cluster.patch_spec("brokers", "orders", {"podAntiAffinity": "Preferred"})
    # the slave (not Ready, old revision) is rolled first; the scheduler then cannot place the
    # new slave: the old master's Required rule keeps it off the one node
    wait_for("the slave rolled", lambda: replaced(cluster, slave, old_slave))
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    cluster.core.patch_namespaced_pod_status(
        slave,
        cluster.ns,
        {
            "status": {
                "phase": "Pending",
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": ANTI_AFFINITY,
                        "lastTransitionTime": now,
                    }
                ],
            }
        },
    )
    wait_for("the old master rolled to unblock it", lambda: replaced(cluster, master, old_master))
    cluster.wait_event("orders", "RollingPod")
