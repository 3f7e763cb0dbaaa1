"""Two operator processes with leader election against a real kube-apiserver: one holds the Lease
and reconciles, the other waits and reconciles nothing; killing the leader (SIGKILL, as a node
loss) hands over, and the new leader reconciles what is created afterwards."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client as k8s
from subprocess_helpers import popen

from k8s.control_plane import KubeApi
from k8s.operator_env import Cluster, ferrymq_crds, wait_for

__all__ = ["ferrymq_crds"]

LEASE = "ferrymq-operator-test"
HANDLED = "Handler 'nameserver_changed' succeeded"


@pytest.fixture
def cluster(kube_api: KubeApi, k8s_namespace: str) -> Iterator[Cluster]:
    with kube_api.api_client() as api_client:
        yield Cluster(api_client, k8s_namespace)


def start(kube_api: KubeApi, namespace: str, name: str, log: Path) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "KUBECONFIG": str(kube_api.kubeconfig_path),
        "POD_NAMESPACE": namespace,
        "POD_NAME": name,
        "FERRYMQ_OPERATOR_LEADER_LEASE": LEASE,
        "FERRYMQ_OPERATOR_METRICS_PORT": "0",
        "FERRYMQ_OPERATOR_RETRY_DELAY_SECONDS": "2",
    }
    argv = [
        sys.executable, "-m", "ferrymq_operator", "--leader-election",
        "--namespace", namespace, "--liveness", "",
    ]  # fmt: skip
    with log.open("wb") as out:
        return popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)


def holder(cluster: Cluster) -> str | None:
    try:
        lease = k8s.CoordinationV1Api(cluster.core.api_client).read_namespaced_lease(
            LEASE, cluster.ns
        )
    except k8s.ApiException:
        return None
    return lease.spec.holder_identity if lease.spec else None


def test_one_leader_reconciles_and_a_killed_leader_is_replaced(
    kube_api: KubeApi, ferrymq_crds: list[str], cluster: Cluster, tmp_path: Path
) -> None:
    logs = {name: tmp_path / f"{name}.log" for name in ("op-a", "op-b")}
    procs = {name: start(kube_api, cluster.ns, name, logs[name]) for name in logs}
    try:
        first = wait_for("a leader", lambda: holder(cluster))
        other = next(n for n in procs if n != first)
        cluster.create("nameservers", "before", {"replicas": 1})
        wait_for("the leader's StatefulSet", lambda: cluster.statefulset("before-namesrv"))
        wait_for("the leader's handler", lambda: HANDLED in logs[first].read_text())
        # the standby waits: no handler ran there
        assert procs[other].poll() is None, logs[other].read_text()
        assert HANDLED not in logs[other].read_text()

        killed_at = time.monotonic()
        procs[first].send_signal(signal.SIGKILL)
        procs[first].wait(timeout=30)
        wait_for("the standby to take the Lease", lambda: holder(cluster) == other, timeout=90)
        handover = time.monotonic() - killed_at
        print(f"leader handover after SIGKILL: {handover:.1f} s")
        cluster.create("nameservers", "after", {"replicas": 1})
        wait_for("the new leader's StatefulSet", lambda: cluster.statefulset("after-namesrv"))
        assert "holding the leader Lease" in logs[other].read_text()
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=30)
