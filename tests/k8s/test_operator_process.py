"""The operator as the image runs it: a real ``python -m ferrymq_operator`` process watching one
namespace, its kopf liveness endpoint answering, reconciling a NameServer, stopped by SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from ferrymq.broker.local_cluster import pick_free_port
from subprocess_helpers import popen

from k8s.control_plane import KubeApi
from k8s.operator_env import Cluster, ferrymq_crds, wait_for

__all__ = ["ferrymq_crds"]


def healthz(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


@pytest.fixture
def operator_process(
    kube_api: KubeApi, ferrymq_crds: list[str], k8s_namespace: str, tmp_path: Path
) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    url = f"http://127.0.0.1:{pick_free_port('127.0.0.1')}/healthz"
    env = {**kube_api.env(), "FERRYMQ_OPERATOR_RESYNC_SECONDS": "5"}
    log = (tmp_path / "operator.log").open("wb")
    proc = popen(
        [sys.executable, "-m", "ferrymq_operator", "--namespace", k8s_namespace, "--liveness", url],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        yield proc, url
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        log.close()


def test_entrypoint_liveness_and_reconcile(
    operator_process: tuple[subprocess.Popen[bytes], str], kube_api: KubeApi, k8s_namespace: str
) -> None:
    proc, url = operator_process
    wait_for("the liveness endpoint", lambda: healthz(url))
    with kube_api.api_client() as api_client:
        cluster = Cluster(api_client, k8s_namespace)
        cluster.create("nameservers", "proc", {"replicas": 1})
        wait_for("the StatefulSet", lambda: cluster.statefulset("proc-namesrv"))
        cluster.wait_condition("nameservers", "proc", "Progressing", "True", "Creating")
    os.kill(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
