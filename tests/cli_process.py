"""A ``ferrymq`` CLI process run by a test, its output read line by line as it comes.

Tests wait for a line (the ready line, a port) rather than sleeping; a reader thread drains the
pipe so a chatty process never blocks on a full pipe while the test waits.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from subprocess_helpers import popen

FERRYMQ = [sys.executable, "-m", "ferrymq.cli.main"]


def clean_env() -> dict[str, str]:
    """This process's environment without FERRYMQ_* (a developer's own settings stay out)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("FERRYMQ_")}


class Proc:
    def __init__(self, args: list[str], cwd: Path, env: dict[str, str] | None = None) -> None:
        self.lines: queue.Queue[str] = queue.Queue()
        self.proc = popen(
            [*FERRYMQ, *args],
            cwd=cwd,
            env=clean_env() if env is None else env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        threading.Thread(target=self._pump, daemon=True).start()
        self.output: list[str] = []

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self.lines.put(raw.decode(errors="replace"))

    def wait_line(self, pattern: str, timeout: float = 60) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.2)
            except queue.Empty:
                if self.proc.poll() is not None:
                    break
                continue
            self.output.append(line)
            found = re.search(pattern, line)
            if found:
                return found
        raise AssertionError(f"no line matching {pattern!r}; output: {''.join(self.output)}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
