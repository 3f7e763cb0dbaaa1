"""RemotingServer: accepts connections and serves requests through one ProcessorTable.

Two steps, so a service listens only once it can serve (upstream starts its Netty server last):
:meth:`bind` takes the port (the OS picks one for port 0, and the owner can publish it while
still initialising; a connect meanwhile is refused by the kernel, nothing answers "busy"), and
:meth:`start` listens. Connections idle longer than ``channel_max_idle_seconds`` are closed, and
all connections together may hold at most ``max_unfinished_frame_bytes`` for frames not yet
complete (see ServerLimits). With TLS (``tls.server.mode`` permissive/enforcing) the bound socket
is served by a :class:`TlsAcceptor` instead of a plain asyncio server.
"""

from __future__ import annotations

import asyncio
import logging
import socket

from ferrymq.remoting.channel import BufferBudget, Channel
from ferrymq.remoting.frame import MAX_FRAME_SIZE
from ferrymq.remoting.processor import Handler, ProcessorTable
from ferrymq.remoting.settings import ServerLimits
from ferrymq.remoting.tls import ServerTls
from ferrymq.remoting.tls_acceptor import TlsAcceptor
from ferrymq.tasks import Periodic

log = logging.getLogger(__name__)

# how long stop() lets the requests of closed connections finish before cancelling them
FINISH_TIMEOUT_S = 3.0


def idle_channels(channels: set[Channel], now: float, max_idle: float) -> list[Channel]:
    """The channels to close: nothing read for ``max_idle`` seconds and nothing in progress."""
    return [c for c in channels if now - c.last_read >= max_idle and not c.busy]


class RemotingServer:
    def __init__(
        self,
        host: str = "0.0.0.0",
        port: int = 0,
        *,
        processors: ProcessorTable | None = None,
        name: str = "server",
        max_frame_size: int = MAX_FRAME_SIZE,
        limits: ServerLimits | None = None,
        tls: ServerTls | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.name = name
        self.processors = processors or ProcessorTable()
        self.channels: set[Channel] = set()
        self.limits = limits or ServerLimits(max_frame_size=max_frame_size)
        self._max_frame_size = min(max_frame_size, self.limits.max_frame_size)
        self.budget = BufferBudget(self.limits.max_unfinished_frame_bytes)
        self._sock: socket.socket | None = None
        self._server: asyncio.Server | TlsAcceptor | None = None
        # TLS modes permissive/enforcing (tls.server.mode); None or disabled: plain TCP
        self.tls = tls
        # a scan cadence, not synchronisation: a channel is closed at most a quarter late
        max_idle = self.limits.channel_max_idle_seconds
        self._idle_scan = Periodic(
            f"{self.name}-idle-scan", self._close_idle, min(max(max_idle / 4, 0.05), 5.0)
        )
        self.idle_closed = 0

    def register(self, code: int, handler: Handler) -> None:
        self.processors.register(code, handler)

    def _new_channel(self) -> Channel:
        channel = Channel(
            self.processors,
            name=self.name,
            on_close=self.channels.discard,
            max_frame_size=self._max_frame_size,
            budget=self.budget,
        )
        self.channels.add(channel)
        return channel

    def bind(self) -> int:
        """Take the port without listening yet; returns it (the OS's pick for port 0)."""
        if self._sock is not None:
            return self.port
        infos = socket.getaddrinfo(
            self.host or None,
            self.port,
            type=socket.SOCK_STREAM,
            flags=socket.AI_PASSIVE,
        )
        family, kind, proto, _, addr = infos[0]
        sock = socket.socket(family, kind, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(addr)
        except OSError:
            sock.close()
            raise
        sock.setblocking(False)
        self._sock = sock
        self.port = sock.getsockname()[1]
        return self.port

    async def start(self) -> None:
        """Listen (binding first if :meth:`bind` was not called) and start the idle scan."""
        self.bind()
        assert self._sock is not None
        loop = asyncio.get_running_loop()
        if self.tls is not None and self.tls.settings.server_enabled:
            acceptor = TlsAcceptor(self._new_channel, self.tls, name=self.name)
            acceptor.start(self._sock, backlog=1024)
            self._server = acceptor
        else:
            self._server = await loop.create_server(
                self._new_channel, sock=self._sock, backlog=1024
            )
        self._sock = None  # owned by the asyncio server (or the TLS acceptor) from here on
        if self.limits.channel_max_idle_seconds > 0:
            self._idle_scan.start()
        log.info("%s listening on %s:%d", self.name, self.host, self.port)

    def _close_idle(self) -> None:
        max_idle = self.limits.channel_max_idle_seconds
        now = asyncio.get_running_loop().time()
        for channel in idle_channels(self.channels, now, max_idle):
            log.info(
                "%s: closing connection from %s: idle for over %ss",
                self.name,
                channel.remote_addr,
                max_idle,
            )
            self.idle_closed += 1
            channel.close()

    async def stop(self) -> None:
        await self._idle_scan.stop()
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self._server is not None:
            self._server.close()
        unfinished = {task for channel in self.channels for task in channel.unfinished}
        for channel in list(self.channels):
            channel.close()
        # a close waits for unsent bytes; a peer that stopped reading would hold it for ever
        closing = [asyncio.ensure_future(c.wait_closed()) for c in list(self.channels)]
        if closing:
            _, late = await asyncio.wait(closing, timeout=1.0)
            for channel in list(self.channels):
                channel.abort()
            if late:
                await asyncio.wait(late)
        if unfinished:
            # requests read before the close (a send) are handled to the end, as upstream's
            # executors finish their tasks before its store shuts down; bounded
            _, stuck = await asyncio.wait(unfinished, timeout=FINISH_TIMEOUT_S)
            for task in stuck:
                task.cancel()
            if stuck:
                log.warning("%s: %d request(s) cancelled at shutdown", self.name, len(stuck))
                await asyncio.wait(stuck)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
