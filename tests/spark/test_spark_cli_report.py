"""``ferrymq report backlog|rebalance`` through the real CLI app (in-process: shares the session)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from ferrymq.cli.main import app
from spark_snapshot_factory import T0, Client, Spec, write_history
from typer.testing import CliRunner

pytestmark = pytest.mark.spark

QS = [("T", "b", i) for i in range(2)]


def history(root: Path) -> Path:
    specs = [
        Spec(
            at=T0 + i * 60_000,
            max_offsets={q: 10 + 10 * i for q in QS},
            offsets={("g", *q): 5 for q in QS},
            clients={
                "g": [
                    Client("c1", owns=QS[:1], subs={"T": "*"}),
                    Client("c2", owns=QS[1:], subs={"T": "*"}),
                ]
            },
        )
        for i in range(3)
    ]
    write_history(root, specs)
    return root


def test_backlog_and_rebalance_commands(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    snaps = history(tmp_path / "snaps")
    runner = CliRunner()
    res = runner.invoke(
        app,
        [
            "report",
            "backlog",
            "--snapshots",
            str(snaps),
            "--out",
            str(tmp_path / "b"),
            "--window",
            "3",
        ],
    )
    assert res.exit_code == 0, res.output
    summary = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert summary["groups"][0]["lag"] == 2 * 25 and summary["groups"][0]["status"] == "ERR"
    res = runner.invoke(
        app, ["report", "rebalance", "--snapshots", str(snaps), "--out", str(tmp_path / "r")]
    )
    assert res.exit_code == 0, res.output
    assert "no finding" in res.output
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["findings"] == []


def test_empty_history_exits_2_with_a_message(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "empty").mkdir()
    res = CliRunner().invoke(
        app,
        [
            "report",
            "rebalance",
            "--snapshots",
            str(tmp_path / "empty"),
            "--out",
            str(tmp_path / "o"),
        ],
    )
    assert res.exit_code == 2
    assert "no snapshot under" in res.output


def test_missing_directory_fails_before_starting_spark(tmp_path: Path) -> None:
    """A real subprocess of the console script: bad input is refused fast and clearly."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ferrymq.cli.main",
            "report",
            "backlog",
            "--snapshots",
            str(tmp_path / "nope"),
            "--out",
            str(tmp_path / "o"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert "not a directory" in proc.stderr
