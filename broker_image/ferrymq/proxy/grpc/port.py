"""The gRPC port with TLS and plaintext on one port, as upstream's proxy serves it
(``ProxyAndTlsProtocolNegotiator``): the 5.x Java client speaks TLS by default, the others often
plaintext, and both reach the same port.

gRPC core cannot tell the two apart on one port, so the proxy's gRPC server listens on a private
unix socket and this front owns the TCP port: :class:`~ferrymq.remoting.tls_acceptor.TlsAcceptor`
peeks at each connection's first byte (0x16 = a TLS handshake), terminates TLS when there is one
(ALPN ``h2``, as HTTP/2 over TLS requires), and relays the bytes both ways with flow control.
Certificates: ``tlsCertPath``/``tlsKeyPath``, else (``tlsTestModeEnable``, upstream's default) a
self-signed one made at start, as upstream does.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import tempfile
import typing
from pathlib import Path

from ferrymq.remoting.certs import make_ca, make_cert
from ferrymq.remoting.tls import ServerTls, TlsMode, TlsSettings
from ferrymq.remoting.tls_acceptor import TlsAcceptor

log = logging.getLogger(__name__)


class _H2Tls(ServerTls):
    """The remoting port's reloading context, with ALPN ``h2`` for gRPC."""

    def context(self) -> ssl.SSLContext:
        ctx = super().context()
        if not getattr(ctx, "_ferrymq_h2", False):
            ctx.set_alpn_protocols(["h2"])
            ctx._ferrymq_h2 = True  # type: ignore[attr-defined]
        return ctx


class _Back(asyncio.Protocol):
    """The relay's side towards the gRPC server."""

    def __init__(self, front: _Front) -> None:
        self.front = front

    def data_received(self, data: bytes) -> None:
        if self.front.transport is not None:
            self.front.transport.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.front.transport is not None:
            self.front.transport.close()

    def pause_writing(self) -> None:
        if self.front.transport is not None:
            self.front.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.front.transport is not None:
            self.front.transport.resume_reading()


class _Front(asyncio.Protocol):
    """The relay's side towards the client: connects to the gRPC server's socket on arrival."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.transport: asyncio.Transport | None = None
        self.back: asyncio.Transport | None = None
        self.pending: list[bytes] = []
        self.is_open = False
        self._closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses; they have its methods
        self.transport = typing.cast(asyncio.Transport, transport)
        self.is_open = True
        self.transport.pause_reading()  # until the gRPC side is connected
        asyncio.get_running_loop().create_task(self._connect())

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            back, _ = await loop.create_unix_connection(lambda: _Back(self), self.path)
        except OSError as exc:
            log.warning("gRPC relay: cannot reach the gRPC server at %s: %s", self.path, exc)
            if self.transport is not None:
                self.transport.close()
            return
        if self._closed:
            back.close()
            return
        self.back = back
        for chunk in self.pending:
            back.write(chunk)
        self.pending.clear()
        if self.transport is not None:
            self.transport.resume_reading()

    def data_received(self, data: bytes) -> None:
        if self.back is not None:
            self.back.write(data)
        else:
            self.pending.append(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self.is_open = False
        if self.back is not None:
            self.back.close()

    def pause_writing(self) -> None:
        if self.back is not None:
            self.back.pause_reading()

    def resume_writing(self) -> None:
        if self.back is not None:
            self.back.resume_reading()


def self_signed(directory: Path) -> tuple[Path, Path]:
    """(cert, key) of a certificate for localhost/127.0.0.1 (upstream tlsTestModeEnable)."""
    ca = make_ca(directory, "ferrymq-proxy-ca")
    files = make_cert(directory, ca, "ferrymq-proxy", hosts=("localhost", "127.0.0.1"))
    return files.cert, files.key


class DualPort:
    """The TCP port in front of the gRPC server's unix socket ``socket_path``."""

    def __init__(
        self,
        host: str,
        port: int,
        socket_path: str,
        *,
        cert: Path | None,
        key: Path | None,
        enforcing: bool = False,
    ) -> None:
        self.host = host
        self.port = port
        self.socket_path = socket_path
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if cert is None or key is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="ferrymq-proxy-tls-")
            cert, key = self_signed(Path(self._tmp.name))
        settings = TlsSettings.model_validate(
            {
                "tls.server.mode": (TlsMode.ENFORCING if enforcing else TlsMode.PERMISSIVE).value,
                "tls.server.certPath": str(cert),
                "tls.server.keyPath": str(key),
            }
        )
        self._acceptor = TlsAcceptor(lambda: _Front(socket_path), _H2Tls(settings), name="grpc")

    def start(self) -> int:
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.host, self.port))
        except OSError:
            sock.close()
            raise
        self._acceptor.start(sock)
        self.port = sock.getsockname()[1]
        return self.port

    async def stop(self) -> None:
        self._acceptor.close()
        await self._acceptor.wait_closed()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
