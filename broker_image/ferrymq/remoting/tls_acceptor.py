"""A listening socket for TLS modes ``permissive`` and ``enforcing`` (upstream TlsModeHandler).

Every accepted connection is peeked at (``MSG_PEEK``, nothing consumed) until its first byte
arrives: 0x16 opens a TLS handshake record, anything else is a remoting frame in plaintext. A TLS
connection is handed to the protocol through ``loop.connect_accepted_socket(ssl=...)`` with the
current (possibly reloaded) context; a plaintext one without TLS in ``permissive`` mode, and is
closed with a log line in ``enforcing`` mode. A connection that sends nothing within the
handshake timeout, or fails its handshake, is closed; the listener keeps serving the others.

It offers the part of ``asyncio.Server`` that RemotingServer uses: ``sockets``, ``close()``,
``wait_closed()``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from collections.abc import Callable

from ferrymq.remoting.tls import ServerTls, TlsMode

log = logging.getLogger(__name__)

TLS_HANDSHAKE_RECORD = 0x16
HANDSHAKE_TIMEOUT_S = 10.0
ACCEPT_RETRY_S = 0.1


def _forget_unconnected(made: list[asyncio.Protocol], exc: Exception | None) -> None:
    """A protocol is built before the handshake; one whose connection was never made is told it
    is lost, so its owner (the server's channel set, which waits for it on stop) forgets it."""
    for protocol in made:
        if not getattr(protocol, "is_open", False):
            protocol.connection_lost(exc)


# as much as upstream's Netty reads before its TlsModeHandler closes a plaintext channel
DRAIN_LIMIT = 64 * 1024


def drain_then_close(conn: socket.socket) -> None:
    """Close a refused connection as upstream does: read what has arrived first (Netty has read
    it), so the peer gets FIN, not the RST that closing with unread data sends. Clients differ by
    it: rocketmq-client 4.9.8 reports a reset channel as "send request ... failed", a closed one
    as a timeout (Apache RocketMQ 5.4.0's answer)."""
    left = DRAIN_LIMIT
    with contextlib.suppress(OSError):
        while left > 0:
            chunk = conn.recv(min(left, 16384))
            if not chunk:
                break
            left -= len(chunk)
    conn.close()


class TlsAcceptor:
    def __init__(
        self,
        protocol_factory: Callable[[], asyncio.Protocol],
        tls: ServerTls,
        *,
        name: str = "server",
        handshake_timeout: float = HANDSHAKE_TIMEOUT_S,
    ) -> None:
        self._factory = protocol_factory
        self.tls = tls
        self.name = name
        self.handshake_timeout = handshake_timeout
        self._sock: socket.socket | None = None
        self._accepting: asyncio.Task[None] | None = None
        self._pending: set[asyncio.Task[None]] = set()
        self._closed = asyncio.Event()

    @property
    def sockets(self) -> tuple[socket.socket, ...]:
        return (self._sock,) if self._sock is not None else ()

    def start(self, sock: socket.socket, *, backlog: int = 1024) -> None:
        """Listen on ``sock`` (bound by the caller) and serve what arrives; the acceptor owns
        the socket from here on."""
        sock.setblocking(False)
        sock.listen(backlog)
        self._sock = sock
        self._accepting = asyncio.get_running_loop().create_task(self._accept_loop(sock))

    async def _accept_loop(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, _ = await loop.sock_accept(sock)
            except asyncio.CancelledError:
                raise
            except OSError as exc:
                if self._sock is None:
                    return
                log.warning("%s: accept failed: %s", self.name, exc)
                # out of descriptors or similar: back off instead of spinning on the error
                await asyncio.sleep(ACCEPT_RETRY_S)
                continue
            conn.setblocking(False)
            task = loop.create_task(self._serve(conn))
            self._pending.add(task)
            task.add_done_callback(self._pending.discard)

    async def _first_byte(self, conn: socket.socket) -> bytes:
        loop = asyncio.get_running_loop()
        fd = conn.fileno()
        while True:
            try:
                return conn.recv(1, socket.MSG_PEEK)
            except BlockingIOError:
                pass
            readable: asyncio.Future[None] = loop.create_future()

            def wake(fut: asyncio.Future[None] = readable) -> None:
                if not fut.done():
                    fut.set_result(None)

            loop.add_reader(fd, wake)
            try:
                await readable
            finally:
                loop.remove_reader(fd)

    async def _serve(self, conn: socket.socket) -> None:
        peer = "?"
        with contextlib.suppress(OSError):
            host, port = conn.getpeername()[:2]
            peer = f"{host}:{port}"
        try:
            first = await asyncio.wait_for(self._first_byte(conn), self.handshake_timeout)
        except (TimeoutError, OSError) as exc:
            log.info("%s: closing %s before its first byte: %s", self.name, peer, exc or "timeout")
            conn.close()
            return
        if not first:  # closed before sending anything
            conn.close()
            return
        is_tls = first[0] == TLS_HANDSHAKE_RECORD
        if not is_tls and self.tls.mode is TlsMode.ENFORCING:
            self.tls.plaintext_refused += 1
            log.warning(
                "%s: refused a plaintext connection from %s (tls.server.mode=enforcing)",
                self.name,
                peer,
            )
            drain_then_close(conn)
            return
        loop = asyncio.get_running_loop()
        made: list[asyncio.Protocol] = []

        def factory() -> asyncio.Protocol:
            protocol = self._factory()
            made.append(protocol)
            return protocol

        try:
            if is_tls:
                await loop.connect_accepted_socket(
                    factory,
                    conn,
                    ssl=self.tls.context(),
                    ssl_handshake_timeout=self.handshake_timeout,
                )
            else:
                await loop.connect_accepted_socket(factory, conn)
        except (OSError, ssl.SSLError, TimeoutError) as exc:
            # the transport owns the socket once handed over and has closed it: closing it
            # here too would close a descriptor number the loop may already have reused
            self.tls.handshake_failures += 1
            log.warning("%s: TLS handshake with %s failed: %s", self.name, peer, exc)
            _forget_unconnected(made, exc)
        except asyncio.CancelledError:  # the server stops mid-handshake
            _forget_unconnected(made, None)
            raise

    def close(self) -> None:
        sock, self._sock = self._sock, None
        if self._accepting is not None:
            self._accepting.cancel()
        for task in list(self._pending):
            task.cancel()
        if sock is not None:
            sock.close()
        self._closed.set()

    async def wait_closed(self) -> None:
        await self._closed.wait()
        tasks = [t for t in (self._accepting, *self._pending) if t is not None]
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
