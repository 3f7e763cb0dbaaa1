"""Helpers of the reliability tests: real ``ferrymq broker`` / ``ferrymq namesrv`` processes with
their own conf files and logs, stand-in NameServers that refuse or never answer, raw requests."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from ferrymq.message import encode_properties
from ferrymq.remoting.codes import RequestCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.headers import SendMessageRequestHeader
from subprocess_helpers import popen, process_gone

READY = re.compile(rb"(?:Broker \S+|NameServer) ready on port (\d+)")


def refusing_address() -> tuple[socket.socket, str]:
    """A port that is bound but not listening: every connect is refused (keep the socket)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    return sock, f"127.0.0.1:{sock.getsockname()[1]}"


def silent_address() -> tuple[socket.socket, str]:
    """A port that accepts connections (the kernel's backlog) but never reads nor answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(512)
    return sock, f"127.0.0.1:{sock.getsockname()[1]}"


def hanging_connect_address() -> tuple[list[socket.socket], str]:
    """A port whose accept queue is full (backlog 0, one connection never accepted): the kernel
    drops further SYNs, so a connect hangs until its own timeout, as to an unreachable host."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(0)
    filler = socket.create_connection(sock.getsockname(), timeout=5)
    return [sock, filler], f"127.0.0.1:{sock.getsockname()[1]}"


def write_conf(path: Path, values: Mapping[str, str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
    return path


def broker_conf(root: Path, namesrv: str, **extra: str) -> dict[str, str]:
    """A normal broker.conf as users write it (haListenPort included), ports picked for tests."""
    conf = {
        "brokerClusterName": "ReliabCluster",
        "brokerName": "broker-r",
        "brokerId": "0",
        "brokerRole": "ASYNC_MASTER",
        "brokerIP1": "127.0.0.1",
        "bindAddress": "127.0.0.1",
        "listenPort": "0",
        "haListenPort": "0",
        "fastChannelEnable": "false",
        "namesrvAddr": namesrv,
        "storePathRootDir": str(root / "store"),
        "flushDiskType": "ASYNC_FLUSH",
        "mappedFileSizeCommitLog": str(1 << 20),
        "mappedFileSizeConsumeQueue": str(20 * 1000),
    }
    conf.update(extra)
    return conf


def spawn(args: list[str], log_path: Path) -> subprocess.Popen[bytes]:
    """``ferrymq <args>`` with stdout and stderr in ``log_path``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "wb") as out:
        return popen(
            [sys.executable, "-m", "ferrymq.cli.main", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )


def wait_ready(proc: subprocess.Popen[bytes], log_path: Path, timeout: float = 60) -> int:
    """The port from the process's ready line; fails if it exits or times out first."""
    deadline = time.monotonic() + timeout
    while True:
        match = READY.search(log_path.read_bytes())
        if match:
            return int(match.group(1))
        if proc.poll() is not None:
            raise AssertionError(f"exited {proc.returncode}: {log_path.read_text()[-3000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"not ready within {timeout}s: {log_path.read_text()[-3000:]}")
        time.sleep(0.02)  # polling a log file, with a deadline


def wait_exit(proc: subprocess.Popen[bytes], timeout: float) -> int | None:
    """The exit code, or None when the process is still running after ``timeout`` seconds."""
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        return None


def kill_leftover(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None and not process_gone(proc.pid):
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)


def send_request(topic: str, body: bytes, queue_id: int = 0) -> RemotingCommand:
    header = SendMessageRequestHeader(
        producer_group="reliab_pg",
        topic=topic,
        queue_id=queue_id,
        born_timestamp=int(time.time() * 1000),
        properties=encode_properties({"TAGS": "T", "WAIT": "true"}),
    )
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, header.to_ext_v2(), body)


def create_topic_request(topic: str, queues: int = 4) -> RemotingCommand:
    return RemotingCommand.request(
        RequestCode.UPDATE_AND_CREATE_TOPIC,
        {
            "topic": topic,
            "defaultTopic": "TBW102",
            "readQueueNums": str(queues),
            "writeQueueNums": str(queues),
            "perm": "6",
            "topicFilterType": "SINGLE_TAG",
        },
    )
