"""scripts/k8s-control-plane.sh: the warm (already provisioned) path and its failure messages.

The cold path (apt, source download, a ~10 minute Go build) runs in CI through scripts/test.sh; here
only what is quick: a second run reuses the cache, and a failure names its step and exits non-zero.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from k8s.control_plane import (
    CONTROL_PLANE_BINARIES,
    PROVISION_SCRIPT,
    TOOL_BINARIES,
    cache_dir,
    skip_reason,
)
from k8s.fixtures import skip_or_fail

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / PROVISION_SCRIPT


def run_script(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_a_provisioned_cache_is_reused_and_described() -> None:
    reason = skip_reason(CONTROL_PLANE_BINARIES + TOOL_BINARIES)
    if reason:
        skip_or_fail(reason)
    out = run_script("--print-env")
    assert out.returncode == 0, out.stderr
    # Nothing to build or download on a warm cache.
    assert "building" not in out.stderr and "downloading" not in out.stderr
    paths = dict(
        line.split("=", 1) for line in out.stdout.splitlines() if line and not line.startswith("#")
    )
    assert paths["FERRYMQ_K8S_CACHE"] == str(cache_dir())
    for key in ("ETCD", "KUBE_APISERVER", "KUBE_CONTROLLER_MANAGER", "HELM", "KUBECTL"):
        assert os.access(paths[f"FERRYMQ_{key}"], os.X_OK), key


def test_failure_names_the_step_and_exits_non_zero(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the cache directory should go")
    env = {**os.environ, "FERRYMQ_K8S_CACHE": str(blocker / "cache")}
    out = run_script(env=env)
    assert out.returncode != 0
    assert "FAILED at step 'init'" in out.stderr
    assert str(blocker / "cache") in out.stderr


def test_missing_packages_with_apt_disabled_is_a_clear_error(tmp_path: Path) -> None:
    # An empty dpkg database makes every package look missing without touching the real one.
    admin = tmp_path / "dpkg"
    (admin / "info").mkdir(parents=True)
    (admin / "status").write_text("")
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "dpkg-query").write_text(
        f'#!/bin/sh\nexec /usr/bin/dpkg-query --admindir={admin} "$@"\n'
    )
    (shim / "dpkg-query").chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{shim}:{os.environ['PATH']}",
        "FERRYMQ_K8S_CACHE": str(tmp_path / "cache"),
        "FERRYMQ_K8S_SKIP_APT": "1",
    }
    out = run_script(env=env)
    assert out.returncode != 0
    assert "FAILED at step 'apt-install'" in out.stderr
    assert "golang-go" in out.stderr and "FERRYMQ_K8S_SKIP_APT=1" in out.stderr
