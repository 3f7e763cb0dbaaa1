"""The server subcommands share their exit codes (cli/server_common): 2 for a configuration the
user must fix, 1 for a server that cannot start. Real `ferrymq` processes."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest


def _ferrymq(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ferrymq.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("command", ["namesrv", "controller"])
def test_bad_config_exits_2_naming_the_key(tmp_path: Path, command: str) -> None:
    conf = tmp_path / f"{command}.conf"
    conf.write_text("listenPort=not-a-port\n")
    proc = _ferrymq(command, "-c", str(conf))
    assert proc.returncode == 2, proc.stderr
    assert "listenPort" in proc.stderr


def test_namesrv_on_a_busy_port_exits_1() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = _ferrymq("namesrv", "--listen-port", str(port), "--bind", "127.0.0.1")
    assert proc.returncode == 1, proc.stderr
    assert "cannot start the NameServer" in proc.stderr
