"""Node loss and `kubectl drain` on the 3-node kind cluster of scripts/kind-cluster.sh (issue 32).

A NameServer of 2, a master/slave Broker (1 group, SYNC_MASTER) and a controller-mode Broker
(1 group x 2 replicas, ``spec.failover: controller``), every pair on both workers
(``podAntiAffinity: Required``); topics declared with Topic resources, so each topic lives on one
Broker only.

- Node loss: ``docker stop`` of the kind node that holds the controller-mode master: a new master
  within 30 s, every acknowledged message readable from it, writes accepted again; the node
  returns and the group heals (both replicas in sync). Then the node that holds the master/slave
  Broker's master: a new consumer group reads every acknowledged message from the slave; the node
  returns, the master serves again with its store.
- ``kubectl drain`` of the worker holding the master/slave master: evictions through the PDBs, the
  drain completes, no acknowledged message is lost; after ``uncordon`` every pod returns.

Only on that cluster (``scripts/kind-cluster.sh exec .venv/bin/pytest e2e/test_kind_nodes.py``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from e2e.kind_env import KIND_NETNS, Kube, run, wait_for
from e2e.test_real_node import (
    DEFAULT_NS_PORT,
    DOCKER,
    broker_pods,
    consume_all,
    pod_ip,
    pod_ready,
    produce,
    ready,
)

pytestmark = pytest.mark.skipif(
    not KIND_NETNS, reason="only on scripts/kind-cluster.sh's cluster (kind-cluster.sh exec)"
)

NS_NAME, MS, HA = "nodes-routes", "nodes-ms", "nodes-ha"
MS_TOPIC, HA_TOPIC = "Nodes_MS", "Nodes_HA"
REQUESTS = {"cpu": "100m", "memory": "128Mi"}


def crs(image: str) -> list[dict[str, Any]]:
    common = {
        "image": image,
        "imagePullPolicy": "Never",
        "podAntiAffinity": "Required",
        "resources": {"requests": REQUESTS},
    }
    broker = {
        "nameServerRef": {"name": NS_NAME},
        "groups": 1,
        "replicasPerGroup": 2,
        "brokerRole": "SYNC_MASTER",
        "storage": {"size": "1Gi"},
        "config": {"slaveReadEnable": "true"},
        **common,
    }

    def res(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        return {
            "apiVersion": "ferrymq.io/v1alpha1",
            "kind": kind,
            "metadata": {"name": name},
            "spec": spec,
        }

    return [
        res("NameServer", NS_NAME, {"replicas": 2, **common}),
        res("Broker", MS, broker),
        res("Broker", HA, {**broker, "failover": "controller"}),
        res("Topic", "nodes-ms-topic", {"brokerRef": {"name": MS}, "name": MS_TOPIC, "queues": 4}),
        res("Topic", "nodes-ha-topic", {"brokerRef": {"name": HA}, "name": HA_TOPIC, "queues": 4}),
    ]


def group_master(kube: Kube) -> dict[str, Any] | None:
    masters = (kube.get_json("brokers", HA).get("status") or {}).get("groupMasters") or []
    return dict(masters[0]) if masters else None


def node_of(kube: Kube, pod: str) -> str:
    return str(kube.get_json("pod", pod)["spec"]["nodeName"])


def nodes_ready(kube: Kube) -> bool:
    nodes = json.loads(kube.kubectl("get", "nodes", "-o", "json"))["items"]
    return all(
        any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"]["conditions"])
        for n in nodes
    )


def topic_ready(kube: Kube, name: str) -> bool:
    return ready(kube, "topics", name)


@pytest.fixture(scope="module")
def nodes(kube: Kube, broker_image: str) -> Iterator[str]:
    """The NameServer addresses (pod IPs)."""
    for cr in crs(broker_image):
        kube.apply(cr)
    try:
        wait_for("the NameServer Ready", lambda: ready(kube, "nameservers", NS_NAME), 600)
        wait_for(
            "both Brokers Ready", lambda: all(ready(kube, "brokers", n) for n in (MS, HA)), 900
        )
        wait_for(
            "both Topics Ready",
            lambda: all(topic_ready(kube, n) for n in ("nodes-ms-topic", "nodes-ha-topic")),
            timeout=300,
        )
        wait_for(
            "the controller-mode master with both replicas in sync",
            lambda: (m := group_master(kube)) and len(m.get("syncStateSet") or []) == 2,
            timeout=300,
        )
        pods = [kube.get_json("pod", f"{NS_NAME}-namesrv-{k}") for k in range(2)]
        yield ";".join(f"{pod_ip(p)}:{DEFAULT_NS_PORT}" for p in pods)
    finally:
        kube.kubectl("uncordon", *workers(kube), check=False)
        kube.ns("delete", "topics", "--all", "--wait=true", timeout=300, check=False)
        kube.ns("delete", "brokers", MS, HA, "--wait=true", timeout=600, check=False)
        kube.ns("delete", "nameservers", NS_NAME, "--wait=true", timeout=600, check=False)


def workers(kube: Kube) -> list[str]:
    names = kube.kubectl("get", "nodes", "-o", "name").split()
    return [n.removeprefix("node/") for n in names if "control-plane" not in n]


def restart_node(kube: Kube, node: str) -> None:
    run([DOCKER, "start", node])
    wait_for(f"{node} Ready again", lambda: nodes_ready(kube), timeout=300)


def test_losing_the_node_of_a_controller_mode_master_elects_another_within_30_s(
    kube: Kube, nodes: str
) -> None:
    before = group_master(kube)
    assert before is not None
    host = str(before["masterAddress"]).rsplit(":", 1)[0]
    master_pod = next(name for name, p in broker_pods(kube, HA).items() if pod_ip(p) == host)
    node = node_of(kube, master_pod)
    acked = produce(HA_TOPIC, "before-loss", 100, ns=nodes)
    run([DOCKER, "stop", "--time", "0", node])
    try:
        after = wait_for(
            "a new master elected",
            lambda: (
                (m := group_master(kube))
                and m["masterEpoch"] > before["masterEpoch"]
                and m.get("masterAddress") not in ("", before["masterAddress"])
                and m
            ),
            timeout=30,
        )
        assert after
        # every acknowledged message is on the new master, and it takes writes
        more = produce(HA_TOPIC, "after-loss", 50, ns=nodes)
        consume_all(HA_TOPIC, "g-nodes-ha", acked + more, ns=nodes, timeout=300)
    finally:
        restart_node(kube, node)
    wait_for(
        "the group healed: both replicas in sync",
        lambda: (
            ready(kube, "brokers", HA)
            and (m := group_master(kube))
            and len(m.get("syncStateSet") or []) == 2
        ),
        timeout=600,
    )
    consume_all(HA_TOPIC, "g-nodes-ha-healed", acked + more, ns=nodes, timeout=300)


def test_losing_the_node_of_a_master_slave_master_keeps_reads_on_the_slave(
    kube: Kube, nodes: str
) -> None:
    acked = produce(MS_TOPIC, "ms-before-loss", 100, ns=nodes)
    master = f"{MS}-broker-0-0"
    node = node_of(kube, master)
    run([DOCKER, "stop", "--time", "0", node])
    try:
        consume_all(MS_TOPIC, "g-nodes-ms-slave", acked, ns=nodes, timeout=300)
    finally:
        restart_node(kube, node)
    wait_for(
        "the master back and Ready",
        lambda: (p := broker_pods(kube, MS).get(master)) and pod_ready(p),
        timeout=600,
    )
    wait_for("the Broker Ready", lambda: ready(kube, "brokers", MS), timeout=600)
    more = produce(MS_TOPIC, "ms-after-loss", 50, ns=nodes)
    consume_all(MS_TOPIC, "g-nodes-ms-healed", acked + more, ns=nodes, timeout=300)


def test_drain_of_a_worker_goes_through_the_pdbs_and_loses_no_ack(kube: Kube, nodes: str) -> None:
    pdbs = kube.get_json("pdb").get("items", [])
    assert {p["spec"].get("maxUnavailable") for p in pdbs} == {1}, pdbs
    acked = produce(MS_TOPIC, "drain-before", 100, ns=nodes)
    node = node_of(kube, f"{MS}-broker-0-0")
    try:
        # evictions (not deletions): each one is checked against the pods' PDB
        kube.kubectl(
            "drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=600s",
            timeout=700,
        )  # fmt: skip
        on_node = [
            p["metadata"]["name"]
            for p in kube.get_json("pods").get("items", [])
            if p["spec"].get("nodeName") == node
        ]
        assert not on_node, f"pods left on the drained {node}: {on_node}"
        # the slave still serves every acknowledged message
        consume_all(MS_TOPIC, "g-nodes-drain", acked, ns=nodes, timeout=300)
    finally:
        kube.kubectl("uncordon", node)
    wait_for(
        "both Brokers Ready after uncordon",
        lambda: all(ready(kube, "brokers", n) for n in (MS, HA)),
        timeout=900,
    )
    wait_for("the NameServer Ready", lambda: ready(kube, "nameservers", NS_NAME), 600)
    more = produce(MS_TOPIC, "drain-after", 50, ns=nodes)
    consume_all(MS_TOPIC, "g-nodes-drain-after", acked + more, ns=nodes, timeout=300)
