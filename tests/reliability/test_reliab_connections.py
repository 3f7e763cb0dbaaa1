"""Issue 23 items 6 and 7: idle connections are closed after serverChannelMaxIdleTimeSeconds on
the NameServer and the broker, all connections together hold at most
serverMaxUnfinishedFrameBytes of unfinished frames, and a broker listens only once it serves."""

from __future__ import annotations

import asyncio
import select
import signal
import socket
import threading
import time
from pathlib import Path

from ferrymq.broker.local_cluster import pick_free_port
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.errors import RemotingError
from ferrymq.remoting.frame import MAX_FRAME_SIZE
from ferrymq.remoting.server import RemotingServer
from ferrymq.remoting.settings import ServerLimits
from reliab_helpers import (
    broker_conf,
    refusing_address,
    spawn,
    wait_exit,
    wait_ready,
    write_conf,
)

HALF_FRAMES = 500


def _half_frame(sock: socket.socket, declared: int = 1 << 20, sent: int = 100) -> None:
    sock.sendall(declared.to_bytes(4, "big") + b"\x00" * sent)


def _wait_all_closed(socks: list[socket.socket], timeout: float) -> int:
    """How many of ``socks`` the server closed (EOF or reset) within ``timeout`` seconds."""
    open_ = set(socks)
    deadline = time.monotonic() + timeout
    while open_ and time.monotonic() < deadline:
        ready, _, _ = select.select(list(open_), [], [], 0.2)
        for sock in ready:
            try:
                data = sock.recv(4096)
            except ConnectionResetError:
                data = b""
            if not data:
                open_.discard(sock)
    return len(socks) - len(open_)


def _stop(proc: object) -> None:
    import subprocess

    assert isinstance(proc, subprocess.Popen)
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        if wait_exit(proc, 30) is None:
            proc.kill()


def test_namesrv_closes_500_half_sent_frames_when_idle(tmp_path: Path) -> None:
    conf = write_conf(
        tmp_path / "namesrv.conf",
        {
            "listenPort": "0",
            "bindAddress": "127.0.0.1",
            "kvConfigPath": str(tmp_path / "kv.json"),
            "serverChannelMaxIdleTimeSeconds": "1",
        },
    )
    log = tmp_path / "namesrv.log"
    proc = spawn(["namesrv", "-c", str(conf)], log)
    socks: list[socket.socket] = []
    try:
        port = wait_ready(proc, log)
        for _ in range(HALF_FRAMES):
            sock = socket.create_connection(("127.0.0.1", port))
            _half_frame(sock)
            socks.append(sock)
        assert _wait_all_closed(socks, 30) == HALF_FRAMES
        # the server still serves: a fresh connection gets answers
        with socket.create_connection(("127.0.0.1", port)) as live:
            request = RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO)
            live.sendall(b"".join(request.encode()))
            assert live.recv(4)  # a response frame starts
    finally:
        for sock in socks:
            sock.close()
        _stop(proc)


def test_broker_closes_idle_connections_but_not_active_ones(tmp_path: Path) -> None:
    holder, namesrv = refusing_address()
    conf = write_conf(
        tmp_path / "broker.conf",
        broker_conf(tmp_path, namesrv, serverChannelMaxIdleTimeSeconds="2"),
    )
    log = tmp_path / "broker.log"
    proc = spawn(["broker", "-c", str(conf)], log)
    try:
        port = wait_ready(proc, log)
        idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(20)]
        for sock in idle[:10]:
            _half_frame(sock)  # half of them mid-frame, half never sent a byte

        async def active() -> int:
            """Requests every 0.2 s for 3 s on one connection: all answered on that one."""
            client = RemotingClient()
            try:
                addr = f"127.0.0.1:{port}"
                first = await client.channel(addr)
                for _ in range(15):
                    request = RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO)
                    reply = await client.invoke(addr, request, 10)
                    assert reply.code == ResponseCode.SUCCESS
                    await asyncio.sleep(0.2)  # pacing the traffic, not synchronisation
                assert client.open_channel(addr) is first
                return 15
            finally:
                await client.close()

        result: list[int] = []
        thread = threading.Thread(target=lambda: result.append(asyncio.run(active())))
        thread.start()
        assert _wait_all_closed(idle, 30) == len(idle)
        thread.join(60)
        assert result == [15]
        for sock in idle:
            sock.close()
    finally:
        _stop(proc)
        holder.close()


async def test_unfinished_frames_capped_in_total() -> None:
    """With room for one whole frame in all, the connection whose bytes go over is closed; the
    others, and new requests, are served."""
    server = RemotingServer(
        "127.0.0.1",
        0,
        limits=ServerLimits(channel_max_idle_seconds=0, max_unfinished_frame_bytes=MAX_FRAME_SIZE),
    )
    await server.start()
    socks: list[socket.socket] = []
    try:
        chunk = 4 * 1024 * 1024
        for _ in range(3):  # 12 MiB held, under the cap
            sock = socket.create_connection(("127.0.0.1", server.port))
            await asyncio.to_thread(_half_frame, sock, MAX_FRAME_SIZE, chunk)
            socks.append(sock)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 20
        while server.budget.held < 3 * chunk:
            assert loop.time() < deadline, server.budget.held
            await asyncio.sleep(0.02)
        over = socket.create_connection(("127.0.0.1", server.port))
        await asyncio.to_thread(_half_frame, over, MAX_FRAME_SIZE, chunk + 1)
        assert await asyncio.to_thread(_wait_all_closed, [over], 20) == 1
        over.close()
        assert server.budget.held == 3 * (chunk + 4)  # each with its length field
        assert await asyncio.to_thread(_wait_all_closed, socks, 0.5) == 0
        # the first three finish their frames and the budget is free again
        for sock in socks:
            sock.close()
        deadline = loop.time() + 20
        while server.budget.held:
            assert loop.time() < deadline, server.budget.held
            await asyncio.sleep(0.02)
    finally:
        await server.stop()


def test_broker_port_refuses_until_it_serves(tmp_path: Path) -> None:
    """From spawn to ready, every connect that succeeds gets a real answer: never SYSTEM_BUSY
    "broker is starting" (the port used to open ~20 ms before the broker served)."""
    holder, namesrv = refusing_address()
    port = pick_free_port("127.0.0.1")
    conf = write_conf(
        tmp_path / "broker.conf", broker_conf(tmp_path, namesrv, listenPort=str(port))
    )
    log = tmp_path / "broker.log"
    answers: list[int] = []
    refused = 0
    proc = spawn(["broker", "-c", str(conf)], log)
    try:

        async def hammer() -> None:
            nonlocal refused
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 60
            while not answers and loop.time() < deadline and proc.poll() is None:
                client = RemotingClient(connect_timeout=1.0)
                try:
                    request = RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO)
                    reply = await client.invoke(f"127.0.0.1:{port}", request, 10)
                    answers.append(reply.code)
                except (RemotingError, OSError):
                    refused += 1
                finally:
                    await client.close()

        asyncio.run(hammer())
        wait_ready(proc, log)
    finally:
        _stop(proc)
        holder.close()
    assert answers == [ResponseCode.SUCCESS], answers
    assert refused > 0  # the connects before ready were refused, not answered "busy"
