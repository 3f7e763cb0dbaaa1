"""RemotingClient: one channel per peer address, created on first use, replaced when it closes."""

from __future__ import annotations

import asyncio
import logging
import ssl

from ferrymq.remoting.channel import Channel, RpcHook
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.errors import RemotingConnectError
from ferrymq.remoting.processor import ProcessorTable
from ferrymq.tasks import raise_if_cancelling

log = logging.getLogger(__name__)


def split_addr(addr: str) -> tuple[str, int]:
    """``host:port`` -> (host, port); raises ValueError with the address on a malformed one."""
    host, sep, port = addr.strip().rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"address {addr!r} is not host:port")
    return host.strip("[]"), int(port)


class RemotingClient:
    def __init__(
        self,
        processors: ProcessorTable | None = None,
        *,
        connect_timeout: float = 3.0,
        name: str = "client",
        rpc_hook: RpcHook | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.processors = processors or ProcessorTable()
        # credentials (signing hook) and TLS apply to every connection this client opens
        self.rpc_hook = rpc_hook
        self.ssl_context = ssl_context
        self.connect_timeout = connect_timeout
        self.name = name
        self._channels: dict[str, Channel] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def channel(self, addr: str) -> Channel:
        channel = self._channels.get(addr)
        if channel is not None and channel.is_open:
            return channel
        lock = self._locks.setdefault(addr, asyncio.Lock())
        async with lock:
            channel = self._channels.get(addr)
            if channel is not None and channel.is_open:
                return channel
            host, port = split_addr(addr)
            loop = asyncio.get_running_loop()
            ctx = self.ssl_context
            try:
                # asyncio.timeout, not wait_for: on 3.11 wait_for returns the inner result (or
                # raises its OSError) when a cancel arrives as the connect completes, and the
                # cancel is lost (a registration loop then never stopped on SIGTERM)
                async with asyncio.timeout(self.connect_timeout):
                    _, proto = await loop.create_connection(
                        lambda: Channel(
                            self.processors,
                            name=self.name,
                            on_close=self._forget,
                            rpc_hook=self.rpc_hook,
                        ),
                        host,
                        port,
                        ssl=ctx,
                        server_hostname=host if ctx is not None else None,
                        ssl_handshake_timeout=self.connect_timeout if ctx is not None else None,
                    )
            except ssl.SSLError as exc:
                raise_if_cancelling()
                raise RemotingConnectError(
                    f"TLS handshake with {addr} failed: {exc} (does the server speak TLS, "
                    "tls.server.mode, and trust this client?)"
                ) from None
            except (OSError, TimeoutError) as exc:
                raise_if_cancelling()
                hint = (
                    " (TLS was requested: is TLS enabled on the server, tls.server.mode?)"
                    if ctx is not None
                    else ""
                )
                reason = str(exc) or ("timeout" if isinstance(exc, TimeoutError) else repr(exc))
                raise RemotingConnectError(f"cannot connect to {addr}: {reason}{hint}") from None
            proto.attrs["addr"] = addr
            self._channels[addr] = proto
            return proto

    def _forget(self, channel: Channel) -> None:
        addr = channel.attrs.get("addr")
        if addr is not None and self._channels.get(addr) is channel:
            del self._channels[addr]

    def open_channel(self, addr: str) -> Channel | None:
        """The live channel to ``addr``, if there is one (never connects, so no await)."""
        channel = self._channels.get(addr)
        if channel is not None and channel.is_open:
            return channel
        return None

    async def invoke(
        self, addr: str, request: RemotingCommand, timeout: float = 3.0
    ) -> RemotingCommand:
        # the usual live channel without the channel() coroutine (every await of one costs)
        channel = self.open_channel(addr)
        if channel is None:
            channel = await self.channel(addr)
        return await channel.invoke(request, timeout)

    async def invoke_oneway(self, addr: str, request: RemotingCommand) -> None:
        channel = await self.channel(addr)
        channel.invoke_oneway(request)

    def abort_channel(self, addr: str) -> None:
        """Drop the channel to ``addr`` at once, unsent bytes and all (upstream
        ``clientCloseSocketIfTimeout``): a peer that stopped answering leaves the connection in
        TCP retransmission backoff, and calls queued behind it would get through only at the
        next retransmission, tens of seconds after the peer is back. The next call connects
        afresh."""
        channel = self._channels.pop(addr, None)
        if channel is not None:
            channel.abort()

    def close_channel(self, addr: str) -> None:
        channel = self._channels.pop(addr, None)
        if channel is not None:
            channel.close()

    async def close(self) -> None:
        channels = list(self._channels.values())
        self._channels.clear()
        for channel in channels:
            channel.close()
        for channel in channels:
            await channel.wait_closed()
