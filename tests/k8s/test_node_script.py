"""scripts/k8s-node.sh and its runc wrapper: the parts that run without bringing a node up.

The cluster itself (kubelet, dockerd, pods on the host network) is exercised by the real-node suite
in e2e/ (``scripts/k8s-node.sh up && .venv/bin/pytest e2e``); here only what is quick: the oomScoreAdj
clamp of scripts/k8s-node/runc-clamp (pure, then through the real runc), the script's usage error
and its ``env`` output.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from importlib.machinery import SourceFileLoader
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "k8s-node.sh"
WRAPPER = ROOT / "scripts" / "k8s-node" / "runc-clamp"


def load_wrapper() -> ModuleType:
    loader = SourceFileLoader("runc_clamp", str(WRAPPER))
    module = ModuleType(loader.name)
    module.__file__ = str(WRAPPER)
    loader.exec_module(module)
    return module


runc_clamp = load_wrapper()


def config_with(oom: Any) -> dict[str, Any]:
    return {"ociVersion": "1.0.2", "process": {"args": ["/pause"], "oomScoreAdj": oom}}


@pytest.mark.parametrize(("before", "after", "changed"), [(-998, 0, True), (-1, 0, True)])
def test_negative_oom_score_adj_is_raised_to_zero(before: int, after: int, changed: bool) -> None:
    config = config_with(before)
    assert runc_clamp.clamp_oom_score_adj(config) is changed
    assert config["process"]["oomScoreAdj"] == after
    assert config["process"]["args"] == ["/pause"]


@pytest.mark.parametrize("value", [0, 1000, 500])
def test_zero_and_positive_scores_are_left_alone(value: int) -> None:
    config = config_with(value)
    assert runc_clamp.clamp_oom_score_adj(config) is False
    assert config == config_with(value)


def test_a_config_without_process_or_score_is_left_alone() -> None:
    assert runc_clamp.clamp_oom_score_adj({"ociVersion": "1.0.2"}) is False
    no_score: dict[str, Any] = {"process": {"args": ["sh"]}}
    assert runc_clamp.clamp_oom_score_adj(no_score) is False
    assert no_score == {"process": {"args": ["sh"]}}


def test_bundle_is_found_after_global_options_as_containerd_calls_runc() -> None:
    argv = [
        "--root", "/run/containerd/runc/moby", "--log", "/x/log.json", "--log-format", "json",
        "create", "--bundle", "/bundles/abc", "--pid-file", "/x/init.pid", "abc",
    ]  # fmt: skip
    assert runc_clamp.bundle_of(argv) == "/bundles/abc"
    assert runc_clamp.bundle_of(["run", "-b", "/b", "id"]) == "/b"
    assert runc_clamp.bundle_of(["create", "--bundle=/c", "id"]) == "/c"


def test_other_runc_commands_are_not_touched() -> None:
    assert runc_clamp.bundle_of(["--root", "/r", "start", "abc"]) is None
    assert runc_clamp.bundle_of(["--root", "/r", "delete", "--force", "abc"]) is None
    assert runc_clamp.bundle_of(["--version"]) is None


STATUS_WITHOUT_SYS_RESOURCE = "Name:\tx\nCapBnd:\t000001fffeffffff\nCapAmb:\t0000000000000000\n"


def test_the_bounding_set_is_read_from_proc_status() -> None:
    allowed = runc_clamp.bounding_set(STATUS_WITHOUT_SYS_RESOURCE)
    assert "CAP_SYS_RESOURCE" not in allowed
    assert {"CAP_SYS_ADMIN", "CAP_NET_ADMIN", "CAP_CHECKPOINT_RESTORE"} <= allowed
    assert len(allowed) == len(runc_clamp.CAPS) - 1


def test_capabilities_outside_the_bounding_set_are_dropped() -> None:
    allowed = runc_clamp.bounding_set(STATUS_WITHOUT_SYS_RESOURCE)
    caps = {
        "bounding": ["CAP_CHOWN", "CAP_SYS_RESOURCE", "CAP_FUTURE"],
        "effective": ["CAP_SYS_RESOURCE"],
        "permitted": ["CAP_CHOWN"],
    }
    assert runc_clamp.drop_caps(caps, allowed) is True
    # unknown names are runc's business, not the wrapper's
    assert caps == {
        "bounding": ["CAP_CHOWN", "CAP_FUTURE"],
        "effective": [],
        "permitted": ["CAP_CHOWN"],
    }
    assert runc_clamp.drop_caps(caps, allowed) is False
    assert runc_clamp.drop_caps(None, allowed) is False


def test_the_process_file_of_an_exec_is_found() -> None:
    argv = ["--root", "/r", "--log", "/l", "exec", "--process", "/p.json", "--detach", "id"]
    assert runc_clamp.process_of(argv) == "/p.json"
    assert runc_clamp.process_of(["exec", "-p", "/q", "id"]) == "/q"
    assert runc_clamp.process_of(["exec", "--process=/s", "id"]) == "/s"
    assert runc_clamp.process_of(["create", "--bundle", "/b", "id"]) is None
    assert runc_clamp.process_of(["exec", "id", "sh"]) is None


def test_create_rewrites_the_bundle_then_execs_the_real_runc(tmp_path: Path) -> None:
    """Through the real runc: the bundle has no rootfs, so runc fails after the wrapper rewrote it."""
    runc = shutil.which("runc") or "/usr/sbin/runc"
    if not os.access(runc, os.X_OK):
        pytest.skip("runc not installed (scripts/setup.sh installs it)")
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    config = config_with(-998)
    config["process"]["capabilities"] = {"bounding": [*sorted(runc_clamp.bounding_set(
        Path("/proc/self/status").read_text())), "CAP_SYS_RESOURCE"]}  # fmt: skip
    (bundle / "config.json").write_text(json.dumps(config))
    out = subprocess.run(
        [str(WRAPPER), "--root", str(tmp_path / "state"), "create", "--bundle", str(bundle), "t1"],
        env={**os.environ, "FERRYMQ_REAL_RUNC": runc},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    rewritten = json.loads((bundle / "config.json").read_text())["process"]
    assert rewritten["oomScoreAdj"] == 0
    allowed = runc_clamp.bounding_set(Path("/proc/self/status").read_text())
    assert set(rewritten["capabilities"]["bounding"]) <= allowed
    # The exit status and message are runc's own (an incomplete bundle), not the wrapper's.
    assert out.returncode != 0
    assert "Traceback" not in out.stderr


def test_usage_error_names_the_commands() -> None:
    out = subprocess.run([str(SCRIPT), "sideways"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert "usage:" in out.stderr and "up|down|env|status" in out.stderr


def test_env_points_the_e2e_suite_at_the_node(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    out = subprocess.run(
        [str(SCRIPT), "env"],
        env={**os.environ, "FERRYMQ_K8S_CACHE": str(cache)},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assigned = dict(
        line.removeprefix("export ").split("=", 1) for line in out.stdout.splitlines() if line
    )
    assert assigned["KUBECONFIG"] == str(cache / "node" / "admin.kubeconfig")
    assert assigned["E2E_KUBECONFIG"] == assigned["KUBECONFIG"]
    # e2e/kind_env.check_context accepts only names that look like a test cluster.
    assert "test" in assigned["E2E_CONTEXT"]
    assert assigned["DOCKER_HOST"] == f"unix://{cache / 'node' / 'docker.sock'}"
