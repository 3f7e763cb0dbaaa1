"""The re-execution contract of a controller-mode broker (role_switch._reexec): SIGTERM/SIGINT
are blocked across the exec, so a stop request that arrives before the new image has its
handlers stays pending and is then served as a graceful stop (exit 0, logged), never as a silent
death by the default action. Real processes: a launcher blocks SIGTERM, sends it to itself and
execs ``ferrymq broker``, as the broker does to itself."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

LAUNCHER = """
import os, signal, sys
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
os.kill(os.getpid(), signal.SIGTERM)  # pending: a stop request in the middle of the exec
os.execv(sys.executable, [sys.executable, "-m", "ferrymq.cli.main", "broker", "-c", sys.argv[1]])
"""


def test_stop_request_during_reexec_is_a_graceful_stop(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "brokerClusterName=c1\nbrokerName=g\nbrokerId=0\nbrokerIP1=127.0.0.1\n"
        "bindAddress=127.0.0.1\nlistenPort=0\nhaListenPort=0\nfastChannelEnable=false\n"
        f"storePathRootDir={tmp_path / 'store'}\nmappedFileSizeCommitLog=1048576\n"
    )
    log = tmp_path / "broker.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-c", LAUNCHER, str(conf)],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:
        code = proc.wait(timeout=90)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=30)
        raise AssertionError(
            "the pending SIGTERM was never delivered: " + log.read_text(errors="replace")[-2000:]
        ) from None
    text = log.read_text(errors="replace")
    assert code == 0, f"exit {code}: {text[-2000:]}"
    assert "SIGTERM received" in text, text[-2000:]
    assert "broker g stopped" in text, text[-2000:]
