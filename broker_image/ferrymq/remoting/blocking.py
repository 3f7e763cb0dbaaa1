"""Blocking remoting calls for code without an event loop (the transport of ``SyncProducer``).

A :class:`BlockingConnection` is one TCP connection that carries one call at a time: write the
request, read frames until the response with the request's opaque. It is what a thread calling
``send()`` uses instead of an asyncio channel: the answer wakes the caller's own ``recv``
directly, with no event loop, future or task between them (upstream's Java client blocks the
same way, on a latch).

Failures are those of the asyncio client (``errors.py``): a connect failure, a timeout, a
connection closed mid-call or an out-of-sync stream close the connection (a late answer must
never be read as the next call's), and the pool opens a fresh one on the next call.

A :class:`BlockingPool` hands each calling thread a connection of its own per address, so
threads never wait for each other's round trips.
"""

from __future__ import annotations

import logging
import socket
import ssl
import threading
import time

from ferrymq.remoting.channel import RpcHook
from ferrymq.remoting.client import split_addr
from ferrymq.remoting.command import (
    ONEWAY_FLAG,
    CommandDecodeError,
    RemotingCommand,
    decode_command,
)
from ferrymq.remoting.errors import (
    RemotingConnectError,
    RemotingSendRequestError,
    RemotingTimeoutError,
)
from ferrymq.remoting.frame import MAX_FRAME_SIZE, FrameDecoder, FrameError

log = logging.getLogger(__name__)

# below glibc's mmap threshold: a larger recv buffer costs an mmap/munmap pair per read
_READ_SIZE = 64 * 1024


