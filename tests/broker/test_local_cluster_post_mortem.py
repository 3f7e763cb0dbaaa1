"""A dead child of a LocalCluster can be told apart: how it ended (exit code or signal, in words),
what it wrote (a restarted child's earlier log is kept as <name>.<n>.log), and a fatal signal
such as SIGBUS leaves the Python stacks in its log (faulthandler) instead of nothing."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from ferrymq.broker.local_cluster import LocalCluster, describe_exit, keep_previous_log


@pytest.mark.parametrize(
    ("code", "words"),
    [
        (None, "running"),
        (0, "exit code 0"),
        (3, "exit code 3"),
        (-9, "killed by SIGKILL"),
        (-7, "killed by SIGBUS"),
        (-200, "killed by signal 200"),
    ],
)
def test_describe_exit(code: int | None, words: str) -> None:
    assert describe_exit(code) == words


def test_previous_logs_are_numbered_not_overwritten(tmp_path: Path) -> None:
    log = tmp_path / "broker-a-0.log"
    assert keep_previous_log(log) is None
    log.write_text("first life\n")
    assert keep_previous_log(log) == tmp_path / "broker-a-0.1.log"
    log.write_text("second life\n")
    assert keep_previous_log(log) == tmp_path / "broker-a-0.2.log"
    assert not log.exists()
    assert (tmp_path / "broker-a-0.1.log").read_text() == "first life\n"
    assert (tmp_path / "broker-a-0.2.log").read_text() == "second life\n"


def test_a_fatal_signal_is_reported_and_the_dead_brokers_log_kept(tmp_path: Path) -> None:
    with LocalCluster(
        tmp_path / "cluster",
        groups=1,
        namesrv_port=0,
        broker_port=0,
        mapped_file_size_commit_log=1024 * 1024,
    ) as cluster:
        first = cluster.brokers[0]
        first.proc.send_signal(signal.SIGBUS)  # as a touch of a cut mmap'd file would
        first.proc.wait(timeout=30)
        assert first.ending() == "killed by SIGBUS"
        second = cluster.restart_broker(0)
        assert second.alive() and second.pid != first.pid
        assert cluster.retired == [first]
        kept = first.log_path
        assert kept.name == "broker-a-0.1.log", kept
        text = kept.read_text(errors="replace")
        assert "ready on port" in text
        assert "Fatal Python error: Bus error" in text, text[-2000:]
        # the new incarnation's log is its own
        assert second.log_path.name == "broker-a-0.log"
        assert "Fatal Python error" not in second.log_path.read_text(errors="replace")
