"""The Python 5.x client (rocketmq-python-client 5.1.2) in a venv of its own, installed from PyPI
on first use with the pins of ``python5-requirements.txt`` (its ``rocketmq`` package cannot share
the test venv with the 4.x C++ client's), and the scenario runner ``python5_client.py``."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from interop.reference.tools import CACHE_DIR, ToolError

Events = list[dict[str, Any]]
REQUIREMENTS = Path(__file__).with_name("python5-requirements.txt")
SCRIPT = Path(__file__).with_name("python5_client.py")


def python5() -> Path:
    """The venv's interpreter (created and filled on first use)."""
    digest = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()[:16]
    venv = CACHE_DIR / f"python5-client-{digest}"
    python = venv / "bin" / "python"
    if python.exists():
        return python
    tmp = venv.with_name(venv.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    for argv in (
        [sys.executable, "-m", "venv", str(tmp)],
        [str(tmp / "bin" / "python"), "-m", "pip", "install", "-q", "-r", str(REQUIREMENTS)],
    ):
        done = subprocess.run(argv, capture_output=True, text=True, timeout=900, check=False)
        if done.returncode != 0:
            raise ToolError(f"{' '.join(argv)} failed:\n{done.stderr[-3000:]}")
    try:
        tmp.replace(venv)
    except OSError:  # another run made it meanwhile
        shutil.rmtree(tmp, ignore_errors=True)
    # the venv's scripts name its directory: use the interpreter by its final path
    return python


def run_events(argv: list[str], run_dir: Path, env: dict[str, str], timeout: float) -> Events:
    """Run a client scenario program to its end; the JSON events it printed on stdout."""
    run_dir.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        argv, cwd=run_dir, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    if not events:
        raise AssertionError(
            f"{argv[0]} {argv[1]} printed nothing ({done.returncode}):\n{done.stderr[-3000:]}"
        )
    return events


def run_python5(
    python: Path, endpoint: str, topic: str, group: str, run_dir: Path, budget_s: int
) -> Events:
    # the client logs under $HOME/logs
    return run_events(
        [str(python), str(SCRIPT), endpoint, topic, group, str(budget_s)],
        run_dir,
        dict(os.environ, HOME=str(run_dir)),
        budget_s + 120,
    )