class BlockingConnection:
    """One connection, one call at a time (the pool never shares one between threads)."""

    def __init__(
        self,
        addr: str,
        *,
        connect_timeout: float = 3.0,
        max_frame_size: int = MAX_FRAME_SIZE,
        rpc_hook: RpcHook | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.addr = addr
        self.connect_timeout = connect_timeout
        self.rpc_hook = rpc_hook
        self.ssl_context = ssl_context
        self._max_frame_size = max_frame_size
        self._sock: socket.socket | None = None
        self._decoder = FrameDecoder(max_frame_size)
        self._frames: list[bytes] = []  # cut but not yet read (more than one arrived in a read)

    @property
    def is_open(self) -> bool:
        return self._sock is not None

    def _connect(self) -> socket.socket:
        host, port = split_addr(self.addr)
        try:
            sock = socket.create_connection((host, port), timeout=self.connect_timeout)
        except OSError as exc:
            raise RemotingConnectError(
                f"cannot connect to {self.addr}: {exc or 'timeout'}"
            ) from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.ssl_context is not None:
            try:
                sock = self.ssl_context.wrap_socket(sock, server_hostname=host)
            except (OSError, ssl.SSLError) as exc:
                sock.close()
                raise RemotingConnectError(
                    f"TLS handshake with {self.addr} failed: {exc} (is TLS enabled on the "
                    "server, tls.server.mode?)"
                ) from None
        self._sock = sock
        self._decoder = FrameDecoder(self._max_frame_size)
        self._frames = []
        return sock

    def close(self) -> None:
        sock, self._sock = self._sock, None
        self._frames = []
        if sock is not None:
            sock.close()

    def invoke(self, request: RemotingCommand, timeout: float) -> RemotingCommand:
        """Send ``request`` and return its response; raises a ``RemotingError`` on failure."""
        if timeout <= 0:
            raise RemotingTimeoutError(
                f"no time left for code {request.code} to {self.addr} (timeout {timeout:.3f}s)"
            )
        deadline = time.monotonic() + timeout
        if self.rpc_hook is not None:
            self.rpc_hook(request)
        sock = self._sock if self._sock is not None else self._connect()
        try:
            sock.settimeout(timeout)
            sock.sendall(b"".join(request.encode()))
            return self._read_response(sock, request, deadline, timeout)
        except RemotingSendRequestError:  # the peer closed mid-answer
            self.close()
            raise
        except TimeoutError:
            self.close()
            raise RemotingTimeoutError(
                f"no response from {self.addr} to code {request.code} within {timeout:.1f}s"
            ) from None
        except OSError as exc:
            self.close()
            raise RemotingSendRequestError(
                f"connection to {self.addr} failed during code {request.code}: {exc}"
            ) from None
        except (FrameError, CommandDecodeError) as exc:
            self.close()
            raise RemotingSendRequestError(
                f"connection to {self.addr} closed: bad frame in answer to code "
                f"{request.code}: {exc}"
            ) from None

    def invoke_oneway(self, request: RemotingCommand) -> None:
        """Write a oneway request; a write that cannot complete within the connect timeout fails."""
        request.flag |= ONEWAY_FLAG
        if self.rpc_hook is not None:
            self.rpc_hook(request)
        sock = self._sock if self._sock is not None else self._connect()
        try:
            sock.settimeout(self.connect_timeout)
            sock.sendall(b"".join(request.encode()))
        except OSError as exc:
            self.close()
            raise RemotingSendRequestError(
                f"oneway code {request.code} to {self.addr} failed: {exc or 'timeout'}"
            ) from None

    def _read_response(
        self, sock: socket.socket, request: RemotingCommand, deadline: float, timeout: float
    ) -> RemotingCommand:
        opaque = request.opaque
        while True:
            while self._frames:
                cmd = decode_command(self._frames.pop(0))
                if cmd.is_response and cmd.opaque == opaque:
                    return cmd
                # a broker-initiated request (nothing registers this connection as a client's,
                # so none is expected) or an answer nobody waits for
                log.debug(
                    "%s: dropped a frame (code %d) not answering %d", self.addr, cmd.code, opaque
                )
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            sock.settimeout(left)
            data = sock.recv(_READ_SIZE)
            if not data:
                raise RemotingSendRequestError(
                    f"{self.addr} closed the connection before answering code {request.code} "
                    f"(timeout {timeout:.1f}s)"
                )
            self._frames.extend(self._decoder.feed(data))


class BlockingPool:
    """Connections per address, one per calling thread at a time; closed together by ``close``."""

    def __init__(
        self,
        *,
        connect_timeout: float = 3.0,
        rpc_hook: RpcHook | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.connect_timeout = connect_timeout
        self.rpc_hook = rpc_hook
        self.ssl_context = ssl_context
        self._idle: dict[str, list[BlockingConnection]] = {}
        self._lock = threading.Lock()
        self._closed = False

    def invoke(self, addr: str, request: RemotingCommand, timeout: float) -> RemotingCommand:
        conn = self._acquire(addr)
        try:
            return conn.invoke(request, timeout)
        finally:
            self._release(conn)

    def invoke_oneway(self, addr: str, request: RemotingCommand) -> None:
        conn = self._acquire(addr)
        try:
            conn.invoke_oneway(request)
        finally:
            self._release(conn)

    def _acquire(self, addr: str) -> BlockingConnection:
        with self._lock:
            if self._closed:
                raise RemotingSendRequestError(f"the connection pool is closed (call to {addr})")
            idle = self._idle.get(addr)
            if idle:
                return idle.pop()
            return BlockingConnection(
                addr,
                connect_timeout=self.connect_timeout,
                rpc_hook=self.rpc_hook,
                ssl_context=self.ssl_context,
            )

    def _release(self, conn: BlockingConnection) -> None:
        with self._lock:
            if self._closed:
                conn.close()
            else:
                self._idle.setdefault(conn.addr, []).append(conn)

    def close_addr(self, addr: str) -> None:
        """Close the idle connections to ``addr`` (its broker went away or moved)."""
        with self._lock:
            for conn in self._idle.pop(addr, []):
                conn.close()

    def close(self) -> None:
        """Close every idle connection; one in use is closed when its call returns."""
        with self._lock:
            self._closed = True
            idle = [c for conns in self._idle.values() for c in conns]
            self._idle.clear()
        for conn in idle:
            conn.close()
