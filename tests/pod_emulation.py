"""A pod's view, played on 127.0.0.1 without a kubelet: Secret volumes written as the kubelet
writes them, the mount points of the operator's conf moved under a local directory, the container
env resolved from Secrets (the ``ferrymq`` processes themselves are run by ``cli_process.Proc``)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ferrymq_operator.security import builders


def project(directory: Path, files: dict[str, str]) -> None:
    """Write ``files`` as the kubelet writes a Secret volume: a fresh timestamped directory,
    ``..data`` switched to it with one rename, and ``<key> -> ..data/<key>`` links."""
    directory.mkdir(exist_ok=True)
    stamp = directory / f"..{time.monotonic_ns()}"
    stamp.mkdir()
    for key, text in files.items():
        (stamp / key).write_text(text)
    tmp_link = directory / "..data_tmp"
    tmp_link.symlink_to(stamp.name)
    tmp_link.rename(directory / "..data")
    for key in files:
        link = directory / key
        if not link.is_symlink():
            link.symlink_to(f"..data/{key}")


def local_paths(conf: dict[str, str], root: Path) -> dict[str, str]:
    """The pod's mount points, moved under ``root``; /metrics off (every pod has its own IP and
    the operator gives them one metricsPort, which emulated pods sharing 127.0.0.1 cannot)."""
    moved = {
        builders.ACL_DIR: str(root / "acl"),
        builders.TLS_DIR: str(root / "tls"),
    }
    out = {}
    for key, value in conf.items():
        for mount, local in moved.items():
            value = value.replace(mount, local)
        out[key] = value
    if "metricsPort" in out:
        out["metricsPort"] = "0"
    return out


def pod_env(
    container_env: list[dict[str, Any]], secrets: dict[str, dict[str, str]], root: Path
) -> dict[str, str]:
    """The container's env as the kubelet resolves it (secretKeyRef from ``secrets``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FERRYMQ_")}
    for item in container_env:
        ref = item.get("valueFrom", {}).get("secretKeyRef")
        if ref is not None:
            env[item["name"]] = secrets[ref["name"]][ref["key"]]
        elif "value" in item:
            env[item["name"]] = local_paths({"v": item["value"]}, root)["v"]
    return env


def write_properties(path: Path, conf: dict[str, str]) -> Path:
    path.write_text("".join(f"{k}={v}\n" for k, v in sorted(conf.items())))
    return path


def run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=120, env=env, check=False
    )
