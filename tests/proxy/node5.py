"""The Node.js 5.x client (rocketmq-client-nodejs 1.0.8): ``tests/interop/node5`` pins it
(package.json + package-lock.json); ``npm ci`` installs it once into a cache directory, and
``node5_client.js`` runs a scenario with it."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from interop.reference.tools import CACHE_DIR, ToolError

from proxy.python5 import Events, run_events

NODE5_DIR = Path(__file__).parents[1] / "interop" / "node5"
SCRIPT = Path(__file__).with_name("node5_client.js")


def ensure_node() -> None:
    """node and npm (Debian packages) where missing."""
    if shutil.which("node") and shutil.which("npm"):
        return
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for argv in (
        ["apt-get", "update", "-qq"],
        ["apt-get", "install", "-y", "-qq", "nodejs", "npm"],
    ):
        done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise ToolError(f"{' '.join(argv)} failed:\n{done.stderr[-2000:]}")


def node5_dir() -> Path:
    """A directory whose node_modules has the pinned client (npm ci on first use)."""
    lock = (NODE5_DIR / "package-lock.json").read_bytes()
    target = CACHE_DIR / f"node5-{hashlib.sha256(lock).hexdigest()[:16]}"
    if (target / "node_modules" / "rocketmq-client-nodejs").exists():
        return target
    ensure_node()
    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for name in ("package.json", "package-lock.json"):
        shutil.copy(NODE5_DIR / name, tmp / name)
    done = subprocess.run(
        ["npm", "ci", "--no-audit", "--no-fund"],
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if done.returncode != 0:
        raise ToolError(f"npm ci in {tmp} failed:\n{done.stderr[-3000:]}")
    try:
        tmp.replace(target)
    except OSError:  # another run made it meanwhile
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def run_node5(endpoint: str, topic: str, group: str, run_dir: Path, budget_s: int) -> Events:
    modules = node5_dir()
    return run_events(
        ["node", str(SCRIPT), endpoint, topic, group, str(budget_s)],
        run_dir,
        dict(os.environ, NODE_PATH=str(modules / "node_modules"), HOME=str(run_dir)),
        budget_s + 120,
    )
