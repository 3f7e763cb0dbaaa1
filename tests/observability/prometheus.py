"""A real Prometheus server (Debian's ``prometheus`` package) for the observability tests:
started on 127.0.0.1 with a temp config and data dir, queried over its HTTP API, stopped by PID."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ferrymq.broker.local_cluster import pick_free_port

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"


@dataclass
class Prometheus:
    root: Path
    targets: list[str]
    scrape_interval: str = "500ms"
    rule_files: list[Path] = field(default_factory=list)
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> None:
        self.port = pick_free_port("127.0.0.1")
        self.root.mkdir(parents=True, exist_ok=True)
        rules = "".join(f"  - {p}\n" for p in self.rule_files)
        config = (
            "global:\n"
            f"  scrape_interval: {self.scrape_interval}\n"
            f"  evaluation_interval: {self.scrape_interval}\n"
            + (f"rule_files:\n{rules}" if rules else "")
            + "scrape_configs:\n"
            "  - job_name: ferrymq\n"
            f"    static_configs:\n      - targets: {json.dumps(self.targets)}\n"
        )
        (self.root / "prometheus.yml").write_text(config)
        log = (self.root / "prometheus.log").open("wb")
        self.proc = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={self.root / 'prometheus.yml'}",
                f"--storage.tsdb.path={self.root / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--web.enable-lifecycle",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"prometheus exited: {(self.root / 'prometheus.log').read_text()[-2000:]}"
                )
            try:
                # ready, and every target scraped successfully at least once
                up = self.query("up")
                if len(up) == len(self.targets) and all(s["value"][1] == "1" for s in up):
                    return
            except (OSError, AssertionError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("prometheus not ready in time")
            time.sleep(0.1)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None

    def _get(self, path: str, params: dict[str, str]) -> Any:
        url = f"{self.url}{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=10) as r:
            data = json.load(r)
        if data.get("status") != "success":
            raise AssertionError(f"prometheus query failed: {data}")
        return data["data"]

    def query(self, promql: str) -> list[dict[str, Any]]:
        """Instant vector: ``[{"metric": {...}, "value": [ts, "v"]}]``."""
        result: list[dict[str, Any]] = self._get("/api/v1/query", {"query": promql})["result"]
        return result

    def value(self, promql: str) -> float | None:
        """The single sample of ``promql`` now, None when it has no series."""
        result = self.query(promql)
        if not result:
            return None
        assert len(result) == 1, f"{promql} has {len(result)} series: {result}"
        return float(result[0]["value"][1])

    def sample(self, promql: str) -> tuple[float, float] | None:
        """(timestamp, value) of the single series of ``promql``."""
        result = self.query(promql)
        if not result:
            return None
        assert len(result) == 1, f"{promql} has {len(result)} series: {result}"
        ts, v = result[0]["value"]
        return float(ts), float(v)

    def query_range(self, promql: str, start: float, end: float, step: float) -> list[Any]:
        data = self._get(
            "/api/v1/query_range",
            {"query": promql, "start": str(start), "end": str(end), "step": str(step)},
        )
        result: list[Any] = data["result"]
        return result
