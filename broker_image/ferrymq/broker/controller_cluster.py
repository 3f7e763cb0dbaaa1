"""A LocalCluster in controller mode: one NameServer, one controller (``ferrymq controller``) and
broker groups whose replicas (brokerId 1..n) let the controller pick the master and fail over.

Each replica gets a fixed, free listen port and HA port (listen + 1 picked as free too), so a
killed broker restarted on the same conf returns at the same address.
"""

from __future__ import annotations

from ferrymq.broker.local_cluster import (
    BrokerSpec,
    Child,
    LocalCluster,
    broker_conf_text,
    keep_previous_log,
    pick_free_port,
)


class ControllerLocalCluster(LocalCluster):
    def __init__(
        self,
        *args: object,
        all_ack_in_sync_state_set: bool = True,
        heartbeat_timeout_ms: int = 3000,
        heartbeat_interval_ms: int = 300,
        scan_interval_ms: int = 200,
        controller_conf: dict[str, str] | None = None,
        **kwargs: object,
    ) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.all_ack = all_ack_in_sync_state_set
        self.heartbeat_timeout_ms = heartbeat_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.scan_interval_ms = scan_interval_ms
        self.controller_conf = dict(controller_conf or {})  # more controller.conf lines
        self.controller: Child | None = None
        self.controller_port = 0  # picked when its conf is written (kept across restarts)

    @property
    def controller_addr(self) -> str:
        if self.controller is None:
            raise RuntimeError("the cluster is not started")
        return f"{self.host}:{self.controller.port}"

    @property
    def children(self) -> list[Child]:
        return super().children + ([self.controller] if self.controller else [])

    def broker_specs(self) -> list[BrokerSpec]:
        specs = []
        for i in range(self.groups):
            for n in range(1, self.slaves + 2):
                specs.append(BrokerSpec(self.group_name(i), n, pick_free_port(self.host)))
        return specs

    def ha_port(self, spec: BrokerSpec) -> int:
        return pick_free_port(self.host)

    def broker_conf(self, spec: BrokerSpec) -> dict[str, str]:
        conf = super().broker_conf(spec)
        conf.update(
            {
                "brokerRole": "SYNC_MASTER",
                "enableControllerMode": "true",
                "controllerAddr": self.controller_addr,
                "controllerHeartBeatTimeoutMills": str(self.heartbeat_timeout_ms),
                "brokerHeartbeatInterval": str(self.heartbeat_interval_ms),
                "allAckInSyncStateSet": str(self.all_ack).lower(),
                "haListenPort": str(self.ha_port(spec)),
                "fastChannelEnable": "false",
            }
        )
        conf.update(self.extra_conf)
        return conf

    def start_controller(self, *, wait: bool = True) -> Child:
        conf_dir = self.data_dir / "conf"
        conf_dir.mkdir(parents=True, exist_ok=True)
        conf_path = conf_dir / "controller.conf"
        if not conf_path.exists():
            self.controller_port = pick_free_port(self.host)
            conf_path.write_text(
                f"listenPort={self.controller_port}\nbindAddress={self.host}\n"
                f"controllerStorePath={self.data_dir / 'controller'}\n"
                f"scanNotActiveBrokerInterval={self.scan_interval_ms}\n"
                + broker_conf_text(self.controller_conf)
            )
        child = self._spawn("controller", ["controller", "-c", str(conf_path)])
        child.conf_path = conf_path
        # the port is fixed by the conf: brokers may be configured before the controller is up
        child.port = self.controller_port
        if wait:
            self._wait_ready(child)
        self.controller = child
        return child

    def start_all_at_once(self) -> None:
        """Launch the NameServer, the controller and every broker without waiting for any (as a
        StatefulSet's pods start), then wait until each one is ready. Every port is picked up
        front, so each process is configured with the others' addresses before they listen."""
        try:
            if not self.namesrv_port:
                self.namesrv_port = pick_free_port(self.host)
            self.namesrv = self._spawn(
                "namesrv",
                ["namesrv", "--listen-port", str(self.namesrv_port), "--bind", self.host],
            )
            self.namesrv.port = self.namesrv_port
            self.start_controller(wait=False)
            for spec in self.broker_specs():
                self.start_broker(spec, wait=False)
            for child in self.children:
                self._wait_ready(child)
        except BaseException:
            self.stop()
            raise

    def restart_controller(self, *, kill: bool = True) -> Child:
        assert self.controller is not None
        if kill:
            self.controller.proc.kill()
            self.controller.proc.wait(timeout=30)
        else:
            self._terminate([self.controller])
        old = self.controller
        old.log_path = keep_previous_log(old.log_path) or old.log_path
        self.retired.append(old)
        return self.start_controller()

    def start(self) -> None:
        try:
            self.namesrv = self._spawn(
                "namesrv",
                ["namesrv", "--listen-port", str(self.namesrv_port), "--bind", self.host],
            )
            self._wait_ready(self.namesrv)
            self.start_controller()
            for spec in self.broker_specs():
                self.start_broker(spec)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        super().stop()
        if self.controller is not None:
            self._terminate([self.controller])
