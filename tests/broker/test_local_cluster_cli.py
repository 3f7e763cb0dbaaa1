"""``ferrymq local-cluster --commitlog-file-size``: the size reaches each broker's store (the
CommitLog file on disk); a bad size is a CLI error with exit code 2."""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ferrymq.broker.local_cluster import LOCAL_COMMITLOG_FILE_SIZE, parse_size
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import ResponseCode
from subprocess_helpers import popen
from test_send_pull import send_request

CLI = [sys.executable, "-m", "ferrymq.cli.main", "local-cluster"]


def wait_for(pattern: str, path: Path, proc: subprocess.Popen[bytes], timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        match = re.search(pattern, path.read_text(errors="replace"))
        if match:
            return match.group(1)
        assert proc.poll() is None, path.read_text(errors="replace")
        time.sleep(0.1)  # polling the supervisor's output with a deadline
    raise AssertionError(f"{pattern!r} not seen within {timeout}s:\n{path.read_text()}")


def test_parse_size() -> None:
    assert parse_size("8M") == parse_size("8MiB") == parse_size("8388608") == 8 << 20
    assert parse_size("1g") == 1 << 30 and parse_size("64k") == 64 << 10
    for bad, reason in (("12Q", "not a size"), ("1k", "greater than"), ("2G", "less than")):
        with pytest.raises(ValueError, match=reason):
            parse_size(bad)
    assert LOCAL_COMMITLOG_FILE_SIZE == 128 << 20


@pytest.mark.parametrize(("size", "reason"), [("12Q", "not a size"), ("1k", "greater than")])
def test_bad_size_is_a_cli_error(tmp_path: Path, size: str, reason: str) -> None:
    result = subprocess.run(
        [*CLI, "--data-dir", str(tmp_path), "--commitlog-file-size", size],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "--commitlog-file-size" in result.stderr and reason in result.stderr
    assert not (tmp_path / "conf").exists()  # nothing started


def test_help_documents_the_option() -> None:
    result = subprocess.run(
        [*CLI, "--help"], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0
    flat = " ".join(result.stdout.split())
    assert "--commitlog-file-size" in flat and "128M" in flat


def test_commitlog_file_size_reaches_the_store(tmp_path: Path) -> None:
    out = tmp_path / "cli.log"
    data = tmp_path / "data"
    with open(out, "wb") as fh:
        proc = popen(
            [
                *CLI,
                "--data-dir",
                str(data),
                "--groups",
                "1",
                "--slaves",
                "0",
                "--namesrv-port",
                "0",
                "--broker-port",
                "0",
                "--commitlog-file-size",
                "8M",
            ],
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:
        addr = wait_for(r"broker-a-0 at (\S+)", out, proc, timeout=120)
        conf = (data / "conf" / "broker-a-0.conf").read_text()
        assert f"mappedFileSizeCommitLog={8 << 20}" in conf.splitlines()

        async def send() -> None:
            client = RemotingClient()
            try:
                resp = await client.invoke(addr, send_request("SizeT", b"hello"))
                assert resp.code == ResponseCode.SUCCESS, resp.remark
            finally:
                await client.close()

        asyncio.run(send())
        files = list((data / "broker-a-0" / "store" / "commitlog").iterdir())
        assert [f.stat().st_size for f in files] == [8 << 20]
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
    assert proc.returncode == 0, out.read_text()
