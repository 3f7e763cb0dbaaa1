"""The RocketMQ 5.x Java client (rocketmq-client-java 5.0.8) as a scenario runner:
``tests/interop/java5`` holds its pinned pom and ``V5Scenarios.java``; the classpath is resolved
with the reference launcher's Maven helper and the program compiled once per source revision."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path
from typing import Any

from interop.reference import resolve_classpath, run_java
from interop.reference.tools import CACHE_DIR, ToolError, ensure_java_tools

JAVA5_DIR = Path(__file__).parents[1] / "interop" / "java5"
SOURCE = JAVA5_DIR / "src" / "main" / "java" / "ferrymq" / "interop" / "V5Scenarios.java"
MAIN = "ferrymq.interop.V5Scenarios"


def scenario_classpath() -> str:
    """The client's jars and the compiled scenario program (compiled on first use)."""
    jars = resolve_classpath(JAVA5_DIR / "pom.xml")
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]
    classes = CACHE_DIR / f"java5-classes-{digest}"
    marker = classes / "ferrymq" / "interop" / "V5Scenarios.class"
    if not marker.exists():
        ensure_java_tools()
        tmp = classes.with_name(classes.name + f".tmp{os.getpid()}")
        tmp.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            ["javac", "-cp", jars, "-d", str(tmp), str(SOURCE)],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise ToolError(f"javac V5Scenarios failed:\n{done.stderr[-3000:]}")
        if not marker.exists():
            tmp.replace(classes)
    return f"{jars}{os.pathsep}{classes}"


def run_scenario(
    classpath: str, endpoint: str, scenario: str, args: list[str], run_dir: Path, budget_s: int
) -> list[dict[str, Any]]:
    """Run one scenario to its end; its JSON events. ``budget_s`` bounds the program's waits."""
    done = run_java(
        MAIN,
        [endpoint, scenario, str(budget_s), *args],
        classpath=classpath,
        run_dir=run_dir,
        timeout=budget_s + 120,
    )
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    if not events:
        raise AssertionError(
            f"{scenario} printed no events (exit {done.returncode}):\n{done.stderr[-3000:]}"
        )
    return events


def by_event(events: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [e for e in events if e["event"] == name]
