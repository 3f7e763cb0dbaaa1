"""Broker reconcile against a real kube-apiserver 1.20: one StatefulSet per group with broker.conf
per pod, scaling out and up, config updates, scale-in kept while its drain cannot run, missing NameServer, several clusters.

No kubelet runs here: the tests mark pods Ready through the Pod status subresource, as a kubelet would.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import javaproperties
import pytest
from kopf.testing import KopfRunner
from kubernetes import client as k8s
from kubernetes.dynamic.exceptions import NotFoundError

from k8s.control_plane import KubeApi
from k8s.operator_env import Cluster, ferrymq_crds, operator, wait_for

__all__ = ["ferrymq_crds", "operator"]

# The controller-manager's garbage collector is shared with every namespace being torn down.
GC_WAIT_S = 120.0


@pytest.fixture
def cluster(kube_api: KubeApi, k8s_namespace: str) -> Iterator[Cluster]:
    with kube_api.api_client() as api_client:
        yield Cluster(api_client, k8s_namespace)


def broker_conf(
    cluster: Cluster, group: int, broker_id: int, name: str = "orders"
) -> dict[str, str]:
    cm = wait_for(
        f"ConfigMap of group {group}", lambda: cluster.configmap(f"{name}-broker-{group}-config")
    )
    conf: dict[str, str] = javaproperties.loads(cm.data[f"broker-{broker_id}.conf"])
    return conf


def gone(cluster: Cluster, sts: str) -> bool:
    return cluster.statefulset(sts) is None


def wait_for_deletion(cluster: Cluster, plural: str, name: str) -> None:
    """The custom resource accepted its deletion, then is gone.

    Gone means kopf removed its finalizer, which it does once it has stopped the resource's resync
    timer; a timer in the middle of a slow pass (admin calls to brokers that do not answer, on a
    loaded machine) delays that, so the deadline is the garbage collector's, and a timeout names
    what still holds the resource.
    """
    wait_for(
        f"{plural}/{name} to be marked for deletion",
        lambda: (cluster.get(plural, name) or {"metadata": {"deletionTimestamp": "gone"}})[
            "metadata"
        ].get("deletionTimestamp"),
    )

    def gone_or_holders() -> bool:
        body = cluster.get(plural, name)
        if body is None:
            return True
        holders.append(str(body["metadata"].get("finalizers")))
        return False

    holders: list[str] = []
    deadline = GC_WAIT_S
    try:
        wait_for(f"{plural}/{name} to be deleted", gone_or_holders, timeout=deadline)
    except BaseException:
        pytest.fail(f"{plural}/{name} still there after {deadline:.0f}s; finalizers {holders[-1:]}")


def group_pods(name: str, group: int, replicas: int) -> list[str]:
    return [f"{name}-broker-{group}-{i}" for i in range(replicas)]


def test_broker_lifecycle(cluster: Cluster, operator: KopfRunner) -> None:
    cluster.create("nameservers", "routes", {"replicas": 2})
    cluster.create(
        "brokers",
        "orders",
        {
            "nameServerRef": {"name": "routes"},
            "groups": 2,
            "replicasPerGroup": 2,
            "brokerRole": "SYNC_MASTER",
            "flushDiskType": "SYNC_FLUSH",
            "storage": {"size": "1Gi"},
        },
    )
    for group in range(2):
        sts = wait_for(
            f"StatefulSet of group {group}",
            functools.partial(cluster.statefulset, f"orders-broker-{group}"),
        )
        assert sts.spec.replicas == 2
        assert sts.spec.service_name == "orders-broker-hs"
        assert sts.spec.volume_claim_templates[0].spec.resources.requests["storage"] == "1Gi"
        assert (
            wait_for("PDB", functools.partial(cluster.pdb, f"orders-broker-{group}"))["spec"][
                "maxUnavailable"
            ]
            == 1
        )
    assert cluster.service("orders-broker-hs") is not None
    master, slave = broker_conf(cluster, 1, 0), broker_conf(cluster, 1, 1)
    assert (master["brokerName"], master["brokerId"], master["brokerRole"]) == (
        "orders-broker-1",
        "0",
        "SYNC_MASTER",
    )
    assert (slave["brokerId"], slave["brokerRole"]) == ("1", "SLAVE")
    assert master["namesrvAddr"] == ";".join(
        f"routes-namesrv-{i}.routes-namesrv-hs.{cluster.ns}.svc.cluster.local:9876"
        for i in range(2)
    )

    # Pods from the StatefulSet controller; ready after we mark them (no kubelet).
    pods = group_pods("orders", 0, 2) + group_pods("orders", 1, 2)
    cluster.wait_condition("brokers", "orders", "Progressing", "True", "Creating")
    cluster.wait_pods_and_mark_ready(pods)
    cluster.wait_condition("brokers", "orders", "Ready", "True")
    body = cluster.get("brokers", "orders") or {}
    assert body["status"]["ready"] == "4/4"
    assert body["status"]["topicSyncedGroups"] == [0, 1]

    # A master going unready is named in Degraded.
    cluster.mark_ready("orders-broker-1-0", ready=False)
    degraded = cluster.wait_condition("brokers", "orders", "Degraded", "True", "MasterUnavailable")
    assert "orders-broker-1" in degraded["message"]
    cluster.mark_ready("orders-broker-1-0")
    cluster.wait_condition("brokers", "orders", "Ready", "True")

    # Scale out: a third group; its topics must be copied before the cluster is Ready again.
    cluster.patch_spec("brokers", "orders", {"groups": 3})
    wait_for("the new group's StatefulSet", lambda: cluster.statefulset("orders-broker-2"))
    cluster.wait_pods_and_mark_ready(group_pods("orders", 2, 2))
    pending = cluster.wait_condition(
        "brokers", "orders", "Progressing", "True", "Updating", generation=2
    )
    assert pending["observedGeneration"] == 2
    # Without a reachable broker admin API the copy stays pending and says why.
    wait_for(
        "the topic copy to be reported pending",
        lambda: (
            "orders-broker-2"
            in (cluster.condition("brokers", "orders", "Progressing") or {}).get("message", "")
        ),
    )
    assert (cluster.get("brokers", "orders") or {})["status"]["topicSyncedGroups"] == [0, 1]

    # Scale up: a third pod per group gets its own broker-2.conf (a SLAVE).
    cluster.patch_spec("brokers", "orders", {"replicasPerGroup": 3})
    wait_for(
        "3 replicas in group 0", lambda: cluster.statefulset("orders-broker-0").spec.replicas == 3
    )
    assert broker_conf(cluster, 0, 2)["brokerRole"] == "SLAVE"
    cluster.wait_event("orders", "Updated")

    # A config change updates the ConfigMap and the pod template (so the pods roll).
    before = cluster.statefulset("orders-broker-0").spec.template.metadata.annotations[
        "ferrymq.io/config-hash"
    ]
    cluster.patch_spec("brokers", "orders", {"config": {"fileReservedTime": "24"}})
    wait_for("the new setting", lambda: broker_conf(cluster, 0, 0).get("fileReservedTime") == "24")
    wait_for(
        "a new config hash on the pod template",
        lambda: (
            cluster.statefulset("orders-broker-0").spec.template.metadata.annotations[
                "ferrymq.io/config-hash"
            ]
            != before
        ),
    )

    # Scale in drains the group first. Its master cannot be reached here (no pod runs), so the
    # drain says so and the group is kept: nothing is removed before its messages are checked.
    cluster.patch_spec("brokers", "orders", {"groups": 2})
    drain = wait_for(
        "the drain of group 2 to be reported",
        lambda: next(
            (
                d
                for d in ((cluster.get("brokers", "orders") or {}).get("status") or {}).get(
                    "drains", []
                )
                if d["group"] == 2 and d["reason"] == "DrainUnavailable"
            ),
            None,
        ),
    )
    assert "orders-broker-2" in drain["message"] and "kept" in drain["message"]
    assert cluster.statefulset("orders-broker-2") is not None

    # Deleting the Broker garbage-collects every group.
    cluster.delete("brokers", "orders")
    wait_for_deletion(cluster, "brokers", "orders")
    for group in range(3):
        wait_for(
            f"group {group} collected",
            functools.partial(gone, cluster, f"orders-broker-{group}"),
            timeout=GC_WAIT_S,
        )
    assert cluster.statefulset("routes-namesrv") is not None


def test_missing_nameserver_then_created(cluster: Cluster, operator: KopfRunner) -> None:
    cluster.create("brokers", "early", {"nameServerRef": {"name": "later"}, "groups": 1})
    failed = cluster.wait_condition(
        "brokers", "early", "ReconcileFailed", "True", "NameServerNotFound"
    )
    assert "later" in failed["message"]
    assert cluster.statefulset("early-broker-0") is None
    cluster.create("nameservers", "later", {"replicas": 1})
    wait_for(
        "the broker StatefulSet once the NameServer exists",
        lambda: cluster.statefulset("early-broker-0"),
    )
    cluster.wait_condition("brokers", "early", "ReconcileFailed", "False")
    assert broker_conf(cluster, 0, 0, name="early")["namesrvAddr"].startswith("later-namesrv-0.")


def test_invalid_broker_spec_the_schema_cannot_catch(
    cluster: Cluster, operator: KopfRunner
) -> None:
    cluster.create("nameservers", "routes", {"replicas": 1})
    cluster.create(
        "brokers",
        "single",
        {"nameServerRef": {"name": "routes"}, "brokerRole": "SYNC_MASTER", "replicasPerGroup": 1},
    )
    failed = cluster.wait_condition("brokers", "single", "ReconcileFailed", "True", "InvalidSpec")
    assert "replicasPerGroup" in failed["message"] and "ASYNC_MASTER" in failed["message"]
    assert cluster.statefulset("single-broker-0") is None
    cluster.patch_spec("brokers", "single", {"replicasPerGroup": 2})
    wait_for("the StatefulSet after the fix", lambda: cluster.statefulset("single-broker-0"))
    cluster.wait_condition("brokers", "single", "ReconcileFailed", "False")


def test_several_clusters_side_by_side(cluster: Cluster, operator: KopfRunner) -> None:
    cluster.create("nameservers", "ns-a", {"replicas": 1})
    cluster.create("nameservers", "ns-b", {"replicas": 1})
    cluster.create(
        "brokers", "alpha", {"nameServerRef": {"name": "ns-a"}, "groups": 1, "replicasPerGroup": 1}
    )
    cluster.create(
        "brokers", "beta", {"nameServerRef": {"name": "ns-b"}, "groups": 2, "replicasPerGroup": 1}
    )
    for sts in ("alpha-broker-0", "beta-broker-0", "beta-broker-1", "ns-a-namesrv", "ns-b-namesrv"):
        wait_for(sts, functools.partial(cluster.statefulset, sts))
    assert broker_conf(cluster, 0, 0, name="alpha")["namesrvAddr"].startswith("ns-a-namesrv-0.")
    assert broker_conf(cluster, 1, 0, name="beta")["namesrvAddr"].startswith("ns-b-namesrv-0.")
    assert broker_conf(cluster, 0, 0, name="alpha")["brokerClusterName"] == "alpha"
    # Only alpha's pod becomes ready: alpha is Ready, beta is still creating.
    cluster.wait_pods_and_mark_ready(["alpha-broker-0-0", "ns-a-namesrv-0"])
    cluster.wait_condition("brokers", "alpha", "Ready", "True")
    cluster.wait_condition("nameservers", "ns-a", "Ready", "True")
    assert (cluster.condition("brokers", "beta", "Ready") or {}).get("status") == "False"
    assert (cluster.condition("nameservers", "ns-b", "Ready") or {}).get("status") == "False"


def test_slave_claims_deleted_on_scale_down_only_when_opted_in(
    cluster: Cluster, operator: KopfRunner
) -> None:
    cluster.create("nameservers", "routes", {"replicas": 1})
    for name, opt_in in (("keep", False), ("drop", True)):
        cluster.create(
            "brokers",
            name,
            {
                "nameServerRef": {"name": "routes"},
                "replicasPerGroup": 3,
                "storage": {"size": "1Gi", "deleteClaimOnScaleDown": opt_in},
            },
        )
    claims = {name: [f"store-{name}-broker-0-{i}" for i in range(3)] for name in ("keep", "drop")}
    for name in ("keep", "drop"):
        # The StatefulSet controller creates one claim per pod from the volumeClaimTemplate.
        wait_for(f"{name}'s 3 claims", functools.partial(claims_present, cluster, claims[name]))
        cluster.patch_spec("brokers", name, {"replicasPerGroup": 1})
    wait_for(
        "the removed slaves' claims of 'drop' to be deleted",
        functools.partial(claims_gone, cluster, claims["drop"][1:]),
    )
    assert claims_present(cluster, claims["drop"][:1])  # the master's claim stays
    assert claims_present(cluster, claims["keep"])  # no opt-in: every claim stays
    cluster.wait_event("drop", "ClaimDeleted")


def claim_state(cluster: Cluster, name: str) -> str:
    try:
        pvc = cluster.core.read_namespaced_persistent_volume_claim(name, cluster.ns)
    except k8s.ApiException as exc:
        if exc.status == 404:
            return "gone"
        raise
    return "deleting" if pvc.metadata and pvc.metadata.deletion_timestamp else "present"


def claims_present(cluster: Cluster, names: list[str]) -> bool:
    return all(claim_state(cluster, n) == "present" for n in names)


def claims_gone(cluster: Cluster, names: list[str]) -> bool:
    return all(claim_state(cluster, n) != "present" for n in names)


def test_bad_config_value_refused_by_the_broker_model(
    cluster: Cluster, operator: KopfRunner
) -> None:
    """The CRD only knows 'a map of strings'; ferrymq's own BrokerConfig decides the values."""
    cluster.create("nameservers", "routes", {"replicas": 1})
    cluster.create(
        "brokers",
        "typo",
        {"nameServerRef": {"name": "routes"}, "config": {"fileReservedTime": "two days"}},
    )
    failed = cluster.wait_condition("brokers", "typo", "ReconcileFailed", "True", "InvalidSpec")
    assert "spec.config" in failed["message"] and "fileReservedTime" in failed["message"]
    assert cluster.statefulset("typo-broker-0") is None
    cluster.patch_spec(
        "brokers", "typo", {"config": {"fileReservedTime": "48", "fileReserveTime": "1"}}
    )
    wait_for(
        "the StatefulSet after the fix", functools.partial(cluster.statefulset, "typo-broker-0")
    )
    wait_for(
        "a warning about the unknown key",
        lambda: any(e.reason == "UnknownConfigKey" for e in cluster.events_for("typo")),
    )


