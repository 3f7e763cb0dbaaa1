"""The scenario JVM (tests/interop/java): one long-lived Java process per client version that runs
scenario requests one at a time (a JVM start costs ~10 s of CPU on a shared 2-core machine)."""

from __future__ import annotations

import itertools
import json
import queue
import subprocess
import threading
from pathlib import Path
from typing import Any

from .reference.java import JavaProcess, start_java
from .reference.tools import build_module

MODULE = Path(__file__).with_name("java")
MARK = "@@RESULT "
# client version -> Maven profile of tests/interop/java/pom.xml (reference/__main__.py prefetches)
CLIENTS = {"4.9.8": "client4", "5.4.0": "client5"}


class ScenarioError(AssertionError):
    """The JVM died or did not answer in time; the message has its output."""


class JavaScenarios:
    def __init__(self, client: str, run_dir: Path) -> None:
        self.client = client
        classpath = build_module(MODULE, CLIENTS[client], client)
        self.process: JavaProcess = start_java(
            f"scenarios-{client}",
            "io.ferrymq.interop.Runner",
            [],
            classpath=classpath,
            run_dir=run_dir,
            jvm_opts=("-Xms64m", "-Xmx384m", "-XX:+UseSerialGC", "-Djava.net.preferIPv4Stack=true"),
            stdin=True,
        )
        self._answers: queue.Queue[dict[str, Any]] = queue.Queue()
        self._ids = itertools.count(1)
        self._lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        ready = self._next(180)
        if not ready.get("ready"):
            raise ScenarioError(f"scenario JVM did not start: {ready}")
        self.version = str(ready["client"])

    def _read(self) -> None:
        stdout = self.process.proc.stdout
        assert stdout is not None
        for raw in stdout:
            line = raw.decode(errors="replace").rstrip("\n")
            if line.startswith(MARK):
                self._answers.put(json.loads(line[len(MARK) :]))
            else:
                self._lines.append(line)
                del self._lines[:-200]

    def _next(self, timeout: float) -> dict[str, Any]:
        try:
            return self._answers.get(timeout=timeout)
        except queue.Empty:
            state = "running" if self.process.alive() else "exited"
            tail = "\n".join(self._lines[-40:])
            raise ScenarioError(
                f"no answer in {timeout:.0f}s from the {state} JVM:\n{tail}"
            ) from None

    def run(self, scenario: str, namesrv: str, timeout_s: int = 60, **args: Any) -> Any:
        """Run ``scenario`` against ``namesrv``; its observation (a ScenarioError carries a Java
        exception that the scenario did not expect)."""
        request_id = next(self._ids)
        request = {
            "id": request_id,
            "scenario": scenario,
            "namesrv": namesrv,
            "args": {**args, "timeout_s": timeout_s},
        }
        stdin = self.process.proc.stdin
        assert stdin is not None
        stdin.write((json.dumps(request) + "\n").encode())
        stdin.flush()
        answer = self._next(timeout_s * 4 + 60)
        while answer.get("id", request_id) < request_id:  # a late answer to an abandoned request
            answer = self._next(timeout_s * 4 + 60)
        if answer.get("id") != request_id:
            raise ScenarioError(f"answer {answer} for request {request_id}")
        if "error" in answer:
            raise ScenarioError(f"{scenario} against {namesrv} raised {answer['error']}")
        return answer["obs"]

    def close(self) -> None:
        stdin = self.process.proc.stdin
        if stdin is not None:
            stdin.close()  # the runner ends at end of input
        try:
            self.process.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.stop(kill=True)


class JavaRunners:
    """The scenario JVMs of a session, one per client version, each started on first use (a
    module with clusters of its own asks for them in its own order) and closed at the end."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.runners: dict[str, JavaScenarios] = {}

    def get(self, client: str) -> JavaScenarios:
        if client not in self.runners:
            self.runners[client] = JavaScenarios(client, self.run_dir / f"java-{client}")
        return self.runners[client]

    def close(self) -> None:
        for runner in self.runners.values():
            runner.close()
