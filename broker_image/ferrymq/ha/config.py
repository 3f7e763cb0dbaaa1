"""Replication settings: :class:`HASettings` (the broker.conf keys) and :class:`HAConfig` (runtime).

Upstream keeps these in ``MessageStoreConfig`` (haListenPort, haSendHeartbeatInterval,
haHousekeepingInterval, haTransferBatchSize, haMaxGapNotInSync, haMasterAddress, plus brokerRole
and syncFlushTimeout); the services here take a small frozen HAConfig at construction instead of
reaching into a big settings object on every turn of a loop.
"""

from __future__ import annotations

import enum
import ssl
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

# upstream defaults (MessageStoreConfig 4.x)
DEFAULT_HA_LISTEN_PORT = 10912
DEFAULT_HEARTBEAT_INTERVAL_MS = 5000
DEFAULT_HOUSEKEEPING_INTERVAL_MS = 20_000
DEFAULT_TRANSFER_BATCH_SIZE = 32 * 1024
DEFAULT_MAX_GAP_NOT_IN_SYNC = 256 * 1024 * 1024
DEFAULT_SYNC_FLUSH_TIMEOUT_MS = 5000
DEFAULT_SLAVE_SYNC_INTERVAL_MS = 10_000  # upstream BrokerController: syncAll every 10 s
# upstream haMaxTimeSlaveNotCatchup is 15 s; ferrymq: 3 s, so an in-sync replica that stopped
# acknowledging (cut off, frozen) leaves the SyncStateSet and allAckInSyncStateSet writes stall
# under 5 s instead of until the HA link's housekeeping timeout (controller README)
DEFAULT_MAX_TIME_SLAVE_NOT_CATCHUP_MS = 3000


class Role(enum.Enum):
    ASYNC_MASTER = "ASYNC_MASTER"
    SYNC_MASTER = "SYNC_MASTER"
    SLAVE = "SLAVE"

    @property
    def is_master(self) -> bool:
        return self is not Role.SLAVE


class HAConfigError(ValueError):
    """A replication setting with a value that cannot work; the message names the key."""


@dataclass(frozen=True, slots=True)
class HAConfig:
    role: Role = Role.ASYNC_MASTER
    listen_host: str = "0.0.0.0"
    listen_port: int = DEFAULT_HA_LISTEN_PORT  # 0 = any free port (tests)
    heartbeat_interval_s: float = DEFAULT_HEARTBEAT_INTERVAL_MS / 1000
    housekeeping_interval_s: float = DEFAULT_HOUSEKEEPING_INTERVAL_MS / 1000
    transfer_batch_size: int = DEFAULT_TRANSFER_BATCH_SIZE
    max_gap_not_in_sync: int = DEFAULT_MAX_GAP_NOT_IN_SYNC
    sync_flush_timeout_s: float = DEFAULT_SYNC_FLUSH_TIMEOUT_MS / 1000
    max_time_slave_not_catchup_s: float = DEFAULT_MAX_TIME_SLAVE_NOT_CATCHUP_MS / 1000
    # Static master HA address for a slave (upstream haMasterAddress); normally it comes from
    # the NameServer's answer to the slave's registration instead.
    master_ha_address: str | None = None
    slave_sync_interval_s: float = DEFAULT_SLAVE_SYNC_INTERVAL_MS / 1000
    # The slave's HA client retries a lost or refused connection after this long (seed: 5 s).
    reconnect_interval_s: float = 5.0
    # TLS on the HA link (tls.ha.enable): the master's listener and the slave's connection
    server_ssl: ssl.SSLContext | None = None
    client_ssl: ssl.SSLContext | None = None

    def __post_init__(self) -> None:
        checks: list[tuple[str, bool, str]] = [
            ("haListenPort", 0 <= self.listen_port <= 65535, "must be 0..65535"),
            ("haSendHeartbeatInterval", self.heartbeat_interval_s > 0, "must be > 0 ms"),
            (
                "haHousekeepingInterval",
                self.housekeeping_interval_s > self.heartbeat_interval_s,
                "must be longer than haSendHeartbeatInterval, or idle links are cut",
            ),
            ("haTransferBatchSize", self.transfer_batch_size > 0, "must be > 0 bytes"),
            ("haMaxGapNotInSync", self.max_gap_not_in_sync > 0, "must be > 0 bytes"),
            ("syncFlushTimeout", self.sync_flush_timeout_s > 0, "must be > 0 ms"),
            ("reconnect interval", self.reconnect_interval_s > 0, "must be > 0 s"),
        ]
        for key, ok, reason in checks:
            if not ok:
                raise HAConfigError(f"{key}: {reason}")


