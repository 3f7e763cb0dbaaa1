"""The gRPC server of the proxy (upstream ``GrpcServer``): grpc.aio on the event loop with the
MessagingService registered once; on the TCP port directly (TLS disabled), or on a private unix
socket behind :class:`~ferrymq.proxy.grpc.port.DualPort` (TLS and plaintext on one port)."""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

import grpc

from ferrymq.proxy.config import ProxyConfig
from ferrymq.proxy.grpc.port import DualPort
from ferrymq.proxy.grpc.service import MessagingService
from ferrymq.proxy.v2 import service_pb2_grpc as sgrpc
from ferrymq.remoting.tls import TlsMode

log = logging.getLogger(__name__)

# upstream grpcMaxInboundMessageSize: 130 MiB (a batch of 4 MiB messages fits)
MAX_INBOUND_MESSAGE_SIZE = 130 * 1024 * 1024


class GrpcServer:
    def __init__(self, config: ProxyConfig, service: MessagingService) -> None:
        self.config = config
        self.service = service
        self._server: grpc.aio.Server | None = None
        self._front: DualPort | None = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self.port = 0

    async def start(self) -> None:
        cfg = self.config
        server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", MAX_INBOUND_MESSAGE_SIZE),
                ("grpc.so_reuseport", 0),
            ]
        )
        sgrpc.add_MessagingServiceServicer_to_server(self.service, server)
        address = f"{cfg.bind_address}:{cfg.grpc_server_port}"
        if cfg.tls_enabled:
            self._tmp = tempfile.TemporaryDirectory(prefix="ferrymq-proxy-")
            path = str(Path(self._tmp.name) / "grpc.sock")
            server.add_insecure_port(f"unix:{path}")
            front = DualPort(
                cfg.bind_address,
                cfg.grpc_server_port,
                path,
                cert=cfg.tls_cert_path,
                key=cfg.tls_key_path,
                enforcing=cfg.tls_server_mode is TlsMode.ENFORCING,
            )
            await server.start()
            self._server = server
            self.port = front.start()
            self._front = front
        else:
            try:
                self.port = server.add_insecure_port(address)
            except RuntimeError as exc:
                raise OSError(f"cannot listen on {address}: {exc}") from None
            await server.start()
            self._server = server
        log.info(
            "gRPC MessagingService on %s:%d (%s)",
            cfg.bind_address,
            self.port,
            f"TLS {cfg.tls_server_mode.value}" if cfg.tls_enabled else "plaintext",
        )

    async def stop(self, grace: float = 5.0) -> None:
        if self._front is not None:
            await self._front.stop()
            self._front = None
        if self._server is not None:
            await self._server.stop(grace)
            self._server = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
