"""Controller-mode keys of ``broker.conf`` (upstream BrokerConfig / MessageStoreConfig names).

    enableControllerMode=true
    controllerAddr=127.0.0.1:9878
    brokerId=1                          # the replica's id in its group (>= 1, unique per group)
    controllerHeartBeatTimeoutMills=10000
    brokerHeartbeatInterval=1000
    allAckInSyncStateSet=true

In controller mode the controller decides the role: ``brokerRole`` only says whether a master
waits for its replicas (SYNC_MASTER, the default here) and the master registers with NameServers
as brokerId 0 while it is master.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from ferrymq.controller.decisions import lease_problem


class ControllerModeSettings(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    enable_controller_mode: bool = False
    controller_addr: str | None = None
    controller_heart_beat_timeout_mills: int = Field(default=10_000, ge=100)
    broker_heartbeat_interval: int = Field(default=1_000, ge=10)
    all_ack_in_sync_state_set: bool = False

    @model_validator(mode="after")
    def _check(self) -> ControllerModeSettings:
        if not self.enable_controller_mode:
            return self
        if not self.controller_addrs:
            raise ValueError("enableControllerMode=true needs controllerAddr (host:port)")
        for addr in self.controller_addrs:
            host, sep, port = addr.rpartition(":")
            if not sep or not host or not port.isdigit():
                raise ValueError(f"controllerAddr {addr!r} is not host:port")
        problem = lease_problem(
            self.controller_heart_beat_timeout_mills, self.broker_heartbeat_interval
        )
        if problem is not None:
            raise ValueError(problem)
        return self

    @property
    def controller_addrs(self) -> list[str]:
        raw = self.controller_addr or ""
        return [a.strip() for a in raw.replace(",", ";").split(";") if a.strip()]
