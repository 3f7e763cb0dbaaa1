"""The Go client's scenario program (tests/interop/go, github.com/apache/rocketmq-client-go/v2):
built once per source digest (``reference.tools.build_go_module``), then one short process per
scenario (a Go process starts in milliseconds, unlike the scenario JVM)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

from .java_runner import MARK, ScenarioError
from .reference.tools import build_go_module

MODULE = Path(__file__).with_name("go")
CLIENT_MODULE = "github.com/apache/rocketmq-client-go/v2"


def client_version(module: Path = MODULE) -> str:
    """The rocketmq-client-go version go.mod pins (e.g. ``v2.1.2``)."""
    match = re.search(
        rf"^\s*(?:require\s+)?{re.escape(CLIENT_MODULE)}\s+(\S+)",
        (module / "go.mod").read_text(),
        re.M,
    )
    if match is None:
        raise ScenarioError(f"{module / 'go.mod'} does not require {CLIENT_MODULE}")
    return match.group(1)


class GoScenarios:
    def __init__(self) -> None:
        self.client = f"go-{client_version()}"
        self.binary = build_go_module(MODULE)

    def run(self, scenario: str, namesrv: str, timeout_s: int = 60, **args: Any) -> Any:
        """Run ``scenario`` against ``namesrv``; its observation. A scenario waits on state up to
        ``timeout_s`` and then reports what it has; the process is killed well after that."""
        request = json.dumps({**args, "namesrv": namesrv, "timeout_s": timeout_s})
        try:
            done = subprocess.run(
                [str(self.binary), scenario, request],
                capture_output=True,
                text=True,
                timeout=timeout_s * 2 + 30,
                check=False,
            )
        except subprocess.TimeoutExpired as e:
            raise ScenarioError(f"{scenario} against {namesrv} did not end: {e.stderr!r}") from None
        results = [line for line in done.stdout.splitlines() if line.startswith(MARK)]
        if not results:
            raise ScenarioError(
                f"{scenario} against {namesrv} exited {done.returncode} without a result:\n"
                f"{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
            )
        answer: dict[str, Any] = json.loads(results[-1][len(MARK) :])
        if "error" in answer:
            raise ScenarioError(
                f"{scenario} against {namesrv} failed: {answer['error']}\n{done.stderr[-4000:]}"
            )
        return answer["obs"]
