"""Eager coroutine handlers: answered inline when they never wait, resumed as a task when they do."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from ferrymq.remoting.channel import Channel
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.processor import eager, run_eagerly
from ferrymq.remoting.server import RemotingServer

INLINE, WAITS, FAILS, FAILS_LATER, HELD = 910, 911, 912, 913, 915
HANGS = RequestCode.PULL_MESSAGE  # a long poll: cancelled with its connection


async def test_run_eagerly_returns_the_result_of_a_coroutine_that_never_waits() -> None:
    steps: list[str] = []

    async def inner() -> int:
        steps.append("inner")
        return 7

    async def outer() -> int:
        value = await inner()
        steps.append("outer")
        return value * 6

    assert run_eagerly(outer()) == 42
    assert steps == ["inner", "outer"]


async def test_run_eagerly_resumes_a_suspended_coroutine_with_results_and_errors() -> None:
    loop = asyncio.get_running_loop()
    first: asyncio.Future[int] = loop.create_future()
    second: asyncio.Future[int] = loop.create_future()
    seen: list[object] = []

    async def job() -> int:
        seen.append("started")
        a = await first
        seen.append(a)
        try:
            await second
        except KeyError as exc:
            seen.append(repr(exc))
        await asyncio.sleep(0)  # a bare yield
        return a + 1

    pending = run_eagerly(job())
    assert seen == ["started"]  # ran on the caller's stack up to the first wait
    assert asyncio.iscoroutine(pending)
    task = asyncio.ensure_future(pending)
    await asyncio.sleep(0)
    assert not task.done()
    first.set_result(41)
    await asyncio.sleep(0)
    second.set_exception(KeyError("k"))
    assert await asyncio.wait_for(task, 5) == 42
    assert seen == ["started", 41, "KeyError('k')"]


async def test_run_eagerly_propagates_cancellation_into_the_coroutine() -> None:
    cleaned = asyncio.Event()

    async def job() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            cleaned.set()

    pending = run_eagerly(job())
    assert asyncio.iscoroutine(pending)
    task = asyncio.ensure_future(pending)
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cleaned.is_set()


async def test_run_eagerly_raises_errors_of_the_eager_part() -> None:
    async def job() -> None:
        raise ValueError("bad header")

    with pytest.raises(ValueError, match="bad header"):
        run_eagerly(job())


@pytest.fixture
async def server() -> AsyncIterator[RemotingServer]:
    srv = RemotingServer("127.0.0.1", 0, name="eager-test")
    hung: list[asyncio.Event] = []

    async def inline(ch: Channel, req: RemotingCommand) -> RemotingCommand:
        return req.response(0, ext_fields={"n": req.ext_fields["n"]})

    async def waits(ch: Channel, req: RemotingCommand) -> RemotingCommand:
        await asyncio.sleep(float(req.ext_fields["delay"]))
        return req.response(0, ext_fields={"n": req.ext_fields["n"]})

    async def fails(ch: Channel, req: RemotingCommand) -> RemotingCommand:
        raise RuntimeError("eager part failed")

    async def fails_later(ch: Channel, req: RemotingCommand) -> RemotingCommand:
        await asyncio.sleep(0.01)
        raise RuntimeError("resumed part failed")

    async def hangs(ch: Channel, req: RemotingCommand) -> RemotingCommand:
        done = asyncio.Event()
        hung.append(done)
        try:
            await asyncio.Event().wait()
        finally:
            done.set()
        raise AssertionError

    held: list[tuple[asyncio.Event, list[str]]] = []

    async def held_until_released(ch: Channel, req: RemotingCommand) -> RemotingCommand:
        release, outcome = asyncio.Event(), []
        held.append((release, outcome))
        try:
            await release.wait()
            outcome.append("finished")
        except asyncio.CancelledError:
            outcome.append("cancelled")
            raise
        return req.response(0)

    for code, fn in (
        (INLINE, inline),
        (HELD, held_until_released),
        (WAITS, waits),
        (FAILS, fails),
        (FAILS_LATER, fails_later),
        (HANGS, hangs),
    ):
        srv.register(code, eager(fn))
    srv.hung = hung  # type: ignore[attr-defined]
    srv.held = held  # type: ignore[attr-defined]
    await srv.start()
    yield srv
    await srv.stop()


async def test_eager_handlers_over_a_socket(server: RemotingServer) -> None:
    addr = f"127.0.0.1:{server.port}"
    client = RemotingClient()
    try:
        inline = await client.invoke(addr, RemotingCommand.request(INLINE, {"n": 1}), timeout=5)
        assert (inline.code, inline.ext_fields["n"]) == (0, "1")
        # suspended handlers resume as tasks and may finish out of order
        calls = [
            client.invoke(
                addr, RemotingCommand.request(WAITS, {"delay": (3 - i) * 0.02, "n": i}), timeout=5
            )
            for i in range(3)
        ]
        assert [r.ext_fields["n"] for r in await asyncio.gather(*calls)] == ["0", "1", "2"]
        for code, remark in ((FAILS, "eager part failed"), (FAILS_LATER, "resumed part failed")):
            resp = await client.invoke(addr, RemotingCommand.request(code), timeout=5)
            assert resp.code == ResponseCode.SYSTEM_ERROR
            assert remark in (resp.remark or "")
    finally:
        await client.close()


async def test_suspended_eager_handler_is_cancelled_when_its_connection_closes(
    server: RemotingServer,
) -> None:
    addr = f"127.0.0.1:{server.port}"
    client = RemotingClient()
    try:
        call = asyncio.ensure_future(
            client.invoke(addr, RemotingCommand.request(HANGS), timeout=10)
        )
        hung: list[asyncio.Event] = server.hung  # type: ignore[attr-defined]
        deadline = asyncio.get_running_loop().time() + 5
        while not hung and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        assert hung, "handler never started"
        client.close_channel(addr)
        await asyncio.wait_for(hung[0].wait(), 5)
        with pytest.raises(Exception):  # noqa: B017 - the call fails with the closed connection
            await call
    finally:
        await client.close()


@pytest.mark.parametrize("oneway", [True, False], ids=["oneway", "answered"])
async def test_a_request_is_handled_to_the_end_after_its_connection_closes(
    server: RemotingServer, oneway: bool
) -> None:
    """A producer may close right after its sends (oneway, or the Go client's SendOneWay, which
    sets no oneway flag and closes at shutdown); upstream still handles every request it read (a
    send is stored), so a suspended handler that is not a long poll outlives its connection."""
    addr = f"127.0.0.1:{server.port}"
    loop = asyncio.get_running_loop()
    held: list[tuple[asyncio.Event, list[str]]] = server.held  # type: ignore[attr-defined]
    client = RemotingClient()
    try:
        if oneway:
            await client.invoke_oneway(addr, RemotingCommand.request(HELD))
        else:
            call = asyncio.ensure_future(
                client.invoke(addr, RemotingCommand.request(HELD), timeout=10)
            )
        deadline = loop.time() + 5
        while not held and loop.time() < deadline:
            await asyncio.sleep(0.01)
        assert held, "handler never started"
        client.close_channel(addr)
        deadline = loop.time() + 5
        while server.channels and loop.time() < deadline:
            await asyncio.sleep(0.01)
        assert not server.channels, "the server kept the connection"
        release, outcome = held[0]
        release.set()
        deadline = loop.time() + 5
        while not outcome and loop.time() < deadline:
            await asyncio.sleep(0.01)
        assert outcome == ["finished"]
        if not oneway:
            with pytest.raises(Exception):  # noqa: B017 - its caller saw the connection close
                await call
    finally:
        await client.close()


async def test_stop_lets_a_request_in_hand_finish_and_cancels_it_past_the_bound(
    server: RemotingServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server stopping (the broker before its store) waits for the requests it read to finish,
    up to FINISH_TIMEOUT_S, then cancels them: none runs on after stop() returned."""
    import ferrymq.remoting.server as server_module

    monkeypatch.setattr(server_module, "FINISH_TIMEOUT_S", 0.5)
    addr = f"127.0.0.1:{server.port}"
    loop = asyncio.get_running_loop()
    held: list[tuple[asyncio.Event, list[str]]] = server.held  # type: ignore[attr-defined]
    client = RemotingClient()
    try:
        for _ in range(2):
            await client.invoke_oneway(addr, RemotingCommand.request(HELD))
        deadline = loop.time() + 5
        while len(held) < 2 and loop.time() < deadline:
            await asyncio.sleep(0.01)
        assert len(held) == 2, "handlers never started"
        first, second = held
        loop.call_later(0.1, first[0].set)  # finishes within the bound; the second never does
        await server.stop()
        assert first[1] == ["finished"] and second[1] == ["cancelled"]
    finally:
        await client.close()
