"""spark-submit of the backlog job to a real cluster in cluster mode (issues 20 and 32).

The driver and at least two executors run as pods of the ferrymq Spark image, with the pod
templates of ``ferrymq_spark.k8s_manifests`` and the snapshot history on a node directory mounted
at ``/audit`` on every pod. The JSON summary must be the one ``ferrymq report backlog`` writes in
``local[*]`` mode from the same snapshots.

- kind (``E2E_KIND_NETNS``, scripts/kind-cluster.sh): pods on the pod network, on any worker; the
  node directory is ``E2E_KIND_SHARED``, the same directory on this host and in every worker;
- the single node of scripts/k8s-node.sh (``E2E_NODE=1``): pods on the host network.

In namespace ``spark-e2e``; the Spark image must be built and, on kind, loaded
(``scripts/kind-cluster.sh load spark``). Run alone:

    scripts/kind-cluster.sh exec env E2E_SKIP_BUILD=1 .venv/bin/pytest e2e/test_spark_on_node.py
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from ferrymq.broker.local_cluster import pick_free_ports
from ferrymq_spark import k8s_manifests as km

from e2e.apply_patch_proxy import apply_patch_proxy
from e2e.kind_env import (
    KIND_NETNS,
    NODE_MODE,
    ROOT,
    SPARK_IMAGE,
    Kube,
    check_context,
    run,
    wait_for,
)

pytestmark = pytest.mark.skipif(
    not (NODE_MODE or KIND_NETNS),
    reason="only on the clusters of scripts/kind-cluster.sh (exec) or scripts/k8s-node.sh (env)",
)
#: kind: a directory shared by this host and every worker (kind extraMounts)
SHARED = os.environ.get("E2E_KIND_SHARED")

NAMESPACE = "spark-e2e"
# The crafted histories of the Spark unit tests (tests/spark is not a package).
sys.path.insert(0, str(ROOT / "tests" / "spark"))

MIN = 60_000


def _history(root: Path) -> None:
    """Twelve snapshots, two brokers x four queues of two topics, three groups: one caught up, one
    falling behind while consuming, one stopped after a while."""
    from spark_snapshot_factory import T0, Client, Spec, write_history

    queues = [
        (t, b, q) for t in ("orders", "audit") for b in ("broker-a", "broker-b") for q in range(4)
    ]
    specs = []
    for i in range(12):
        produced = {k: 1_000 + i * 200 + 7 * n for n, k in enumerate(queues)}
        offsets: dict[tuple[str, str, str, int], int] = {}
        for k, top in produced.items():
            offsets[("healthy", *k)] = top - 1
            offsets[("slow", *k)] = 900 + i * 120
            offsets[("stopped", *k)] = 1_000 + min(i, 1) * 200
        clients = {
            "healthy": [Client("h1", owns=queues[:8], subs={"orders": "*", "audit": "*"}),
                        Client("h2", owns=queues[8:], subs={"orders": "*", "audit": "*"})],
            "slow": [Client("s1", owns=queues, subs={"orders": "*", "audit": "*"})],
            "stopped": [] if i >= 2 else [Client("x1", owns=queues, subs={"orders": "*", "audit": "*"})],
        }  # fmt: skip
        specs.append(
            Spec(
                at=T0 + i * MIN,
                max_offsets=produced,
                offsets=offsets,
                clients=clients,
                oldest_unconsumed_ts={
                    k: T0 + i * MIN - 1_000 * (k[0] != "healthy") for k in offsets
                },
            )
        )
    write_history(root, specs)


@contextmanager
def _api_for_spark_submit(kube: Kube) -> Iterator[str]:
    """The API server's URL for spark-submit: through :mod:`e2e.apply_patch_proxy` on a 1.20
    server (Spark's apply patch of the driver Service fails there), directly otherwise."""
    version = json.loads(kube.kubectl("get", "--raw", "/version"))
    minor = int("".join(ch for ch in version["minor"] if ch.isdigit()))
    if (int(version["major"]), minor) > (1, 20):
        yield kube.kubectl(
            "config", "view", "--minify", "-o", "jsonpath={.clusters[0].cluster.server}"
        )
        return
    with apply_patch_proxy(kube.kubeconfig, kube.context) as url:
        yield url


@pytest.fixture(scope="module")
def kube() -> Iterator[Kube]:
    kubeconfig = os.environ.get("E2E_KUBECONFIG") or os.environ.get("KUBECONFIG")
    context = os.environ.get("E2E_CONTEXT")
    if not kubeconfig or not context or shutil.which("kubectl") is None:
        pytest.fail(
            'needs eval "$(scripts/k8s-node.sh env)" (E2E_KUBECONFIG, E2E_CONTEXT, kubectl)'
        )
    check_context(context)
    if KIND_NETNS and os.environ.get("E2E_SKIP_BUILD") != "1":
        # built outside the netns, then into every node (the conftest loads broker + operator)
        run([str(ROOT / "scripts" / "kind-cluster.sh"), "load", "spark"], timeout=3600)
    k = Kube(kubeconfig, context, NAMESPACE)
    k.kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=true", timeout=300)
    k.kubectl("create", "namespace", NAMESPACE)
    try:
        yield k
    finally:
        k.kubectl("delete", "namespace", NAMESPACE, "--wait=false", check=False)


@pytest.fixture
def audit_dir() -> Iterator[Path]:
    """The node directory every pod mounts at /audit, owned by the image's user."""
    base = Path(tempfile.mkdtemp(prefix="ferrymq-spark-e2e-", dir=SHARED if KIND_NETNS else None))
    base.chmod(0o755)
    audit = base / "audit"
    _history(audit / "snapshots")
    (audit / "reports").mkdir()
    for path in [audit, *audit.rglob("*")]:
        os.chown(path, km.RUN_AS_USER, km.RUN_AS_USER)
    try:
        yield audit
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _spark_env() -> dict[str, str]:
    """spark-submit of the venv's PySpark: its scripts look for SPARK_HOME with ``python``."""
    spec = importlib.util.find_spec("pyspark")
    assert spec is not None and spec.origin is not None, "pyspark is not installed (.[spark])"
    return {"SPARK_HOME": str(Path(spec.origin).parent), "SPARK_LOCAL_IP": "127.0.0.1"}


def _first_error(log: str) -> str:
    """The log from its first Python traceback or ERROR line on, without JVM stack frames."""
    noise = ("at ", "io.vertx.core.VertxException")
    lines = [
        ln
        for ln in log.splitlines()
        if not ln.strip().startswith(noise) and "BlockedThreadChecker" not in ln
    ]
    for marker in ("Traceback", " ERROR ", "Error"):
        first = next((i for i, ln in enumerate(lines) if marker in ln), None)
        if first is not None:
            return "\n".join(lines[max(0, first - 5) : first + 80])
    return "\n".join(lines[-80:])


def _host_env() -> dict[str, str]:
    # the submitting side's interpreter must not reach the pods (the image has its own)
    drop = {"PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON"}
    return {k: v for k, v in os.environ.items() if k not in drop}


def _local_summary(snapshots: Path, out: Path) -> dict[str, Any]:
    subprocess.run(
        [str(ROOT / ".venv" / "bin" / "ferrymq"), "report", "backlog", "--snapshots", str(snapshots),
         "--out", str(out), "--window", "10"],
        check=True, timeout=900, capture_output=True, env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"},
    )  # fmt: skip
    summary: dict[str, Any] = json.loads((out / "summary.json").read_text())
    return summary


def test_spark_submit_cluster_mode_matches_local(
    kube: Kube, audit_dir: Path, tmp_path: Path
) -> None:
    kube.apply(km.rbac(km.SparkK8sSettings(namespace=NAMESPACE))[0])
    for obj in km.rbac(km.SparkK8sSettings(namespace=NAMESPACE))[1:]:
        kube.apply(obj)
    driver_port, block_port, ui_port = pick_free_ports("127.0.0.1", 3)
    settings = km.SparkK8sSettings(
        namespace=NAMESPACE,
        image=SPARK_IMAGE,
        image_pull_policy="Never",
        audit_host_path=str(audit_dir),
        host_network=NODE_MODE,
        driver_port=driver_port,
        driver_block_manager_port=block_port,
        ui_port=ui_port,
        driver_memory="512m",
        driver_request_cores="100m",
        executor_instances=2,
        executor_memory="512m",
        executor_request_cores="100m",
    )
    templates = tmp_path / "templates"
    templates.mkdir()
    for role in ("driver", "executor"):
        text = yaml.safe_dump(km.pod_template(settings, role))  # type: ignore[arg-type]
        (templates / f"{role}-pod-template.yaml").write_text(text)
    app = f"spark-e2e-{uuid.uuid4().hex[:6]}"
    extra = {
        "spark.kubernetes.context": kube.context,
        "spark.kubernetes.driver.pod.name": f"{app}-driver",
        "spark.kubernetes.executor.podNamePrefix": app,
        # spark-submit returns once the driver pod exists; the test follows the pod in the API
        "spark.kubernetes.submission.waitAppCompletion": "false",
        # kept after the run so the test can count them from the API
        "spark.kubernetes.executor.deleteOnTermination": "false",
        # start tasks only once both executors registered (2 of 2)
        "spark.scheduler.minRegisteredResourcesRatio": "1.0",
        "spark.scheduler.maxRegisteredResourcesWaitingTime": "600s",
        # the driver's Python connects back to the JVM (toPandas) within this; 15 s by default is
        # short for a pod with a 100m CPU request on this shared, loaded 2-core machine
        "spark.python.authenticate.socketTimeout": "300s",
    }
    with _api_for_spark_submit(kube) as api:
        argv = km.spark_submit_argv(
            settings, "backlog", master=f"k8s://{api}", template_dir=str(templates)
        )
        argv[0] = str(ROOT / ".venv" / "bin" / "spark-submit")
        at = argv.index("local:///opt/ferrymq/submit.py")
        argv[at:at] = [a for k, v in extra.items() for a in ("--conf", f"{k}={v}")]
        proc = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=900,
            env={**_host_env(), **_spark_env(), "KUBECONFIG": kube.kubeconfig},
        )
    # spark-submit's own messages without the Java stack frames
    said = "\n".join(ln for ln in proc.stderr.splitlines() if not ln.startswith("\tat "))[-5000:]
    assert proc.returncode == 0, said

    def driver_done() -> dict[str, Any] | None:
        pod = kube.get_json("pod", f"{app}-driver")
        return pod if pod["status"].get("phase") in ("Succeeded", "Failed") else None

    driver = wait_for("the driver pod to finish", driver_done, timeout=1800)
    logs = kube.ns("logs", f"{app}-driver", check=False)
    # kept for a failure's post-mortem (the namespace and its pods are deleted)
    kept = Path(tempfile.gettempdir()) / f"ferrymq-{app}-driver.log"
    kept.write_text(logs)
    assert driver["status"]["phase"] == "Succeeded", (
        f"driver failed ({kept}):\n{_first_error(logs)}"
    )
    executors = kube.get_json("pods", "-l", "spark-role=executor")["items"]
    ours = [p for p in executors if p["metadata"]["name"].startswith(app)]
    assert len(ours) >= 2, [p["metadata"]["name"] for p in executors]
    for pod in [driver, *ours]:
        assert bool(pod["spec"].get("hostNetwork")) is NODE_MODE
        assert pod["spec"]["securityContext"]["runAsUser"] == km.RUN_AS_USER
        started = [s for s in pod["status"]["containerStatuses"] if "terminated" in s["state"]]
        assert started, pod["status"]
    # both executors registered with the driver (it waited for 2 of 2 before its first task)
    # and each ran tasks of the job
    for pod in ours:
        log = kube.ns("logs", pod["metadata"]["name"], check=False)
        assert "Successfully registered with driver" in log
        assert "Finished task" in log, pod["metadata"]["name"]

    cluster_summary = json.loads((audit_dir / "reports" / "backlog" / "summary.json").read_text())
    assert (audit_dir / "reports" / "backlog" / "report.html").is_file()
    local = _local_summary(audit_dir / "snapshots", tmp_path / "local")
    assert cluster_summary == local
    groups = {g["group"]: g["status"] for g in local["groups"]}
    assert groups == {"healthy": "OK", "slow": "WARN", "stopped": "ERR"}

    wait_for(
        "executor pods deleted",
        lambda: kube.ns("delete", "pods", "-l", "spark-role=executor", "--wait=true") is not None,
        timeout=120,
    )
