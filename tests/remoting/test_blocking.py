"""Blocking remoting calls (``remoting.blocking``) over real sockets on 127.0.0.1.

The servers run in the test's event loop, so every blocking call runs in a worker thread.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
from collections.abc import AsyncIterator, Callable, Iterator

import pytest
from e2e_local.e2e_helpers import wait_for
from ferrymq.remoting.blocking import BlockingConnection, BlockingPool
from ferrymq.remoting.channel import Channel
from ferrymq.remoting.command import RemotingCommand, decode_command
from ferrymq.remoting.errors import (
    RemotingConnectError,
    RemotingSendRequestError,
    RemotingTimeoutError,
)
from ferrymq.remoting.server import RemotingServer

pytestmark = pytest.mark.timeout(60)

ECHO, SLOW, PAIR, ONEWAY = 900, 901, 902, 903


@pytest.fixture
async def server() -> AsyncIterator[RemotingServer]:
    srv = RemotingServer("127.0.0.1", 0, name="test")
    received: list[RemotingCommand] = []
    ended: list[str] = []
    arrived: list[str] = []
    both = asyncio.Event()

    def echo(ch: Channel, req: RemotingCommand) -> RemotingCommand:
        return req.response(0, ext_fields=req.ext_fields, body=req.body_bytes())

    async def slow(ch: Channel, req: RemotingCommand) -> RemotingCommand:
        try:
            await asyncio.sleep(float(req.ext_fields["delay"]))
            return req.response(0, ext_fields={"n": req.ext_fields["n"]})
        finally:  # answered, or cancelled because its connection closed
            ended.append(req.ext_fields["n"])

    async def pair(ch: Channel, req: RemotingCommand) -> RemotingCommand:
        # answers only once two calls are in: calls serialised on one connection never get there
        arrived.append(ch.remote_addr)
        if len(arrived) >= 2:
            both.set()
        await asyncio.wait_for(both.wait(), 5)
        return req.response(0, ext_fields={"peer": ch.remote_addr})

    def oneway(ch: Channel, req: RemotingCommand) -> None:
        received.append(req)

    for code, fn in ((ECHO, echo), (SLOW, slow), (PAIR, pair), (ONEWAY, oneway)):
        srv.register(code, fn)  # type: ignore[arg-type]
    srv.received = received  # type: ignore[attr-defined]
    srv.ended = ended  # type: ignore[attr-defined]
    await srv.start()
    yield srv
    await srv.stop()


def addr(srv: RemotingServer) -> str:
    return f"127.0.0.1:{srv.port}"


@pytest.fixture
def pool() -> Iterator[BlockingPool]:
    p = BlockingPool(connect_timeout=2.0)
    yield p
    p.close()


async def test_calls_return_their_answers_over_one_reused_connection(
    server: RemotingServer, pool: BlockingPool
) -> None:
    def calls() -> list[RemotingCommand]:
        return [
            pool.invoke(addr(server), RemotingCommand.request(ECHO, {"n": i}, b"x" * i), 5)
            for i in range(20)
        ]

    got = await asyncio.to_thread(calls)
    assert [r.ext_fields["n"] for r in got] == [str(i) for i in range(20)]
    assert [len(r.body_bytes()) for r in got] == list(range(20))
    assert len(server.channels) == 1


async def test_a_large_answer_arrives_whole(server: RemotingServer, pool: BlockingPool) -> None:
    body = bytes(range(256)) * 8192  # 2 MiB: many reads
    got = await asyncio.to_thread(
        pool.invoke, addr(server), RemotingCommand.request(ECHO, {}, body), 10
    )
    assert got.body_bytes() == body


async def test_a_timeout_closes_the_connection_and_the_next_call_gets_its_own_answer(
    server: RemotingServer, pool: BlockingPool
) -> None:
    late = RemotingCommand.request(SLOW, {"delay": 0.5, "n": "late"})
    with pytest.raises(RemotingTimeoutError, match=r"within 0\.1s"):
        await asyncio.to_thread(pool.invoke, addr(server), late, 0.1)
    # the server is done with the late call (its connection closed under it) before the next
    # call goes out, so nothing of it can reach the next call
    await wait_for(lambda: "late" in server.ended, 5, "the server to end the late call")  # type: ignore[attr-defined]
    again = RemotingCommand.request(SLOW, {"delay": 0, "n": "next"})
    got = await asyncio.to_thread(pool.invoke, addr(server), again, 5)
    assert got.ext_fields["n"] == "next"


async def test_threads_get_connections_of_their_own(
    server: RemotingServer, pool: BlockingPool
) -> None:
    def call() -> RemotingCommand:
        return pool.invoke(addr(server), RemotingCommand.request(PAIR), 5)

    first, second = await asyncio.gather(asyncio.to_thread(call), asyncio.to_thread(call))
    assert first.code == second.code == 0
    assert first.ext_fields["peer"] != second.ext_fields["peer"]


async def test_oneway_is_written_without_an_answer(
    server: RemotingServer, pool: BlockingPool
) -> None:
    req = RemotingCommand.request(ONEWAY, {"k": "v"}, b"payload")
    await asyncio.to_thread(pool.invoke_oneway, addr(server), req)
    received: list[RemotingCommand] = server.received  # type: ignore[attr-defined]
    await wait_for(lambda: bool(received), 5, "the oneway request")
    assert received[0].is_oneway and received[0].body_bytes() == b"payload"


def test_an_unreachable_address_is_a_connect_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: connections are refused
        conn = BlockingConnection(f"127.0.0.1:{port}", connect_timeout=2)
        with pytest.raises(RemotingConnectError, match=f"127.0.0.1:{port}"):
            conn.invoke(RemotingCommand.request(ECHO), 2)


def test_a_malformed_address_is_rejected() -> None:
    with pytest.raises(ValueError, match="not host:port"):
        BlockingConnection("nowhere").invoke(RemotingCommand.request(ECHO), 1)


def test_a_closed_pool_refuses_calls() -> None:
    pool = BlockingPool()
    pool.close()
    with pytest.raises(RemotingSendRequestError, match="closed"):
        pool.invoke("127.0.0.1:1", RemotingCommand.request(ECHO), 1)


# --- raw servers: answers no remoting server would send -------------------------------------------
def raw_server(
    reply: Callable[[socket.socket, RemotingCommand], None],
) -> tuple[str, threading.Thread]:
    """A one-connection server that reads one request frame and lets ``reply`` answer it."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        with listener:
            conn, _ = listener.accept()
            with conn:
                (length,) = struct.unpack(">i", conn.recv(4, socket.MSG_WAITALL))
                frame = conn.recv(length, socket.MSG_WAITALL)
                reply(conn, decode_command(frame))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return f"127.0.0.1:{port}", thread