class HASettings(BaseModel):
    """The HA keys of ``broker.conf`` (upstream MessageStoreConfig names), validated with clear errors.

    Read from the same broker.conf and ``FERRYMQ_<key>`` environment as the broker's other settings.
    ``haListenPort`` unset means the broker's listenPort + 1, as upstream BrokerStartup does.
    """

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    ha_listen_port: int | None = Field(default=None, ge=0, le=65535)
    ha_send_heartbeat_interval: int = Field(default=DEFAULT_HEARTBEAT_INTERVAL_MS, ge=1)
    ha_housekeeping_interval: int = Field(default=DEFAULT_HOUSEKEEPING_INTERVAL_MS, ge=1)
    ha_transfer_batch_size: int = Field(default=DEFAULT_TRANSFER_BATCH_SIZE, ge=1, le=64 << 20)
    ha_max_gap_not_in_sync: int = Field(default=DEFAULT_MAX_GAP_NOT_IN_SYNC, ge=1)
    # controller mode: a SyncStateSet member whose acknowledgements stopped advancing while the
    # master has more is dropped from the set after this long (upstream key)
    ha_max_time_slave_not_catchup: int = Field(
        default=DEFAULT_MAX_TIME_SLAVE_NOT_CATCHUP_MS, ge=100
    )
    ha_master_address: str | None = None
    # ferrymq: how often a slave copies the master's metadata (upstream: fixed 10 s)
    ha_slave_sync_interval: int = Field(default=DEFAULT_SLAVE_SYNC_INTERVAL_MS, ge=100)

    def with_default_port(self, broker_listen_port: int) -> HASettings:
        """Settle an unset haListenPort from the *configured* listenPort (0 stays 0: any port)."""
        if self.ha_listen_port is not None:
            return self
        port = broker_listen_port + 1 if broker_listen_port else 0
        return self.model_copy(update={"ha_listen_port": port})

    @model_validator(mode="after")
    def _check_intervals(self) -> HASettings:
        if self.ha_housekeeping_interval <= self.ha_send_heartbeat_interval:
            raise ValueError(
                f"haHousekeepingInterval ({self.ha_housekeeping_interval} ms) must be longer than "
                f"haSendHeartbeatInterval ({self.ha_send_heartbeat_interval} ms), or idle "
                "replication links are cut between heartbeats"
            )
        if self.ha_master_address is not None:
            host, sep, port = self.ha_master_address.strip().rpartition(":")
            if not sep or not host or not port.isdigit():
                raise ValueError(f"haMasterAddress {self.ha_master_address!r} is not host:port")
        return self


def ha_config_for(
    settings: HASettings,
    *,
    role: Role,
    sync_flush_timeout_ms: int,
    listen_host: str,
) -> HAConfig:
    """The runtime HAConfig of one broker from its settings and store role."""
    port = settings.ha_listen_port or 0
    return HAConfig(
        role=role,
        listen_host=listen_host or "0.0.0.0",
        listen_port=port,
        heartbeat_interval_s=settings.ha_send_heartbeat_interval / 1000,
        housekeeping_interval_s=settings.ha_housekeeping_interval / 1000,
        transfer_batch_size=settings.ha_transfer_batch_size,
        max_gap_not_in_sync=settings.ha_max_gap_not_in_sync,
        sync_flush_timeout_s=sync_flush_timeout_ms / 1000,
        max_time_slave_not_catchup_s=settings.ha_max_time_slave_not_catchup / 1000,
        master_ha_address=settings.ha_master_address,
        slave_sync_interval_s=settings.ha_slave_sync_interval / 1000,
    )
