"""NameServer wiring: route table, KV config, processors, housekeeping, remoting server."""

from __future__ import annotations

import asyncio
import logging
import signal

from ferrymq.acl.service import AclService
from ferrymq.acl.settings import AclSettings
from ferrymq.namesrv.config import NamesrvConfig
from ferrymq.namesrv.housekeeping import Housekeeping
from ferrymq.namesrv.kv_config import KVConfigManager
from ferrymq.namesrv.processor import NamesrvProcessor
from ferrymq.namesrv.route_table import RouteTable
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
            config.bind_address, config.listen_port, name="namesrv", tls=self.server_tls
        )
        self.processor.register_to(self.server)
        self.housekeeping = Housekeeping(
            self.routes,
            interval_ms=config.scan_not_active_broker_interval,
            expire_ms=config.broker_channel_expired_time,
        )
        self._metrics_server: object | None = None

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
        await asyncio.to_thread(self.kv.load)
        if self.acl is not None:
            await asyncio.to_thread(self.acl.load)  # AclConfigError: refuse to start
            self.server.processors.set_guard(self.acl.admin_guard)
            self.acl.start()
        await self.server.start()
        self.housekeeping.start()
        log.info("NameServer started on %s:%d", self.config.bind_address, self.server.port)

    async def stop(self) -> None:
        await self.housekeeping.stop()
        self.processor.stop_watching()
        await self.server.stop()
        if self.acl is not None:
            await self.acl.stop()
        log.info("NameServer stopped")


async def serve(
    config: NamesrvConfig,
    ready: asyncio.Future[NamesrvApp] | None = None,
    acl_settings: AclSettings | None = None,
    tls_settings: TlsSettings | None = None,
) -> None:
    """Run a NameServer until SIGTERM or SIGINT."""
    app = NamesrvApp(config, acl_settings, tls_settings)
    await app.start()
    # the line a supervisor (local-cluster, tests) waits for
    print(f"NameServer ready on port {app.port}", flush=True)
    if ready is not None and not ready.done():
        ready.set_result(app)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        await app.stop()
