"""RemotingServer: accepts connections and serves requests through one ProcessorTable."""

from __future__ import annotations

import asyncio
import logging

from ferrymq.remoting.channel import Channel
from ferrymq.remoting.frame import MAX_FRAME_SIZE
from ferrymq.remoting.processor import Handler, ProcessorTable
from ferrymq.remoting.tls import ServerTls
from ferrymq.remoting.tls_acceptor import TlsAcceptor

log = logging.getLogger(__name__)


class RemotingServer:
    def __init__(
        self,
        host: str = "0.0.0.0",
        port: int = 0,
        *,
        processors: ProcessorTable | None = None,
        name: str = "server",
        max_frame_size: int = MAX_FRAME_SIZE,
        tls: ServerTls | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.name = name
        self.processors = processors or ProcessorTable()
        self.channels: set[Channel] = set()
        self._max_frame_size = max_frame_size
        self._server: asyncio.Server | TlsAcceptor | None = None
        # TLS modes permissive/enforcing (tls.server.mode); None or disabled: plain TCP
        self.tls = tls

    def register(self, code: int, handler: Handler) -> None:
        self.processors.register(code, handler)

    def _new_channel(self) -> Channel:
        channel = Channel(
            self.processors,
            name=self.name,
            on_close=self.channels.discard,
            max_frame_size=self._max_frame_size,
        )
        self.channels.add(channel)
        return channel

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        if self.tls is not None and self.tls.settings.server_enabled:
            acceptor = TlsAcceptor(self._new_channel, self.tls, name=self.name)
            await acceptor.start(self.host, self.port, backlog=1024)
            self._server = acceptor
        else:
            self._server = await loop.create_server(
                self._new_channel, self.host, self.port, reuse_address=True, backlog=1024
            )
        sockets = self._server.sockets
        if sockets:
            self.port = sockets[0].getsockname()[1]
        log.info("%s listening on %s:%d", self.name, self.host, self.port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for channel in list(self.channels):
            channel.close()
        for channel in list(self.channels):
            await channel.wait_closed()
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
