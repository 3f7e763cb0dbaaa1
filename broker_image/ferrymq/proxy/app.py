"""Wiring of the proxy: config -> backend -> processors -> gRPC service -> server; and the
process entry of ``ferrymq proxy`` (serve until SIGTERM)."""

from __future__ import annotations

import asyncio

from ferrymq.acl.service import AclService
from ferrymq.acl.settings import AclSettings
from ferrymq.properties import ConfigError
from ferrymq.proxy.backend import Backend
from ferrymq.proxy.cluster import ClusterBackend
from ferrymq.proxy.config import ProxyConfig, ProxyMode
from ferrymq.proxy.grpc.channels import TelemetryChannels, TransactionCheckRelay
from ferrymq.proxy.grpc.server import GrpcServer
from ferrymq.proxy.grpc.service import MessagingService
from ferrymq.proxy.grpc.settings import ClientSettingsManager
from ferrymq.proxy.processor.consumer import ConsumerProcessor
from ferrymq.proxy.processor.producer import ProducerProcessor
from ferrymq.proxy.processor.transaction import TransactionDataManager, TransactionProcessor
from ferrymq.proxy.receipt_renewal import ReceiptHandleRenewer
from ferrymq.proxy.remoting.server import RemotingProtocolServer
from ferrymq.remoting.eventloop import GracefulShutdown, serve_until_shutdown

SHUTDOWN_GRACE_S = 30.0


class ProxyApp:
    """One proxy: its gRPC server over ``backend`` (cluster mode: every broker group)."""

    def __init__(
        self,
        config: ProxyConfig,
        backend: Backend,
        acl: AclService | None = None,
        remoting: RemotingProtocolServer | None = None,
    ) -> None:
        self.config = config
        # the 4.x remoting port: the standalone proxy's (local mode: the broker serves remoting)
        self.remoting = remoting
        self.backend = backend
        self.acl = acl
        transactions = TransactionDataManager()
        self.settings = ClientSettingsManager(config)
        self.channels = TelemetryChannels()
        producer = ProducerProcessor(config, backend, transactions)
        consumer = ConsumerProcessor(backend, producer)
        self.renewer = ReceiptHandleRenewer(
            config, consumer.change_invisible_time, backend.group_config, self.channels.connected
        )
        self.service = MessagingService(
            config,
            backend,
            producer,
            consumer,
            TransactionProcessor(backend, transactions),
            self.settings,
            self.channels,
            self.renewer,
            acl,
        )
        backend.set_transaction_check_listener(
            TransactionCheckRelay(self.channels, self.settings, transactions)
        )
        self.server = GrpcServer(config, self.service)

    @property
    def port(self) -> int:
        return self.server.port

    async def start(self) -> None:
        if self.acl is not None:
            self.acl.load()
            self.acl.start()
        await self.backend.start()
        await self.server.start()
        if self.remoting is not None:
            await self.remoting.start()
        self.renewer.start()

    async def stop(self) -> None:
        await self.renewer.stop()
        self.channels.close_all()
        if self.remoting is not None:
            await self.remoting.stop()
        await self.server.stop()
        await self.backend.shutdown()
        if self.acl is not None:
            await self.acl.stop()


def cluster_backend(config: ProxyConfig) -> ClusterBackend:
    return ClusterBackend(
        config.namesrv_addrs(),
        config.rocket_mq_cluster_name,
        route_ttl_s=config.topic_route_service_cache_refresh_seconds,
        heartbeat_period_s=config.transaction_heartbeat_period_second,
    )


def acl_service(settings: AclSettings) -> AclService | None:
    """The ACL of the gRPC port when ``aclEnable`` (plain_acl.yml accounts, reloaded on change)."""
    if not settings.acl_enable:
        return None
    return AclService(settings.files, name="proxy", check_interval=settings.acl_reload_interval)


async def serve(
    config: ProxyConfig,
    ready: asyncio.Future[ProxyApp] | None = None,
    acl_settings: AclSettings | None = None,
) -> None:
    """Run a standalone proxy until SIGTERM or SIGINT."""
    if config.proxy_mode is not ProxyMode.CLUSTER:
        raise ConfigError(
            "proxy mode local runs inside the broker (broker.conf enableGrpcProxy=true); "
            "`ferrymq proxy` is the standalone cluster-mode proxy: use -pm cluster"
        )
    backend = cluster_backend(config)
    app = ProxyApp(
        config,
        backend,
        acl_service(acl_settings or AclSettings()),
        RemotingProtocolServer(config, backend),
    )
    shutdown = GracefulShutdown(SHUTDOWN_GRACE_S, name="proxy")

    def serving() -> None:
        if not shutdown.requested.is_set():
            if app.remoting is not None:
                print(f"Proxy ready on remoting port {app.remoting.port}", flush=True)
            print(f"Proxy ready on gRPC port {app.port}", flush=True)
        if ready is not None and not ready.done():
            ready.set_result(app)

    await serve_until_shutdown(app, config.grpc_server_port, shutdown, serving)
