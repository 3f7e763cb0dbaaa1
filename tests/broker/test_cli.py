"""The namesrv/broker commands as real processes: clear errors for bad configs, clean SIGTERM."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from ferrymq.broker.local_cluster import LocalCluster


def run_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ferrymq.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_bad_broker_conf_exits_2_naming_the_key(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerName=b\nlistenPort=not-a-port\n")
    result = run_cli("broker", "-c", str(conf))
    assert result.returncode == 2
    assert "listenPort" in result.stderr and "not-a-port" in result.stderr
    missing = run_cli("namesrv", "-c", str(tmp_path / "nope.conf"))
    assert missing.returncode == 2 and "no such" in missing.stderr


def test_sigterm_stops_cluster_cleanly(tmp_path: Path) -> None:
    cluster = LocalCluster(
        tmp_path, groups=1, namesrv_port=0, broker_port=0, mapped_file_size_commit_log=1024 * 1024
    )
    cluster.start()
    try:
        abort = tmp_path / "broker-a-0" / "store" / "abort"
        assert abort.exists()  # a running store marks itself
        broker = cluster.brokers[0]
        broker.proc.send_signal(signal.SIGTERM)
        assert broker.proc.wait(timeout=30) == 0
        assert not abort.exists(), "graceful shutdown must remove the abort file"
        log = broker.log_path.read_text()
        assert "unregistered from NameServer" in log and "stopped" in log
        assert cluster.namesrv is not None
        cluster.namesrv.proc.send_signal(signal.SIGTERM)
        assert cluster.namesrv.proc.wait(timeout=30) == 0
    finally:
        cluster.stop()
    deadline = time.monotonic() + 5
    while any(c.alive() for c in cluster.children) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(c.alive() for c in cluster.children)
