"""The kind smoke test of the default run (scripts/test.sh; issue 32): on the 3-node kind cluster of
scripts/kind-cluster.sh, the chart's operator (``helm install``, the ``kube`` fixture) runs a
NameServer and a Broker of one group (master + slave on different workers, pod network); a client
in the cluster's netns produces and consumes; the master's process is killed with SIGKILL, a new
consumer group reads every acknowledged message from the slave meanwhile, and the master comes
back with its store.

Only on that cluster (``scripts/kind-cluster.sh exec .venv/bin/pytest e2e/test_kind_smoke.py``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from e2e.kind_env import KIND_NETNS, Kube, wait_for
from e2e.test_real_node import (
    DEFAULT_NS_PORT,
    broker_pods,
    consume_all,
    kill_9,
    pod_ip,
    pod_ready,
    produce,
    ready,
)

pytestmark = pytest.mark.skipif(
    not KIND_NETNS, reason="only on scripts/kind-cluster.sh's cluster (kind-cluster.sh exec)"
)

NS_NAME, BROKER = "smoke-routes", "smoke"
REQUESTS = {"cpu": "100m", "memory": "128Mi"}


def smoke_crs(image: str) -> list[dict[str, Any]]:
    common = {"image": image, "imagePullPolicy": "Never", "resources": {"requests": REQUESTS}}
    return [
        {
            "apiVersion": "ferrymq.io/v1alpha1",
            "kind": "NameServer",
            "metadata": {"name": NS_NAME},
            "spec": {"replicas": 1, **common},
        },
        {
            "apiVersion": "ferrymq.io/v1alpha1",
            "kind": "Broker",
            "metadata": {"name": BROKER},
            "spec": {
                "nameServerRef": {"name": NS_NAME},
                "groups": 1,
                "replicasPerGroup": 2,
                "brokerRole": "SYNC_MASTER",
                "podAntiAffinity": "Required",
                "storage": {"size": "1Gi"},
                "config": {"autoCreateTopicEnable": "true", "slaveReadEnable": "true"},
                **common,
            },
        },
    ]


@pytest.fixture(scope="module")
def smoke(kube: Kube, broker_image: str) -> Iterator[str]:
    """The NameServer address (its pod IP: the netns routes every podCIDR)."""
    for cr in smoke_crs(broker_image):
        kube.apply(cr)
    try:
        wait_for("the NameServer Ready", lambda: ready(kube, "nameservers", NS_NAME), timeout=600)
        wait_for("the Broker Ready", lambda: ready(kube, "brokers", BROKER), timeout=900)
        pod = kube.get_json("pod", f"{NS_NAME}-namesrv-0")
        yield f"{pod_ip(pod)}:{DEFAULT_NS_PORT}"
    finally:
        kube.ns("delete", "brokers", BROKER, "--wait=true", timeout=600, check=False)
        kube.ns("delete", "nameservers", NS_NAME, "--wait=true", timeout=600, check=False)


def test_master_and_slave_run_on_different_workers(kube: Kube, smoke: str) -> None:
    pods = broker_pods(kube, BROKER)
    assert sorted(pods) == [f"{BROKER}-broker-0-0", f"{BROKER}-broker-0-1"]
    nodes = {p["spec"]["nodeName"] for p in pods.values()}
    assert len(nodes) == 2 and not any("control-plane" in n for n in nodes), nodes
    assert all(pod_ready(p) and not p["spec"].get("hostNetwork") for p in pods.values())


def test_produce_consume_and_a_killed_master(kube: Kube, smoke: str) -> None:
    topic = "kind-smoke"
    bodies = produce(topic, "smoke", 100, ns=smoke)
    consume_all(topic, "g-smoke", bodies, ns=smoke)
    master = f"{BROKER}-broker-0-0"
    restarts = kill_9(kube, master)
    # While the master restarts, a new consumer group reads the group's queues from the slave.
    consume_all(topic, "g-smoke-during", bodies, ns=smoke)
    wait_for(
        "the killed master restarted and Ready",
        lambda: (
            (p := broker_pods(kube, BROKER).get(master))
            and pod_ready(p)
            and p["status"]["containerStatuses"][0]["restartCount"] > restarts
        ),
        timeout=300,
    )
    wait_for("the Broker Ready again", lambda: ready(kube, "brokers", BROKER), timeout=300)
    # Back: the master takes writes again and its store kept every acknowledged message.
    more = produce(topic, "after", 50, ns=smoke)
    consume_all(topic, "g-smoke-after", bodies + more, ns=smoke)
