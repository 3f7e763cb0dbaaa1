"""scripts/kind-cluster.sh: the parts that run without building or starting anything (the cluster
itself is exercised by the kind smoke test of scripts/test.sh and by ``pytest e2e``)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "kind-cluster.sh"


def run_script(*args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), *args],
        env={**os.environ, "FERRYMQ_KIND_CACHE": str(cache), "FERRYMQ_KIND_NS": "ferrymq-kind-t"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_usage_error_names_the_commands(tmp_path: Path) -> None:
    out = run_script("sideways", cache=tmp_path)
    assert out.returncode == 2
    assert (
        "usage:" in out.stderr and "up|down|env|status|build|control-plane|load|exec" in out.stderr
    )


def test_env_points_the_e2e_suite_at_the_cluster_in_its_netns(tmp_path: Path) -> None:
    out = run_script("env", cache=tmp_path)
    assert out.returncode == 0, out.stderr
    assigned = dict(
        line.removeprefix("export ").split("=", 1)
        for line in out.stdout.splitlines()
        if line.startswith("export ")
    )
    assert assigned["KUBECONFIG"] == str(tmp_path / "run" / "kubeconfig")
    assert assigned["E2E_KUBECONFIG"] == assigned["KUBECONFIG"]
    assert assigned["E2E_KIND_NETNS"] == "ferrymq-kind-t"
    # e2e/kind_env.check_context accepts kind's own context names
    assert assigned["E2E_CONTEXT"].startswith("kind-")
    assert assigned["DOCKER_HOST"] == f"unix://{tmp_path / 'run' / 'docker.sock'}"
    # the versions key the cache: a new Kubernetes gets a new directory, not a mixed one
    assert "/k8s-v1.34." in assigned["PATH"]


def test_exec_refuses_without_the_netns(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        out = run_script("exec", "true", cache=tmp_path)
        assert out.returncode == 1 and "needs root" in out.stderr
        return
    out = run_script("exec", "true", cache=tmp_path)
    assert out.returncode == 1
    assert "no netns ferrymq-kind-t" in out.stderr and "up first" in out.stderr
