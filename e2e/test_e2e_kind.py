"""End to end on kind: the chart's operator runs NameServer and Broker CRs built from this tree's
images; messages go through the cluster; a master dies and consumption continues; broker groups
scale out and (drained) in; everything is deleted.

Run: ``.venv/bin/pytest e2e`` (skips where docker/kind are missing; see e2e/conftest.py).
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from e2e.kind_env import NODE_MODE, Kube, wait_for

TOPIC = "e2e-orders"


def nameserver_cr(image: str) -> dict[str, Any]:
    return {
        "apiVersion": "ferrymq.io/v1alpha1",
        "kind": "NameServer",
        "metadata": {"name": "routes"},
        "spec": {"replicas": 2, "image": image, "imagePullPolicy": "Never"},
    }


def broker_cr(image: str) -> dict[str, Any]:
    return {
        "apiVersion": "ferrymq.io/v1alpha1",
        "kind": "Broker",
        "metadata": {"name": "orders"},
        "spec": {
            "nameServerRef": {"name": "routes"},
            "groups": 2,
            "replicasPerGroup": 2,
            "brokerRole": "ASYNC_MASTER",
            "image": image,
            "imagePullPolicy": "Never",
            "storage": {"size": "1Gi", "deleteClaimOnScaleDown": True},
            "config": {"autoCreateTopicEnable": "true", "slaveReadEnable": "true"},
        },
    }


def namesrv_addr(kube: Kube) -> str:
    status = kube.get_json("nameservers", "routes").get("status") or {}
    addr = status.get("addresses")
    assert addr, f"NameServer status has no addresses: {status}"
    return str(addr)


def ready(kube: Kube, plural: str, name: str) -> bool:
    cond = kube.condition(plural, name, "Ready")
    return bool(cond and cond.get("status") == "True")


def received(log: str) -> int:
    """The consume CLI's summary line: ``received N message(s) from ...``."""
    match = re.search(r"received (\d+) message", log)
    return int(match.group(1)) if match else 0


@pytest.mark.skipif(
    NODE_MODE,
    reason="pod networking; on the single-node cluster e2e/test_real_node.py checks the same "
    "lifecycle with host networking",
)
def test_cluster_lifecycle_on_kind(kube: Kube, broker_image: str) -> None:
    kube.apply(nameserver_cr(broker_image))
    kube.apply(broker_cr(broker_image))
    wait_for("the NameServer Ready", lambda: ready(kube, "nameservers", "routes"), timeout=600)
    wait_for("the Broker Ready", lambda: ready(kube, "brokers", "orders"), timeout=900)
    namesrv = namesrv_addr(kube)

    # Produce and consume through the cluster (the CLI runs in pods: brokers advertise pod IPs).
    kube.run_pod(
        "e2e-produce-1", broker_image, ["produce", "-n", namesrv, "-t", TOPIC, "-c", "200"]
    )
    log = kube.run_pod(
        "e2e-consume-1",
        broker_image,
        ["consume", "-n", namesrv, "-t", TOPIC, "-g", "e2e", "--from-first", "-c", "200",
         "--timeout", "120", "-q"],
    )  # fmt: skip
    assert received(log) == 200, log

    # Kill a master: the slave keeps serving reads, consumption continues.
    kube.run_pod(
        "e2e-produce-2", broker_image, ["produce", "-n", namesrv, "-t", TOPIC, "-c", "100"]
    )
    kube.ns("delete", "pod", "orders-broker-0-0", "--grace-period=0", "--force", check=False)
    log = kube.run_pod(
        "e2e-consume-2",
        broker_image,
        ["consume", "-n", namesrv, "-t", TOPIC, "-g", "e2e", "-c", "100", "--timeout", "180", "-q"],
    )  # fmt: skip
    assert received(log) == 100, log
    wait_for("the Broker Ready again", lambda: ready(kube, "brokers", "orders"), timeout=900)

    # Scale out: a third group, which gets the cluster's topics.
    kube.ns("patch", "brokers", "orders", "--type=merge", "-p", '{"spec":{"groups":3}}')
    wait_for(
        "group 2 to exist and the Broker Ready",
        lambda: (
            kube.ns("get", "statefulset", "orders-broker-2", check=False)
            and ready(kube, "brokers", "orders")
        ),
        timeout=900,
    )
    # Scale in: group 2 is drained (writes off, consumers catch up), then removed.
    kube.run_pod(
        "e2e-produce-3", broker_image, ["produce", "-n", namesrv, "-t", TOPIC, "-c", "100"]
    )
    kube.ns("patch", "brokers", "orders", "--type=merge", "-p", '{"spec":{"groups":2}}')
    kube.run_pod(
        "e2e-consume-3",
        broker_image,
        ["consume", "-n", namesrv, "-t", TOPIC, "-g", "e2e", "-c", "100", "--timeout", "180", "-q"],
    )  # fmt: skip
    wait_for(
        "group 2 drained and removed",
        lambda: not kube.ns("get", "statefulset", "orders-broker-2", "--ignore-not-found"),
        timeout=900,
    )
    events = kube.ns("get", "events", "--field-selector", "involvedObject.name=orders")
    assert "Drained" in events, events
    wait_for(
        "the Broker Ready after scale-in", lambda: ready(kube, "brokers", "orders"), timeout=600
    )

    # Delete everything: the garbage collector removes every child.
    kube.ns("delete", "brokers", "orders", "--wait=true", timeout=600)
    kube.ns("delete", "nameservers", "routes", "--wait=true", timeout=600)
    wait_for(
        "every StatefulSet gone",
        lambda: not kube.ns("get", "statefulsets", "-o", "name").strip(),
        timeout=600,
    )
