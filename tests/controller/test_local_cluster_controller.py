"""``ferrymq local-cluster --controller``: a NameServer, a controller and controller-mode replicas
come up as real processes; the controller names one master of 3 replicas; Ctrl-C (SIGTERM) stops
everything."""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
from ferrymq.client.allocate import MessageQueue
from ferrymq.client.broker_api import BrokerApi
from ferrymq.controller.protocol import ControllerRequestCode as Req
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.command import RemotingCommand
from subprocess_helpers import popen


def wait_for(pattern: str, path: Path, proc: subprocess.Popen[bytes], timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        match = re.search(pattern, path.read_text(errors="replace"))
        if match:
            return match.group(1)
        assert proc.poll() is None, path.read_text(errors="replace")
        time.sleep(0.1)  # polling the supervisor's output with a deadline
    raise AssertionError(f"{pattern!r} not seen within {timeout}s:\n{path.read_text()}")


async def sync_state(addr: str) -> dict[str, object]:
    client = RemotingClient()
    try:
        reply = await client.invoke(
            addr, RemotingCommand.request(Req.CONTROLLER_GET_SYNC_STATE_DATA), 5
        )
        data: dict[str, object] = orjson.loads(reply.body_bytes())
        return data
    finally:
        await client.close()


async def offsets_reach_replicas(master: str, replicas: list[str]) -> None:
    """A committed consumer offset is on every replica well before the 10 s metadata sync."""
    client = RemotingClient()
    api = BrokerApi(client)
    mq = MessageQueue("OffsetTopic", "broker-a", 0)
    try:
        await api.update_consumer_offset(master, "offset_group", mq, 42)
        deadline = time.monotonic() + 6.0
        pending = set(replicas)
        while pending:
            for addr in list(pending):
                if await api.query_consumer_offset(addr, "offset_group", mq) == 42:
                    pending.discard(addr)
            assert time.monotonic() < deadline, f"offset not on {pending} within 6 s"
            await asyncio.sleep(0.1)
    finally:
        await client.close()


def test_local_cluster_with_a_controller(tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    with out.open("wb") as sink:
        proc = popen(
            [
                sys.executable,
                "-m",
                "ferrymq.cli.main",
                "local-cluster",
                "--controller",
                "--groups",
                "1",
                "--slaves",
                "2",
                "--namesrv-port",
                "0",
                "--commitlog-file-size",
                "1M",
                "--data-dir",
                str(tmp_path / "cluster"),
            ],
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:
        controller = wait_for(r"Controller\s+(\S+:\d+)", out, proc, 120)
        wait_for(r"clients: namesrvAddr=(\S+)", out, proc, 120)
        group = asyncio.run(sync_state(controller))["broker-a"]
        assert isinstance(group, dict)
        assert group["masterBrokerId"] in (1, 2, 3)
        assert sorted(group["replicas"]) == ["1", "2", "3"]
        conf = (tmp_path / "cluster" / "conf" / "broker-a-2.conf").read_text()
        assert "enableControllerMode=true" in conf and f"controllerAddr={controller}" in conf
        replicas = group["replicas"]
        assert isinstance(replicas, dict)
        addrs = {int(b): r["addr"] for b, r in replicas.items()}
        master = addrs.pop(int(str(group["masterBrokerId"])))
        asyncio.run(offsets_reach_replicas(master, list(addrs.values())))
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    assert "stopped" in out.read_text()
