"""Server and client over real sockets on 127.0.0.1: correlation, oneway, timeouts, bad input."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator

import pytest
from e2e_local.e2e_helpers import wait_for
from ferrymq.remoting.channel import Channel
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import ResponseCode
from ferrymq.remoting.command import RemotingCommand, decode_command
from ferrymq.remoting.errors import (
    RemotingConnectError,
    RemotingSendRequestError,
    RemotingTimeoutError,
)
from ferrymq.remoting.server import RemotingServer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ECHO, SLOW, BOOM, HANG, ONEWAY = 900, 901, 902, 903, 904


@pytest.fixture
async def server() -> AsyncIterator[RemotingServer]:
    srv = RemotingServer("127.0.0.1", 0, name="test")
    received: list[RemotingCommand] = []
    hanging: list[RemotingCommand] = []

    def echo(ch: Channel, req: RemotingCommand) -> RemotingCommand:
        return req.response(0, ext_fields=req.ext_fields, body=req.body_bytes())

    async def slow(ch: Channel, req: RemotingCommand) -> RemotingCommand:
        await asyncio.sleep(float(req.ext_fields["delay"]))
        return req.response(0, ext_fields={"n": req.ext_fields["n"]})

    def boom(ch: Channel, req: RemotingCommand) -> RemotingCommand:
        raise RuntimeError("kaput")

    async def hang(ch: Channel, req: RemotingCommand) -> RemotingCommand:
        hanging.append(req)
        await asyncio.Event().wait()
        raise AssertionError

    def oneway(ch: Channel, req: RemotingCommand) -> None:
        received.append(req)

    for code, fn in ((ECHO, echo), (SLOW, slow), (BOOM, boom), (HANG, hang), (ONEWAY, oneway)):
        srv.register(code, fn)  # type: ignore[arg-type]
    srv.received = received  # type: ignore[attr-defined]
    srv.hanging = hanging  # type: ignore[attr-defined]
    await srv.start()
    yield srv
    await srv.stop()


def addr(srv: RemotingServer) -> str:
    return f"127.0.0.1:{srv.port}"


async def test_out_of_order_responses_match_by_opaque(server: RemotingServer) -> None:
    client = RemotingClient()
    try:
        calls = [
            client.invoke(
                addr(server),
                RemotingCommand.request(SLOW, {"delay": (5 - i) * 0.02, "n": i}),
                timeout=5,
            )
            for i in range(5)
        ]
        results = await asyncio.gather(*calls)
        assert [r.ext_fields["n"] for r in results] == ["0", "1", "2", "3", "4"]
    finally:
        await client.close()


async def test_unknown_code_and_handler_error_get_clear_responses(server: RemotingServer) -> None:
    client = RemotingClient()
    try:
        resp = await client.invoke(addr(server), RemotingCommand.request(4242), timeout=5)
        assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        assert resp.remark and "4242" in resp.remark
        resp = await client.invoke(addr(server), RemotingCommand.request(BOOM), timeout=5)
        assert resp.code == ResponseCode.SYSTEM_ERROR and resp.remark and "kaput" in resp.remark
    finally:
        await client.close()


async def test_timeout_and_oneway(server: RemotingServer) -> None:
    client = RemotingClient()
    try:
        with pytest.raises(RemotingTimeoutError):
            await client.invoke(addr(server), RemotingCommand.request(HANG), timeout=0.2)
        await client.invoke_oneway(addr(server), RemotingCommand.request(ONEWAY, {"k": "v"}))
        await wait_for(lambda: bool(server.received), 5, "the oneway request")  # type: ignore[attr-defined]
        assert server.received[0].ext_fields == {"k": "v"}  # type: ignore[attr-defined]
    finally:
        await client.close()


async def test_each_call_times_out_at_its_own_deadline(server: RemotingServer) -> None:
    """One channel timer serves every pending call: a short call made after a long one, calls
    answered in between, and a burst expiring together all keep their own deadlines.

    Asserted as order and state, not durations: no call fails before its own timeout (a timer
    never fires early, whatever the load), and the burst fails while the long call still waits.
    """
    client = RemotingClient()
    loop = asyncio.get_running_loop()
    short, long = 0.2, 3.0  # far apart: the order below holds on a loaded machine
    rounding = 1e-9  # of the float differences of loop.time(), not a timing allowance
    try:

        async def timed(code: int, timeout: float) -> tuple[str, float]:
            start = loop.time()
            try:
                await client.invoke(addr(server), RemotingCommand.request(code), timeout=timeout)
                outcome = "answered"
            except RemotingTimeoutError:
                outcome = "timeout"
            return outcome, loop.time() - start

        await client.invoke(addr(server), RemotingCommand.request(ECHO), timeout=5)
        channel = client.open_channel(addr(server))
        assert channel is not None
        long_call = asyncio.ensure_future(timed(HANG, long))
        # the long call's deadline is armed before any short call is made
        await wait_for(lambda: len(channel._deadlines) == 1, 5, "the long call to be pending")
        short_calls = [asyncio.ensure_future(timed(HANG, short)) for _ in range(20)]
        answered = await timed(ECHO, 5)
        for outcome, took in await asyncio.gather(*short_calls):
            assert outcome == "timeout" and took >= short - rounding
        # the burst expired at its own deadline, not the long call's
        assert not long_call.done() and len(channel._deadlines) == 1
        outcome, took = await long_call
        assert outcome == "timeout" and took >= long - rounding
        assert answered[0] == "answered"
        assert not channel._deadlines and not channel._pending
    finally:
        await client.close()


async def test_pending_calls_fail_when_server_stops(server: RemotingServer) -> None:
    client = RemotingClient()
    try:
        call = asyncio.ensure_future(
            client.invoke(addr(server), RemotingCommand.request(HANG), timeout=10)
        )
        # the call is in flight: the server is running its handler when it stops
        await wait_for(lambda: bool(server.hanging), 5, "the call to reach the server")  # type: ignore[attr-defined]
        await server.stop()
        with pytest.raises(RemotingSendRequestError):
            await call
    finally:
        await client.close()


async def test_connect_refused_is_a_clear_error() -> None:
    client = RemotingClient()
    srv = RemotingServer("127.0.0.1", 0)
    await srv.start()
    port = srv.port
    await srv.stop()
    with pytest.raises(RemotingConnectError):
        await client.invoke(f"127.0.0.1:{port}", RemotingCommand.request(ECHO), timeout=1)


async def _raw_exchange(port: int, payload: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(payload)
    await writer.drain()
    try:
        return await asyncio.wait_for(reader.read(65536), 5)
    finally:
        writer.close()


async def test_oversized_and_malformed_frames_close_only_that_connection(
    server: RemotingServer,
) -> None:
    client = RemotingClient()
    try:
        # a healthy connection opened before the bad ones must keep working
        await client.invoke(addr(server), RemotingCommand.request(ECHO), timeout=5)
        assert await _raw_exchange(server.port, struct.pack(">i", 64 * 1024 * 1024)) == b""
        bad_header = b"{not json"
        frame = struct.pack(">ii", 4 + len(bad_header), len(bad_header)) + bad_header
        assert await _raw_exchange(server.port, frame) == b""
        resp = await client.invoke(
            addr(server), RemotingCommand.request(ECHO, {"x": "1"}, b"body"), timeout=5
        )
        assert resp.ext_fields == {"x": "1"} and resp.body_bytes() == b"body"
    finally:
        await client.close()


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(garbage=st.binary(min_size=1, max_size=200))
async def test_fuzzed_frames_never_break_the_server(garbage: bytes) -> None:
    srv = RemotingServer("127.0.0.1", 0)
    srv.register(ECHO, lambda ch, req: req.response(0))
    await srv.start()
    client = RemotingClient()
    try:
        length = struct.pack(">i", len(garbage))
        for payload in (garbage, length + garbage):
            reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
            writer.write(payload)
            await writer.drain()
            writer.write_eof()
            await asyncio.wait_for(reader.read(), 5)  # server answers or closes; never hangs
            writer.close()
        resp = await client.invoke(f"127.0.0.1:{srv.port}", RemotingCommand.request(ECHO), 5)
        assert resp.code == 0
    finally:
        await client.close()
        await srv.stop()


async def _read_frames(reader: asyncio.StreamReader, count: int) -> list[RemotingCommand]:
    frames = []
    for _ in range(count):
        (length,) = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 5))
        frames.append(decode_command(await asyncio.wait_for(reader.readexactly(length), 5)))
    return frames


async def test_many_requests_in_one_read_are_each_answered_once(server: RemotingServer) -> None:
    """Answers made while one read's frames are handled are written together (corked): every
    request still gets exactly its own answer, synchronous ones in request order, an async
    handler's after them, errors and unknown codes included."""
    reqs = [RemotingCommand.request(ECHO, {"n": str(i)}, b"x" * i) for i in range(40)]
    reqs.insert(10, RemotingCommand.request(SLOW, {"delay": "0.01", "n": "slow"}))
    reqs.insert(20, RemotingCommand.request(BOOM))
    reqs.insert(30, RemotingCommand.request(4242))
    # big bodies: the corked answers pass the 64 KiB flush threshold mid-read
    reqs += [RemotingCommand.request(ECHO, {"n": f"big{i}"}, b"y" * 30_000) for i in range(5)]
    payload = b"".join(r.to_bytes() for r in reqs)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        writer.write(payload)
        await writer.drain()
        answers = await _read_frames(reader, len(reqs))
    finally:
        writer.close()
    by_opaque = {a.opaque: a for a in answers}
    assert sorted(by_opaque) == sorted(r.opaque for r in reqs)
    sync_order = [a.opaque for a in answers if a.ext_fields.get("n") != "slow"]
    assert sync_order == [r.opaque for r in reqs if r.code != SLOW]
    for r in reqs:
        a = by_opaque[r.opaque]
        if r.code == ECHO:
            assert a.code == 0 and a.body_bytes() == r.body_bytes()
        elif r.code == BOOM:
            assert a.code == ResponseCode.SYSTEM_ERROR and "kaput" in (a.remark or "")
        elif r.code == 4242:
            assert a.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED


async def test_answers_before_a_bad_frame_in_the_same_read_are_sent_before_the_close(
    server: RemotingServer,
) -> None:
    # more frames in the read than _CORK_MIN_FRAMES, so the answers are corked
    good = [RemotingCommand.request(ECHO, {"n": str(i)}) for i in range(12)]
    bad_header = b"{not json"
    bad = struct.pack(">ii", 4 + len(bad_header), len(bad_header)) + bad_header
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        writer.write(b"".join(r.to_bytes() for r in good) + bad)
        await writer.drain()
        answers = await _read_frames(reader, len(good))
        assert [a.opaque for a in answers] == [r.opaque for r in good]
        assert await asyncio.wait_for(reader.read(), 5) == b""  # then the server closes
    finally:
        writer.close()
