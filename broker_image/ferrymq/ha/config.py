"""HAConfig: the replication settings, read once from the broker's MessageStoreConfig.

Upstream keeps these in ``MessageStoreConfig`` (haListenPort, haSendHeartbeatInterval,
haHousekeepingInterval, haTransferBatchSize, haMaxGapNotInSync, haMasterAddress, brokerRole,
syncFlushTimeout); the services here take this small frozen copy at construction instead of
reaching into the big settings object on every turn of a loop.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

# upstream defaults (MessageStoreConfig 4.x)
DEFAULT_HA_LISTEN_PORT = 10912
DEFAULT_HEARTBEAT_INTERVAL_MS = 5000
DEFAULT_HOUSEKEEPING_INTERVAL_MS = 20_000
DEFAULT_TRANSFER_BATCH_SIZE = 32 * 1024
DEFAULT_MAX_GAP_NOT_IN_SYNC = 256 * 1024 * 1024
DEFAULT_SYNC_FLUSH_TIMEOUT_MS = 5000
DEFAULT_SLAVE_SYNC_INTERVAL_MS = 10_000  # upstream BrokerController: syncAll every 10 s


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
    # Static master HA address for a slave (upstream haMasterAddress); normally it comes from
    # the NameServer's answer to the slave's registration instead.
    master_ha_address: str | None = None
    slave_sync_interval_s: float = DEFAULT_SLAVE_SYNC_INTERVAL_MS / 1000
    # The slave's HA client retries a lost or refused connection after this long (seed: 5 s).
    reconnect_interval_s: float = 5.0

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

    @classmethod
    def from_store_config(cls, store_config: Any, **overrides: Any) -> HAConfig:
        """Build from a ``MessageStoreConfig`` (snake_case attributes); missing fields keep defaults."""

        def pick(name: str, default: Any) -> Any:
            value = getattr(store_config, name, None)
            return default if value is None else value

        role_value = pick("broker_role", Role.ASYNC_MASTER)
        role = Role(getattr(role_value, "value", role_value))
        master = pick("ha_master_address", None)
        values: dict[str, Any] = {
            "role": role,
            "listen_port": int(pick("ha_listen_port", DEFAULT_HA_LISTEN_PORT)),
            "heartbeat_interval_s": int(
                pick("ha_send_heartbeat_interval", DEFAULT_HEARTBEAT_INTERVAL_MS)
            )
            / 1000,
            "housekeeping_interval_s": int(
                pick("ha_housekeeping_interval", DEFAULT_HOUSEKEEPING_INTERVAL_MS)
            )
            / 1000,
            "transfer_batch_size": int(pick("ha_transfer_batch_size", DEFAULT_TRANSFER_BATCH_SIZE)),
            "max_gap_not_in_sync": int(pick("ha_max_gap_not_in_sync", DEFAULT_MAX_GAP_NOT_IN_SYNC)),
            "sync_flush_timeout_s": int(pick("sync_flush_timeout", DEFAULT_SYNC_FLUSH_TIMEOUT_MS))
            / 1000,
            "master_ha_address": str(master) if master else None,
        }
        values.update(overrides)
        return cls(**values)
