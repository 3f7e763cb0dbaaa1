"""HAService: the replication side of one broker, chosen by brokerRole (upstream ``HAService``).

- ASYNC_MASTER / SYNC_MASTER: the HA listener (:class:`~ferrymq.ha.master.HAMaster`) and, for
  SYNC_MASTER, the replica waiter the store awaits after each flush
  (:meth:`HAService.wait_for_replica`, installed with ``store.set_replica_waiter``).
- SLAVE: the HA client (:class:`~ferrymq.ha.slave.HAClient`), pointed at the master's HA address
  that the NameServer returns on registration (:meth:`HAService.update_master_address`).

The broker wires one of these per store; it owns nothing global.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from ferrymq.ha.config import HAConfig, Role
from ferrymq.ha.master import HAMaster, Refusal
from ferrymq.ha.protocol import MetadataVersions
from ferrymq.ha.slave import HAClient
from ferrymq.ha.store_port import ReplicationPort
from ferrymq.ha.sync_wait import GroupTransferService
from ferrymq.store.results import PutMessageStatus

log = logging.getLogger(__name__)


class HAService:
    def __init__(
        self,
        config: HAConfig,
        port: ReplicationPort,
        *,
        metadata_versions: Callable[[], MetadataVersions] | None = None,
    ) -> None:
        self.config = config
        self.port = port  # the store's replication view (metrics read its end offset)
        self.master: HAMaster | None = None
        self.client: HAClient | None = None
        self.transfer: GroupTransferService | None = None
        # controller mode (ha/auto_switch.py) follows every slave report too
        self.report_listeners: list[Callable[[int], None]] = []
        if config.role.is_master:
            # a master tells slaves that ask for it when these move (ha/protocol.py notices)
            self.master = HAMaster(
                port,
                config,
                on_report=self._on_slave_report,
                metadata_versions=metadata_versions,
            )
            self.transfer = GroupTransferService(
                timeout_s=config.sync_flush_timeout_s,
                max_gap=config.max_gap_not_in_sync,
                connection_count=lambda: self.master.connection_count if self.master else 0,
            )
        else:
            self.client = HAClient(port, config)

    @property
    def role(self) -> Role:
        return self.config.role

    async def start(self) -> None:
        if self.master is not None:
            await self.master.start()
            log.info("HA (%s) listening on port %d", self.role.value, self.master.port)
        if self.client is not None:
            self.client.start()

    async def shutdown(self) -> None:
        if self.transfer is not None:
            self.transfer.close()
        if self.master is not None:
            await self.master.shutdown()
        if self.client is not None:
            await self.client.shutdown()

    # --- master ------------------------------------------------------------------------------

    @property
    def listen_port(self) -> int:
        if self.master is None:
            raise RuntimeError("a SLAVE has no HA listener")
        return self.master.port

    @property
    def refusals(self) -> list[Refusal]:
        """Recent slaves the master refused, oldest first, with the reason."""
        return list(self.master.refusals) if self.master is not None else []

    def _on_slave_report(self, offset: int) -> None:
        if self.transfer is not None:
            self.transfer.notify_transfer_some(offset)
        for listener in self.report_listeners:
            listener(offset)

    def notify_new_data(self, *_: object) -> None:
        """New CommitLog bytes exist: wake idle writers now instead of at their 100 ms poll.

        Accepts and ignores any arguments so it can be a store dispatch listener as is.
        """
        if self.master is not None:
            self.master.wakeup_writers()

    async def wait_for_replica(self, end_offset: int) -> PutMessageStatus:
        """SYNC_MASTER replica waiter for the store (upstream ``handleHA``)."""
        if self.transfer is None or self.role is not Role.SYNC_MASTER:
            return PutMessageStatus.PUT_OK
        self.notify_new_data()
        return await self.transfer.wait_for_replica(end_offset)

    @property
    def connection_count(self) -> int:
        return self.master.connection_count if self.master is not None else 0

    # --- slave -------------------------------------------------------------------------------

    def update_master_address(self, ha_address: str | None) -> None:
        """From the NameServer's REGISTER_BROKER answer (haServerAddr of the group's master)."""
        if self.client is not None:
            self.client.update_master_address(ha_address)

    # --- observability -----------------------------------------------------------------------

    def runtime_info(self) -> dict[str, str]:
        """Upstream-style runtime entries (GET_BROKER_RUNTIME_INFO), all strings."""
        info: dict[str, str] = {"brokerRole": self.role.value}
        if self.master is not None:
            info["haConnectionCount"] = str(self.master.connection_count)
            acks = self.master.slave_ack_offsets()
            info["haSlaveAckOffsets"] = ",".join(f"{k}={v}" for k, v in sorted(acks.items()))
            if self.master.refusals:
                info["haLastRefusal"] = self.master.refusals[-1].reason
        if self.transfer is not None:
            info["haPush2SlaveMaxOffset"] = str(self.transfer.push2slave_max_offset)
            info["haSyncTimeouts"] = str(self.transfer.timeouts)
            info["haSlaveNotAvailable"] = str(self.transfer.not_available)
        if self.client is not None:
            info["haMasterAddress"] = self.client.master_address or ""
            info["haConnected"] = str(self.client.connected).lower()
            info["haReportedOffset"] = str(self.client.current_reported_offset)
            info["haMetadataNotices"] = str(self.client.notices_received)
            if self.client.last_error:
                info["haLastError"] = self.client.last_error
        return info
