"""``ferrymq report backlog|rebalance`` through the real CLI app (in-process: shares the session)."""

from __future__ import annotations

import json
import os
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


def test_fail_on_sets_the_exit_code(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The history's group is ERR (stalled): --fail-on ERROR and WARN exit 1; without it, 0."""
    snaps = history(tmp_path / "snaps")
    runner = CliRunner()
    base = ["report", "backlog", "--snapshots", str(snaps), "--window", "3"]
    for fail_on, code in ((None, 0), ("ERROR", 1), ("warn", 1)):
        args = [*base, "--out", str(tmp_path / f"b-{fail_on}")]
        if fail_on:
            args += ["--fail-on", fail_on]
        res = runner.invoke(app, args)
        assert res.exit_code == code, res.output
        if code:
            assert "--fail-on" in res.output and "groups g" in res.output
    # --last 1 reads one snapshot: no trend, so nothing reaches WARN
    res = runner.invoke(
        app, [*base, "--out", str(tmp_path / "b-last"), "--last", "1", "--fail-on", "WARN"]
    )
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "b-last" / "summary.json").read_text())["snapshots"] == 1


def test_missing_pyspark_names_the_extra(tmp_path: Path) -> None:
    """Without PySpark the message keeps 'ferrymq[spark]' (rich markup used to eat '[spark]').

    PySpark's absence is simulated by a stand-in package on PYTHONPATH whose import fails: the
    one way to take an installed package away from one subprocess.
    """
    blocker = tmp_path / "blocker" / "pyspark"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('pyspark hidden for this test')\n")
    (tmp_path / "snaps").mkdir()
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "ferrymq.cli.main", "report", "rebalance"),
            *("--snapshots", str(tmp_path / "snaps"), "--out", str(tmp_path / "o")),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "PYTHONPATH": str(blocker.parent)},
    )
    assert proc.returncode == 2, proc.stderr
    assert "pip install 'ferrymq[spark]'" in " ".join(proc.stderr.split())
