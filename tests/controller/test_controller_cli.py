"""``ferrymq controller`` as a real process: bad config exits with a message, and a kill -9 and
restart keeps every group's master, epoch and SyncStateSet (the file store)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from ferrymq.controller.protocol import ControllerRequestCode as Req
from ferrymq.controller.protocol import ReplicaInfo
from ferrymq.remoting.blocking import BlockingConnection
from ferrymq.remoting.command import RemotingCommand
from subprocess_helpers import popen

READY = re.compile(rb"Controller ready on port (\d+)")


def start(conf: Path, log: Path) -> tuple[subprocess.Popen[bytes], int]:
    seen = log.stat().st_size if log.exists() else 0
    out = log.open("ab")
    proc = popen(
        [sys.executable, "-m", "ferrymq.cli.main", "controller", "-c", str(conf)],
        stdout=out,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        match = READY.findall(log.read_bytes()[seen:])
        if match and proc.poll() is None:
            return proc, int(match[-1])
        assert proc.poll() is None, log.read_text()
        time.sleep(0.05)
    proc.kill()
    raise AssertionError(f"controller not ready: {log.read_text()}")


def test_bad_config_exits_with_a_message(tmp_path: Path) -> None:
    conf = tmp_path / "controller.conf"
    conf.write_text("listenPort=99999\n")
    done = subprocess.run(
        [sys.executable, "-m", "ferrymq.cli.main", "controller", "-c", str(conf)],
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert b"listenPort" in done.stderr


def test_kill_and_restart_keeps_state(tmp_path: Path) -> None:
    conf = tmp_path / "controller.conf"
    conf.write_text(
        f"listenPort=0\nbindAddress=127.0.0.1\ncontrollerStorePath={tmp_path / 'store'}\n"
    )
    log = tmp_path / "controller.log"
    proc, port = start(conf, log)
    ext = {
        "clusterName": "c1",
        "brokerName": "g",
        "brokerAddr": "127.0.0.1:1001",
        "brokerId": "1",
    }
    try:
        client = BlockingConnection(f"127.0.0.1:{port}")
        resp = client.invoke(RemotingCommand.request(Req.CONTROLLER_REGISTER_BROKER, ext), 5)
        client.close()
        assert resp.code == 0, resp.remark
        first = ReplicaInfo.parse(resp.ext_fields, resp.body_bytes())
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    assert first.master_broker_id == 1 and first.master_epoch == 1
    proc, port = start(conf, log)
    try:
        client = BlockingConnection(f"127.0.0.1:{port}")
        request = RemotingCommand.request(Req.CONTROLLER_GET_REPLICA_INFO, {"brokerName": "g"})
        resp = client.invoke(request, 5)
        client.close()
        assert resp.code == 0, resp.remark
        assert ReplicaInfo.parse(resp.ext_fields, resp.body_bytes()) == first
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(20)
