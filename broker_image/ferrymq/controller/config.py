"""ControllerConfig: ``controller.conf`` keys (upstream ControllerConfig + NettyServerConfig names)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from ferrymq.properties import load_config

DEFAULT_CONTROLLER_PORT = 9878
# upstream BrokerConfig.controllerHeartBeatTimeoutMills: used when a heartbeat names none
DEFAULT_HEARTBEAT_TIMEOUT_MS = 10_000


class ControllerConfig(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    listen_port: int = Field(default=DEFAULT_CONTROLLER_PORT, ge=0, le=65535)
    # ferrymq extension, as for the NameServer: the address to bind
    bind_address: str = "0.0.0.0"
    # where the controller's state file lives (upstream: the DLedger/JRaft store directory)
    controller_store_path: Path = Field(default_factory=lambda: Path.home() / "ferrymq-controller")
    # how often brokers whose heartbeats stopped are looked for (upstream default 5 s)
    scan_not_active_broker_interval: int = Field(default=5_000, ge=10, description="ms")
    # ferrymq: where the state lives. "file": one controller, controllerStorePath; "kubernetes":
    # a ConfigMap written with compare-and-swap plus a coordination.k8s.io Lease electing the one
    # controller (of several) that answers and elects (upstream: controllerType DLedger/jRaft)
    controller_store_type: Literal["file", "kubernetes"] = "file"
    # empty: the pod's own namespace
    controller_namespace: str = ""
    controller_state_config_map: str = "ferrymq-controller-state"
    controller_lease_name: str = "ferrymq-controller"
    controller_lease_duration_seconds: int = Field(default=15, ge=2, le=300)
    # upstream's names of a DLedger controller group and of this controller in it; ferrymq's
    # controllers are not DLedger peers, but CONTROLLER_GET_METADATA_INFO (mqadmin
    # getControllerMetaData) reports them as upstream does
    controller_d_leger_group: str = "group1"
    controller_d_leger_self_id: str = "n0"
    # upstream notifyBrokerRoleChanged: push NOTIFY_BROKER_ROLE_CHANGED after an election
    notify_broker_role_changed: bool = True


def load_controller_config(
    path: Path | None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, str] | None = None,
) -> ControllerConfig:
    """controller.conf (+ FERRYMQ_* environment + overrides); ConfigError names bad keys."""
    return load_config(ControllerConfig, path, env, overrides).model
