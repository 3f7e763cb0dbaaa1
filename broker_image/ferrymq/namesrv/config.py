"""NamesrvConfig: NameServer settings with upstream ``namesrv.conf`` names (NamesrvConfig +
NettyServerConfig). Built once at start-up and handed to the services."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from ferrymq.properties import load_config
from ferrymq.remoting.settings import ServerSettings


class NamesrvConfig(ServerSettings):
    """NameServer settings (server-side keys shared with the broker: see ServerSettings)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    listen_port: int = Field(default=9876, ge=0, le=65535)
    # ferrymq extension: the address to bind (upstream always binds every interface)
    bind_address: str = "0.0.0.0"
    rocketmq_home: Path = Field(default_factory=lambda: Path.home() / "ferrymq")
    kv_config_path: Path | None = None
    # upstream: scan every 10 s, a broker is dropped 120 s after its last registration
    scan_not_active_broker_interval: int = Field(default=10_000, ge=10, description="ms")
    broker_channel_expired_time: int = Field(default=120_000, ge=100, description="ms")
    # ferrymq: Prometheus /metrics (the broker's key name); 0 disables it
    metrics_port: int = Field(default=0, ge=0, le=65535)

    @property
    def kv_config_file(self) -> Path:
        return self.kv_config_path or (Path.home() / "namesrv" / "kvConfig.json")


def load_namesrv_config(
    path: Path | None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, str] | None = None,
    also_read_by: tuple[type[BaseModel], ...] = (),
) -> NamesrvConfig:
    """namesrv.conf (+ FERRYMQ_* environment + overrides) -> NamesrvConfig; ConfigError on bad values.

    ``also_read_by``: the other models read from namesrv.conf (ACL, TLS), whose keys are known."""
    return load_config(NamesrvConfig, path, env, overrides, also_read_by).model
