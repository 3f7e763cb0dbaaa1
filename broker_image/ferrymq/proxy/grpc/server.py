"""The gRPC server of the proxy (upstream ``GrpcServer``): grpc.aio on the event loop, plaintext
or TLS (``tlsKeyPath`` + ``tlsCertPath``), the MessagingService registered once."""

from __future__ import annotations

import logging

import grpc

from ferrymq.properties import ConfigError
from ferrymq.proxy.config import ProxyConfig
from ferrymq.proxy.grpc.service import MessagingService
from ferrymq.proxy.v2 import service_pb2_grpc as sgrpc

log = logging.getLogger(__name__)

# upstream grpcMaxInboundMessageSize: 130 MiB (a batch of 4 MiB messages fits)
MAX_INBOUND_MESSAGE_SIZE = 130 * 1024 * 1024


def server_credentials(config: ProxyConfig) -> grpc.ServerCredentials | None:
    if config.tls_key_path is None or config.tls_cert_path is None:
        return None
    try:
        key = config.tls_key_path.read_bytes()
        cert = config.tls_cert_path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"TLS files of the gRPC port cannot be read: {exc}") from None
    return grpc.ssl_server_credentials([(key, cert)])


class GrpcServer:
    def __init__(self, config: ProxyConfig, service: MessagingService) -> None:
        self.config = config
        self.service = service
        self._server: grpc.aio.Server | None = None
        self.port = 0

    async def start(self) -> None:
        server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", MAX_INBOUND_MESSAGE_SIZE),
                ("grpc.so_reuseport", 0),
            ]
        )
        sgrpc.add_MessagingServiceServicer_to_server(self.service, server)
        address = f"{self.config.bind_address}:{self.config.grpc_server_port}"
        creds = server_credentials(self.config)
        try:
            if creds is None:
                self.port = server.add_insecure_port(address)
            else:
                self.port = server.add_secure_port(address, creds)
        except RuntimeError as exc:
            raise OSError(f"cannot listen on {address}: {exc}") from None
        await server.start()
        self._server = server
        log.info(
            "gRPC MessagingService on %s (port %d, %s)",
            address,
            self.port,
            "TLS" if creds else "plaintext",
        )

    async def stop(self, grace: float = 5.0) -> None:
        if self._server is not None:
            await self._server.stop(grace)
            self._server = None