def test_audit_cronjob_follows_spec(cluster: Cluster, operator: KopfRunner) -> None:
    """Kubernetes 1.20 serves CronJob only in batch/v1beta1: discovery picks it."""
    cronjobs = cluster.dynamic.resources.get(api_version="batch/v1beta1", kind="CronJob")

    def cronjob() -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = cronjobs.get(
                name="audited-audit", namespace=cluster.ns
            ).to_dict()
        except NotFoundError:
            return None
        return found

    cluster.create("nameservers", "routes", {"replicas": 1})
    cluster.create(
        "brokers",
        "audited",
        {"nameServerRef": {"name": "routes"}, "audit": {"schedule": "*/10 * * * *"}},
    )
    cron = wait_for("the audit CronJob", cronjob)
    assert cron["spec"]["schedule"] == "*/10 * * * *"
    assert (
        "ferrymq admin snapshot"
        in cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["command"][2]
    )
    claim = cluster.core.read_namespaced_persistent_volume_claim("audited-audit", cluster.ns)
    assert claim.spec is not None and claim.spec.resources is not None

    cluster.patch_spec("brokers", "audited", {"audit": {"schedule": "0 * * * *"}})
    wait_for(
        "the new schedule", lambda: (cronjob() or {}).get("spec", {}).get("schedule") == "0 * * * *"
    )
    cluster.patch_spec("brokers", "audited", {"audit": None})
    wait_for("the CronJob to be removed", lambda: cronjob() is None)
    cluster.wait_event("audited", "AuditDisabled")


def test_nameserver_resize_updates_brokers(cluster: Cluster, operator: KopfRunner) -> None:
    """Brokers list every NameServer pod; resizing the NameServer rewrites their broker.conf."""
    cluster.create("nameservers", "grow", {"replicas": 1})
    cluster.create("brokers", "follow", {"nameServerRef": {"name": "grow"}, "replicasPerGroup": 1})
    wait_for("the broker ConfigMap", functools.partial(cluster.configmap, "follow-broker-0-config"))
    assert len(broker_conf(cluster, 0, 0, name="follow")["namesrvAddr"].split(";")) == 1
    cluster.patch_spec("nameservers", "grow", {"replicas": 3})
    wait_for(
        "three NameServer addresses in broker.conf",
        lambda: len(broker_conf(cluster, 0, 0, name="follow")["namesrvAddr"].split(";")) == 3,
    )
