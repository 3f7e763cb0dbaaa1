"""``ferrymq bench store`` runs end to end (tiny sizes) and rejects bad options clearly.

Only that it runs and reports is checked: figures are never asserted (benchmarks live in bench/).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def _ferrymq(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ferrymq.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=240,
        env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"},
    )


def test_bench_store_runs(tmp_path: Path) -> None:
    done = _ferrymq(
        "bench", "store", "--count", "2048", "--rounds", "2", "--directory", str(tmp_path)
    )
    assert done.returncode == 0, done.stderr
    for figure in ("raw mmap copy (baseline)", "CommitLog append, batch 32", "dispatch", "s/GiB"):
        assert figure in done.stdout
    assert list(tmp_path.iterdir()) == []  # the temporary store is removed


def test_bench_store_bad_options(tmp_path: Path) -> None:
    done = _ferrymq("bench", "store", "--count", "10")
    assert done.returncode != 0 and "count" in (done.stdout + done.stderr).lower()
    done = _ferrymq("bench", "store", "--directory", str(tmp_path / "missing"))
    assert done.returncode == 2 and "does not exist" in done.stdout
