"""Channel: one TCP connection of the remoting protocol, used by both the server and the client.

A channel cuts frames, parses commands, resolves responses by ``opaque`` from its pending table, and
dispatches requests through a ProcessorTable (servers answer clients; clients answer server-initiated
requests such as CHECK_TRANSACTION_STATE). When it closes, every pending call fails and every
long-polling request still held (``codes.LONG_POLLING_CODES``) is cancelled, so nothing waits
forever on a dead peer; every other request is handled to the end (a send the peer wrote before
closing is stored, as upstream stores it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import socket
import ssl
from collections.abc import Awaitable, Callable
from typing import Any, cast

from ferrymq.remoting.codes import LONG_POLLING_CODES, ResponseCode
from ferrymq.remoting.command import (
    ONEWAY_FLAG,
    Buffer,
    CommandDecodeError,
    RemotingCommand,
    decode_command,
)
from ferrymq.remoting.errors import RemotingSendRequestError, RemotingTimeoutError
from ferrymq.remoting.frame import MAX_FRAME_SIZE, FrameDecoder, FrameError
from ferrymq.remoting.processor import ProcessorTable

log = logging.getLogger(__name__)

# corked answers are written once they reach this many bytes, not only at the end of a read
_CORK_LIMIT = 64 * 1024
# Answers are corked only for a read of more frames than this. With few requests in flight the
# client idles while its answers wait for the rest of the read, and broker and client end up
# working in turn: corking every read made 8 sync threads 0.5x as fast (5 of 5 pairs, bench/
# results/ab_cork_20261128); with many in flight the write and wake-up saved per answer win.
_CORK_MIN_FRAMES = 8

# changes a request in place just before it is written (e.g. adds AccessKey and Signature)
RpcHook = Callable[[RemotingCommand], None]


class BufferBudget:
    """Bytes that the connections of one server hold for frames not yet complete, and the cap on
    their sum: without it, many connections each sending the start of a 16 MiB frame pin memory."""

    __slots__ = ("held", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0


class Channel(asyncio.Protocol):
    def __init__(
        self,
        processors: ProcessorTable,
        *,
        name: str = "remoting",
        on_close: Callable[[Channel], None] | None = None,
        max_frame_size: int = MAX_FRAME_SIZE,
        budget: BufferBudget | None = None,
        rpc_hook: RpcHook | None = None,
    ) -> None:
        self.processors = processors
        # applied to every request this side sends (upstream RPCHook.doBeforeRequest: signing)
        self.rpc_hook = rpc_hook
        self.name = name
        self._on_close = on_close
        self._decoder = FrameDecoder(max_frame_size)
        self._budget = budget
        self._held = 0  # this channel's share of the budget
        self._transport: asyncio.Transport | None = None
        self._pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        # (deadline in loop time, code, timeout) of each pending call; ONE timer, armed for the
        # earliest deadline, replaces a timer started and cancelled by every call
        self._deadlines: dict[int, tuple[float, int, float]] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = math.inf
        # long-polling requests being held: cancelled when the connection closes
        self._tasks: set[asyncio.Task[None]] = set()
        # every other request being handled: run to completion when the connection closes
        self._finishing: set[asyncio.Task[None]] = set()
        # kept: asyncio.get_running_loop() costs a getpid() syscall on every call
        self._loop = asyncio.get_running_loop()
        self._closed = self._loop.create_future()
        self._write_ready = asyncio.Event()
        self._write_ready.set()
        self.remote_addr = "?"
        self.local_addr = "?"
        # free-form slot for the owner (e.g. the broker stores the client id here)
        self.attrs: dict[str, Any] = {}
        # loop time of the last bytes read (idle connections are closed by their server)
        self.last_read = self._loop.time()
        # a TLS connection closed before its first bytes: how a server refuses a client
        # certificate under TLS 1.3 (the alert is not surfaced by asyncio), said in the error
        self._tls = False
        self._got_bytes = False
        # while data_received handles the frames of one read: the buffers of the answers made
        # meanwhile, written together at its end (one write system call, one wake-up of the
        # peer, instead of one per frame; with many requests in flight a read holds many)
        self._corked: list[Buffer] | None = None
        self._corked_bytes = 0

    # --- asyncio.Protocol -----------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        sock = transport.get_extra_info("sockname")
        if peer:
            self.remote_addr = f"{peer[0]}:{peer[1]}"
        if sock:
            self.local_addr = f"{sock[0]}:{sock[1]}"
        self._tls = transport.get_extra_info("ssl_object") is not None
        raw = transport.get_extra_info("socket")
        if raw is not None:
            with contextlib.suppress(OSError):
                raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        self.last_read = self._loop.time()
        self._got_bytes = True
        try:
            frames = self._decoder.feed(data)
        except FrameError as exc:
            log.warning("%s: closing connection from %s: %s", self.name, self.remote_addr, exc)
            self.close()
            return
        budget = self._budget
        if budget is not None and (held := self._decoder.buffered) != self._held:
            budget.held += held - self._held
            self._held = held
            if budget.held > budget.limit and held:
                log.warning(
                    "%s: closing connection from %s: %d bytes of unfinished frames buffered "
                    "by all connections, over the %d byte cap",
                    self.name,
                    self.remote_addr,
                    budget.held,
                    budget.limit,
                )
                self._release_budget()
                self.close()
                return
        if len(frames) > _CORK_MIN_FRAMES:
            self._corked = []
        try:
            for frame in frames:
                try:
                    cmd = decode_command(frame)
                except CommandDecodeError as exc:
                    # no parsable header, no opaque to answer to: close, as upstream does
                    log.warning(
                        "%s: closing connection from %s: %s", self.name, self.remote_addr, exc
                    )
                    self.close()
                    return
                if cmd.is_response:
                    fut = self._pending.pop(cmd.opaque, None)
                    if fut is not None and not fut.done():
                        fut.set_result(cmd)
                    else:
                        log.debug("%s: response for unknown opaque %d", self.name, cmd.opaque)
                else:
                    self._dispatch(cmd)
        finally:
            self._uncork()

    def _uncork(self) -> None:
        """Write what was corked (and stop corking)."""
        corked = self._corked
        self._corked = None
        self._corked_bytes = 0
        if corked and self._transport is not None and not self._transport.is_closing():
            self._transport.writelines(corked)

    def _release_budget(self) -> None:
        if self._budget is not None:
            self._budget.held -= self._held
        self._held = 0

    @property
    def unfinished(self) -> set[asyncio.Task[None]]:
        """Requests still being handled that outlive the connection (all but long polls)."""
        return set(self._finishing)

    @property
    def busy(self) -> bool:
        """A request of this connection is being handled, or a call of ours awaits its answer."""
        return bool(self._tasks or self._finishing or self._pending)

    def _why_closed(self, exc: Exception | None) -> str:
        if isinstance(exc, ssl.SSLError):
            return f" by TLS: {exc.reason or exc}"
        if self._tls and not self._got_bytes and self._pending:
            return (
                " over TLS before any answer: the server may require a client certificate signed "
                "by its tls.server.trustCertPath CA (tls.server.need.client.auth); give one with "
                "tls.client.certPath/keyPath or FERRYMQ_TLS_CERT_PATH/KEY_PATH"
            )
        return ""

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        self._release_budget()
        err = RemotingSendRequestError(
            f"connection to {self.remote_addr} closed{self._why_closed(exc)}"
        )
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(err)
        self._pending.clear()
        self._deadlines.clear()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_at = math.inf
        for task in list(self._tasks):
            task.cancel()
        self._write_ready.set()
        if not self._closed.done():
            self._closed.set_result(None)
        if self._on_close is not None:
            self._on_close(self)

    def pause_writing(self) -> None:
        # the peer reads slower than we write: stop reading its requests until it catches up
        self._write_ready.clear()
        if self._transport is not None:
            self._transport.pause_reading()

    def resume_writing(self) -> None:
        self._write_ready.set()
        if self._transport is not None and not self._transport.is_closing():
            self._transport.resume_reading()

    # --- requests from the peer -----------------------------------------------------------
    def _dispatch(self, request: RemotingCommand) -> None:
        guard = self.processors.guard
        if guard is not None:
            # a refusal (ACL) is answered like any response: the connection stays open
            refusal = guard(self, request)
            if refusal is not None:
                self._answer(request, refusal)
                return
        handler = self.processors.lookup(request.code)
        try:
            result = handler(self, request)
        except Exception as exc:
            self._answer_error(request, exc)
            return
        if isinstance(result, RemotingCommand) or result is None:
            self._answer(request, result)
            return
        task = asyncio.ensure_future(self._await_handler(request, result))
        # A producer may close its connection right after writing its sends (a oneway send; the
        # Go client's SendOneWay, which sets no oneway flag and closes at shutdown): upstream
        # still stores them, and cancelling the puts with the connection would lose them. Only a
        # long poll is of no use once its asker is gone.
        held = request.code in LONG_POLLING_CODES and not request.is_oneway
        tasks = self._tasks if held else self._finishing
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    async def _await_handler(
        self, request: RemotingCommand, pending: Awaitable[RemotingCommand | None]
    ) -> None:
        try:
            response = await pending
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._answer_error(request, exc)
            return
        self._answer(request, response)

    def _answer(self, request: RemotingCommand, response: RemotingCommand | None) -> None:
        if response is None or request.is_oneway:
            return
        self.send(response)

    def _answer_error(self, request: RemotingCommand, exc: Exception) -> None:
        log.exception(
            "%s: handler for code %d from %s failed",
            self.name,
            request.code,
            self.remote_addr,
            exc_info=exc,
        )
        if not request.is_oneway:
            self.send(request.response(ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}"))

    # --- sending --------------------------------------------------------------------------
    @property
    def is_open(self) -> bool:
        return self._transport is not None and not self._transport.is_closing()

    def send(self, cmd: RemotingCommand) -> bool:
        """Write one command; False when the connection is already gone."""
        transport = self._transport
        if transport is None or transport.is_closing():
            return False
        corked = self._corked
        if corked is None:
            transport.writelines(cmd.encode())
            return True
        parts = cmd.encode()
        corked.extend(parts)
        self._corked_bytes += sum(len(p) for p in parts)
        if self._corked_bytes >= _CORK_LIMIT:
            # a big read of many frames: its first answers need not wait for the last ones
            transport.writelines(corked)
            self._corked = []
            self._corked_bytes = 0
        return True

    async def invoke(self, request: RemotingCommand, timeout: float) -> RemotingCommand:
        loop = self._loop
        fut: asyncio.Future[RemotingCommand] = loop.create_future()
        opaque = request.opaque
        if self.rpc_hook is not None:
            self.rpc_hook(request)
        self._pending[opaque] = fut
        if not self.send(request):
            self._pending.pop(opaque, None)
            raise RemotingSendRequestError(f"connection to {self.remote_addr} is closed")
        if timeout <= 0:
            self._pending.pop(opaque, None)
            raise self._timeout_error(request.code, timeout)
        deadline = loop.time() + timeout
        self._deadlines[opaque] = (deadline, request.code, timeout)
        if deadline < self._timer_at:
            self._arm(deadline)
        try:
            return await fut
        finally:
            self._pending.pop(opaque, None)
            self._deadlines.pop(opaque, None)

    def _arm(self, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._loop.call_at(when, self._expire)
        self._timer_at = when

    def _expire(self) -> None:
        """Fail the calls past their deadline and re-arm for the earliest remaining one."""
        self._timer = None
        self._timer_at = math.inf
        now = self._loop.time()
        earliest = math.inf
        expired: list[int] = []
        for opaque, (deadline, _, _) in self._deadlines.items():
            if deadline <= now:
                expired.append(opaque)
            elif deadline < earliest:
                earliest = deadline
        for opaque in expired:
            _, code, timeout = self._deadlines.pop(opaque)
            fut = self._pending.get(opaque)
            if fut is not None and not fut.done():
                fut.set_exception(self._timeout_error(code, timeout))
        if earliest < math.inf:
            # at least 1 ms on: many calls expiring together are swept in batches, not one by one
            self._arm(max(earliest, now + 0.001))

    def _timeout_error(self, code: int, timeout: float) -> RemotingTimeoutError:
        return RemotingTimeoutError(
            f"no response from {self.remote_addr} to code {code} within {timeout:.1f}s"
        )

    def invoke_oneway(self, request: RemotingCommand) -> None:
        request.flag |= ONEWAY_FLAG
        if self.rpc_hook is not None:
            self.rpc_hook(request)
        if not self.send(request):
            raise RemotingSendRequestError(f"connection to {self.remote_addr} is closed")

    async def drain(self) -> None:
        """Wait until the transport accepts more writes (back-pressure for bulk senders)."""
        await self._write_ready.wait()

    def close(self) -> None:
        if self._transport is not None:
            self._uncork()  # answers already made go out before the close
            self._transport.close()

    def abort(self) -> None:
        """Close at once, dropping unsent bytes (a peer that stopped reading blocks a close)."""
        if self._transport is not None:
            self._transport.abort()

    async def wait_closed(self) -> None:
        await asyncio.shield(self._closed)