def frame_of(cmd: RemotingCommand) -> bytes:
    return cmd.to_bytes()


def test_unsolicited_frames_before_the_answer_are_skipped() -> None:
    def reply(conn: socket.socket, req: RemotingCommand) -> None:
        stray_request = RemotingCommand.request(40, {"x": "1"})  # a broker-initiated request
        stale = RemotingCommand(0, {"n": "stale"}, None, req.opaque + 1, flag=1)
        answer = req.response(0, ext_fields={"n": "mine"})
        # all three in one write: the reader must cut several frames from one read
        conn.sendall(frame_of(stray_request) + frame_of(stale) + frame_of(answer))

    where, thread = raw_server(reply)
    conn = BlockingConnection(where)
    try:
        got = conn.invoke(RemotingCommand.request(ECHO), 5)
        assert got.ext_fields["n"] == "mine"
    finally:
        conn.close()
        thread.join(5)


def test_an_oversized_frame_closes_the_connection_with_a_clear_error() -> None:
    def reply(conn: socket.socket, req: RemotingCommand) -> None:
        conn.sendall(struct.pack(">i", 0x7FFFFFF0) + b"\0" * 64)

    where, thread = raw_server(reply)
    conn = BlockingConnection(where)
    with pytest.raises(RemotingSendRequestError, match="bad frame"):
        conn.invoke(RemotingCommand.request(ECHO), 5)
    assert not conn.is_open
    thread.join(5)


def test_a_connection_closed_before_the_answer_is_an_error_not_a_hang() -> None:
    def reply(conn: socket.socket, req: RemotingCommand) -> None:
        conn.sendall(frame_of(req.response(0))[:10])  # half a frame, then close

    where, thread = raw_server(reply)
    conn = BlockingConnection(where)
    with pytest.raises(RemotingSendRequestError, match="closed the connection"):
        conn.invoke(RemotingCommand.request(ECHO), 5)
    assert not conn.is_open
    thread.join(5)
