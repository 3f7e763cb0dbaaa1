"""NameServer wiring: route table, KV config, processors, housekeeping, remoting server."""

from __future__ import annotations

import asyncio
import logging

from ferrymq.acl.service import AclService
from ferrymq.acl.settings import AclSettings
from ferrymq.namesrv.admin_processor import NamesrvAdminProcessor
from ferrymq.namesrv.config import NamesrvConfig
from ferrymq.namesrv.housekeeping import Housekeeping
from ferrymq.namesrv.kv_config import KVConfigManager
from ferrymq.namesrv.metrics import NamesrvMetrics
from ferrymq.namesrv.processor import NamesrvProcessor
from ferrymq.namesrv.route_table import RouteTable
from ferrymq.remoting.eventloop import GracefulShutdown, serve_until_shutdown
from ferrymq.remoting.server import RemotingServer
from ferrymq.remoting.tls import ServerTls, TlsSettings

log = logging.getLogger(__name__)


class NamesrvApp:
    def __init__(
        self,
        config: NamesrvConfig,
        acl_settings: AclSettings | None = None,
        tls_settings: TlsSettings | None = None,
    ) -> None:
        self.config = config
        # security (issue 22): admin codes checked against plain_acl.yml; TLS on the port
        self.acl = (
            AclService(
                acl_settings.files,
                name="namesrv",
                check_interval=acl_settings.acl_reload_interval,
            )
            if acl_settings is not None and acl_settings.acl_enable
            else None
        )
        self.server_tls = (
            ServerTls(tls_settings)
            if tls_settings is not None and tls_settings.server_enabled
            else None
        )
        self.routes = RouteTable()
        self.kv = KVConfigManager(config.kv_config_file)
        self.processor = NamesrvProcessor(self.routes, self.kv)
        self.server = RemotingServer(
            config.bind_address,
            config.listen_port,
            name="namesrv",
            limits=config.server_limits(),
            tls=self.server_tls,
        )
        self.processor.register_to(self.server)
        self.housekeeping = Housekeeping(
            self.routes,
            interval_ms=config.scan_not_active_broker_interval,
            expire_ms=config.broker_channel_expired_time,
        )
        # admin codes 304, 311-313, 318, 319; a config update re-tunes housekeeping
        NamesrvAdminProcessor(self.routes, config, self._config_changed).register_to(self.server)
        self.metrics: NamesrvMetrics | None = None

    def _config_changed(self, names: list[str]) -> None:
        self.housekeeping.interval_ms = self.config.scan_not_active_broker_interval
        self.housekeeping.expire_ms = self.config.broker_channel_expired_time

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def addr(self) -> str:
        host = (
            "127.0.0.1" if self.config.bind_address in ("0.0.0.0", "") else self.config.bind_address
        )
        return f"{host}:{self.port}"

    async def start(self) -> None:
        if self.acl is not None:
            await asyncio.to_thread(self.acl.load)  # AclConfigError: refuse to start
            self.server.processors.set_guard(self.acl.admin_guard)
        # the port is taken first (a clash fails fast) but listened on once the KV table is loaded
        self.server.bind()
        await asyncio.to_thread(self.kv.load)
        if self.acl is not None:
            self.acl.start()
        await self.server.start()
        self.housekeeping.start()
        if self.config.metrics_port:
            host = self.config.bind_address or "0.0.0.0"
            self.metrics = NamesrvMetrics(
                host, self.config.metrics_port, self.routes, self.acl, self.server_tls
            )
            self.metrics.start()
        log.info("NameServer started on %s:%d", self.config.bind_address, self.server.port)

    async def stop(self) -> None:
        if self.metrics is not None:
            self.metrics.stop()
            self.metrics = None
        await self.housekeeping.stop()
        self.processor.stop_watching()
        await self.server.stop()
        # the last KV write asked for is on disk before the process goes
        await self.kv.flush()
        if self.acl is not None:
            await self.acl.stop()
        log.info("NameServer stopped")


async def serve(
    config: NamesrvConfig,
    ready: asyncio.Future[NamesrvApp] | None = None,
    acl_settings: AclSettings | None = None,
    tls_settings: TlsSettings | None = None,
) -> None:
    """Run a NameServer until SIGTERM or SIGINT; the stop is bounded by shutdownGraceSeconds
    (a second signal or the grace running out forces the exit, see GracefulShutdown)."""
    app = NamesrvApp(config, acl_settings, tls_settings)
    shutdown = GracefulShutdown(config.shutdown_grace_seconds, name="namesrv")

    def serving() -> None:
        if not shutdown.requested.is_set():
            # the line a supervisor (local-cluster, tests) waits for
            print(f"NameServer ready on port {app.port}", flush=True)
        if ready is not None and not ready.done():
            ready.set_result(app)

    await serve_until_shutdown(app, config.listen_port, shutdown, serving)
