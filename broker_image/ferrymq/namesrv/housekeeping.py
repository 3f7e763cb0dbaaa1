"""Expiry of silent brokers (upstream RouteInfoManager.scanNotActiveBroker, run by the NameServer
every 10 s): a broker whose last registration is older than 120 s is removed and its connection closed."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable

from ferrymq.namesrv.route_table import RemovedBroker, RouteTable
from ferrymq.tasks import Periodic

log = logging.getLogger(__name__)


def scan_not_active_brokers(routes: RouteTable, now_ms: int, expire_ms: int) -> list[RemovedBroker]:
    """Remove every expired broker; close its connection. Returns what was removed."""
    removed: list[RemovedBroker] = []
    for addr in routes.expired_brokers(now_ms, expire_ms):
        live = routes.broker_live_table.get(addr)
        channel = live.channel if live is not None else None
        gone = routes.remove_broker_addr(addr)
        log.warning("broker %s expired (no registration for %d ms); removed", addr, expire_ms)
        if channel is not None:
            with contextlib.suppress(Exception):
                channel.close()
        removed.append(gone or RemovedBroker(broker_addr=addr, broker_name=None, cluster=None))
    return removed


class Housekeeping:
    def __init__(
        self,
        routes: RouteTable,
        *,
        interval_ms: int,
        expire_ms: int,
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self.routes = routes
        self.interval_ms = interval_ms
        self.expire_ms = expire_ms
        self.clock_ms = clock_ms
        self._loop = Periodic("broker-expiry-scan", self.scan, lambda: self.interval_ms / 1000)

    def scan(self) -> None:
        scan_not_active_brokers(self.routes, self.clock_ms(), self.expire_ms)

    def start(self) -> None:
        self._loop.start()

    async def stop(self) -> None:
        await self._loop.stop()
