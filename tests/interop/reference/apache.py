"""Apache RocketMQ 5.4.0 (the oracle) on 127.0.0.1: NameServer and brokers, and the controller,
proxy and mqadmin, each a Java process run from the jars of ``apache/pom.xml``.

    cluster = ApacheCluster(tmp_path, groups=1)
    with cluster:                      # NameServer, then brokers; each waited for via the NameServer
        cluster.namesrv_addr           # "127.0.0.1:<port>"
        cluster.restart_broker(0, kill=True)
        cluster.mqadmin(["topicList"]) # MQAdminStartup -n <namesrv>, stdout as text

The members that tests use (``namesrv_addr``, ``broker_addrs``, ``restart_broker``, ``start``,
``stop``, context manager) have the same names as ferrymq's own
:class:`ferrymq.broker.local_cluster.LocalCluster`, so a test can run against either.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ferrymq.broker.local_cluster import pick_free_port, registered_brokers

from .java import (
    DEFAULT_JVM_OPTS,
    JavaProcess,
    JavaStartError,
    port_open,
    restart_java,
    run_java,
    start_java,
    wait_until,
)
from .tools import resolve_classpath

ROCKETMQ_VERSION = "5.4.0"
NAMESRV_MAIN = "org.apache.rocketmq.namesrv.NamesrvStartup"
BROKER_MAIN = "org.apache.rocketmq.broker.BrokerStartup"
CONTROLLER_MAIN = "org.apache.rocketmq.controller.ControllerStartup"
PROXY_MAIN = "org.apache.rocketmq.proxy.ProxyStartup"
MQADMIN_MAIN = "org.apache.rocketmq.tools.command.MQAdminStartup"
# each jar carries its own logback file; every one is on the classpath, so name the right one
_LOGBACK = {
    NAMESRV_MAIN: "rmq.namesrv.logback.xml",
    BROKER_MAIN: "rmq.broker.logback.xml",
    CONTROLLER_MAIN: "rmq.controller.logback.xml",
    PROXY_MAIN: "rmq.proxy.logback.xml",
    MQADMIN_MAIN: "rmq.tools.logback.xml",
}


def logback_opt(main_class: str) -> list[str]:
    name = _LOGBACK.get(main_class)
    return [f"-Drmq.logback.configurationFile={name}"] if name else []


def properties_text(values: Mapping[str, object]) -> str:
    return "".join(f"{k}={v}\n" for k, v in values.items())


# --- configuration (pure) -------------------------------------------------------------------
def namesrv_properties(host: str, port: int) -> dict[str, str]:
    return {"listenPort": str(port), "bindAddress": host}


def broker_properties(
    *,
    cluster: str,
    broker_name: str,
    broker_id: int,
    host: str,
    listen_port: int,
    namesrv_addr: str,
    store_dir: Path,
    overrides: Mapping[str, object] | None = None,
) -> dict[str, str]:
    """A broker.conf for a test broker: loopback only, small files. Upstream defaults otherwise
    (autoCreateTopicEnable and the rest), since the point is to see upstream's behaviour."""
    conf: dict[str, object] = {
        "brokerClusterName": cluster,
        "brokerName": broker_name,
        "brokerId": broker_id,
        "brokerIP1": host,
        "bindAddress": host,
        "listenPort": listen_port,  # the VIP channel is listenPort - 2, HA listenPort + 1
        "haListenPort": listen_port + 1,
        "namesrvAddr": namesrv_addr,
        "storePathRootDir": store_dir,
        "storePathCommitLog": store_dir / "commitlog",
        # upstream preallocates 1 GiB CommitLog files and 400 MB index files: keep them small
        "mappedFileSizeCommitLog": 8 * 1024 * 1024,
        "mappedFileSizeConsumeQueue": 20 * 30_000,
        "mappedFileSizeConsumeQueueExt": 4 * 1024 * 1024,
        "maxIndexNum": 200_000,
        "maxHashSlotNum": 50_000,
        "mappedFileSizeTimerLog": 8 * 1024 * 1024,
        "timerMaxDelaySec": 3600,  # the timer wheel file is sized by the longest delay
    }
    if broker_id > 0:
        conf["brokerRole"] = "SLAVE"
    conf.update(overrides or {})
    return {k: str(v) for k, v in conf.items()}


def controller_properties(
    *, host: str, port: int, peers: Mapping[str, int], self_id: str, store_dir: Path
) -> dict[str, str]:
    """A controller.conf for one DLedger controller; ``peers`` maps ids (n0, n1, ...) to ports."""
    return {
        "listenPort": str(port),
        "bindAddress": host,
        "controllerDLegerGroup": "group1",
        "controllerDLegerPeers": ";".join(f"{i}-{host}:{p}" for i, p in peers.items()),
        "controllerDLegerSelfId": self_id,
        "controllerStorePath": str(store_dir),
        "mappedFileSize": str(8 * 1024 * 1024),
        "configStorePath": str(store_dir / "controller.properties"),
    }


def proxy_config(
    *, namesrv_addr: str, cluster: str, remoting_port: int, grpc_port: int
) -> dict[str, object]:
    """rmq-proxy.json for ``ProxyStartup -pm cluster`` (the proxy beside the brokers)."""
    return {
        "rocketMQClusterName": cluster,
        "namesrvAddr": namesrv_addr,
        "remotingListenPort": remoting_port,
        "grpcServerPort": grpc_port,
    }


# --- ports ------------------------------------------------------------------------------------
def _bindable(host: str, port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def pick_broker_port(host: str) -> int:
    """A listen port whose VIP (port - 2) and HA (port + 1) neighbours are free too."""
    for _ in range(200):
        port = pick_free_port(host)
        if _bindable(host, port - 2) and _bindable(host, port + 1):
            return port
    raise JavaStartError("no free port block (port - 2, port, port + 1) in 20000-32000")


# --- the cluster --------------------------------------------------------------------------------
@dataclass(slots=True)
class ApacheBroker:
    name: str  # brokerName
    broker_id: int
    port: int
    process: JavaProcess
    controller_mode: bool = False  # enableControllerMode: the controller picks its role and id

    @property
    def pid(self) -> int:
        return self.process.pid


@dataclass
class ApacheCluster:
    """One NameServer and ``groups`` broker groups (``slaves`` slaves each) of Apache RocketMQ."""

    data_dir: Path
    groups: int = 1
    slaves: int = 0
    cluster_name: str = "DefaultCluster"
    host: str = "127.0.0.1"
    broker_conf: Mapping[str, object] = field(default_factory=dict)
    jvm_opts: Sequence[str] = DEFAULT_JVM_OPTS
    start_timeout: float = 180.0
    classpath: str = ""
    namesrv: JavaProcess | None = None
    namesrv_port: int = 0
    brokers: list[ApacheBroker] = field(default_factory=list)
    extras: list[JavaProcess] = field(default_factory=list)  # controllers, proxies
    # files written into every process's run dir (its ROCKETMQ_HOME) before it starts, by path
    # relative to it: e.g. "conf/plain_acl.yml", which the broker's ACL migration reads
    home_files: Mapping[str, str] = field(default_factory=dict)
    # JVM options of the NameServer after ``jvm_opts`` (the last -D of a name wins): e.g. TLS
    # permissive there while the brokers enforce it
    namesrv_jvm_opts: Sequence[str] = ()

    # --- addresses ----------------------------------------------------------------------------
    @property
    def namesrv_addr(self) -> str:
        if self.namesrv is None:
            raise RuntimeError("the Apache cluster is not started")
        return f"{self.host}:{self.namesrv_port}"

    @property
    def broker_addrs(self) -> list[str]:
        return [f"{self.host}:{b.port}" for b in self.brokers]

    def group_name(self, index: int) -> str:
        return f"broker-{chr(ord('a') + index)}"

    # --- lifecycle ----------------------------------------------------------------------------
    def _start(
        self, name: str, main_class: str, args: Sequence[str], extra_opts: Sequence[str] = ()
    ) -> JavaProcess:
        for rel, text in self.home_files.items():
            path = self.data_dir / name / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        return start_java(
            name,
            main_class,
            args,
            classpath=self.classpath,
            run_dir=self.data_dir / name,
            jvm_opts=[*self.jvm_opts, *extra_opts, *logback_opt(main_class)],
        )

    def start(self) -> None:
        self.data_dir = self.data_dir.resolve()
        if not self.classpath:
            self.classpath = resolve_classpath()
        try:
            self.start_namesrv()
            for i in range(self.groups):
                self.start_broker(self.group_name(i), 0)
                for n in range(1, self.slaves + 1):
                    self.start_broker(self.group_name(i), n)
        except BaseException:
            self.stop()
            raise

    def start_namesrv(self) -> JavaProcess:
        self.namesrv_port = pick_free_port(self.host)
        run_dir = self.data_dir / "namesrv"
        run_dir.mkdir(parents=True, exist_ok=True)
        conf = run_dir / "namesrv.conf"
        conf.write_text(properties_text(namesrv_properties(self.host, self.namesrv_port)))
        self.namesrv = self._start(
            "namesrv", NAMESRV_MAIN, ["-c", str(conf)], self.namesrv_jvm_opts
        )
        addr = self.namesrv_addr
        wait_until(
            self.namesrv,
            lambda: registered_brokers(addr) is not None,
            "the NameServer answering GET_BROKER_CLUSTER_INFO",
            self.start_timeout,
        )
        return self.namesrv

    def start_broker(
        self, broker_name: str, broker_id: int = 0, **overrides: object
    ) -> ApacheBroker:
        """Start one broker (extra ``overrides`` go into its broker.conf) and wait until the
        NameServer lists it."""
        port = pick_broker_port(self.host)
        name = f"{broker_name}-{broker_id}"
        run_dir = self.data_dir / name
        run_dir.mkdir(parents=True, exist_ok=True)
        props = broker_properties(
            cluster=self.cluster_name,
            broker_name=broker_name,
            broker_id=broker_id,
            host=self.host,
            listen_port=port,
            namesrv_addr=self.namesrv_addr,
            store_dir=run_dir / "store",
            overrides={**self.broker_conf, **overrides},
        )
        conf = run_dir / "broker.conf"
        conf.write_text(properties_text(props))
        broker = ApacheBroker(
            broker_name,
            broker_id,
            port,
            self._start(name, BROKER_MAIN, ["-c", str(conf)]),
            controller_mode=props.get("enableControllerMode") == "true",
        )
        self.brokers.append(broker)
        self._wait_broker(broker)
        return broker

    def _wait_broker(self, broker: ApacheBroker) -> None:
        addr = f"{self.host}:{broker.port}"
        namesrv = self.namesrv_addr

        def listed() -> bool:
            # the boot line first: after a restart the NameServer may still list the old process
            try:
                booted = "boot success" in broker.process.out_path.read_text(errors="replace")
            except OSError:
                booted = False
            table = registered_brokers(namesrv) if booted else None
            if not table:
                return False
            listed = table.get(broker.name, {})
            if broker.controller_mode:
                # the controller decides the role: the master is listed as 0, a slave under the
                # id the controller gave it
                return addr in listed.values()
            return listed.get(broker.broker_id) == addr

        wait_until(
            broker.process, listed, f"{addr} registered with the NameServer", self.start_timeout
        )

    def restart_broker(self, index: int, *, kill: bool = False) -> ApacheBroker:
        """Stop broker ``index`` (SIGTERM, or SIGKILL when ``kill``) and start it again on the
        same port and store."""
        old = self.brokers[index]
        new = ApacheBroker(
            old.name,
            old.broker_id,
            old.port,
            restart_java(old.process, kill=kill),
            controller_mode=old.controller_mode,
        )
        self.brokers[index] = new
        self._wait_broker(new)
        return new

    def kill_broker(self, index: int) -> None:
        """SIGKILL broker ``index`` and leave it down (``restart_broker`` brings it back)."""
        self.brokers[index].process.stop(kill=True)

    def stop(self) -> None:
        """Proxies and controllers, brokers (they unregister), then the NameServer."""
        for child in [*self.extras, *(b.process for b in self.brokers)]:
            if child.alive():
                child.proc.terminate()
        for child in [*self.extras, *(b.process for b in self.brokers)]:
            child.stop()
        if self.namesrv is not None:
            self.namesrv.stop()

    def __enter__(self) -> ApacheCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- controller, proxy, tools -------------------------------------------------------------
    def start_controller(
        self, self_id: str = "n0", peers: Mapping[str, int] | None = None
    ) -> tuple[JavaProcess, int]:
        """One DLedger controller (``peers``: id -> DLedger port; default a single-node group);
        returns the process and its remoting port, once that port accepts connections.

        A DLedger controller serves brokers and mqadmin on its DLedger peer port (upstream's
        ControllerManager registers its processors on the DLedger server; ``listenPort`` is not
        used), so that is the port returned: ``controllerAddr`` of brokers, ``-a`` of mqadmin."""
        peers = dict(peers or {self_id: pick_free_port(self.host)})
        port = peers[self_id]
        run_dir = self.data_dir / f"controller-{self_id}"
        run_dir.mkdir(parents=True, exist_ok=True)
        conf = run_dir / "controller.conf"
        props = controller_properties(
            host=self.host, port=port, peers=peers, self_id=self_id, store_dir=run_dir / "store"
        )
        conf.write_text(properties_text(props))
        child = self._start(f"controller-{self_id}", CONTROLLER_MAIN, ["-c", str(conf)])
        self.extras.append(child)
        wait_until(
            child, lambda: port_open(self.host, port), f"controller port {port}", self.start_timeout
        )
        return child, port

    def start_proxy(
        self, name: str = "proxy", extra: Mapping[str, object] | None = None
    ) -> tuple[JavaProcess, int, int]:
        """Apache's proxy in cluster mode beside the brokers (``extra``: more rmq-proxy.json
        keys); returns the process, its remoting port and its gRPC port, once both accept
        connections."""
        remoting, grpc = pick_free_port(self.host), pick_free_port(self.host)
        run_dir = self.data_dir / name
        run_dir.mkdir(parents=True, exist_ok=True)
        conf = run_dir / "rmq-proxy.json"
        cfg = proxy_config(
            namesrv_addr=self.namesrv_addr,
            cluster=self.cluster_name,
            remoting_port=remoting,
            grpc_port=grpc,
        )
        conf.write_text(json.dumps({**cfg, **(extra or {})}))
        child = self._start(name, PROXY_MAIN, ["-pc", str(conf), "-pm", "cluster"])
        self.extras.append(child)
        wait_until(
            child,
            lambda: port_open(self.host, remoting) and port_open(self.host, grpc),
            f"proxy ports {remoting}/{grpc}",
            self.start_timeout,
        )
        return child, remoting, grpc

    def mqadmin(self, args: Sequence[str], *, timeout: float = 120) -> Any:
        """``mqadmin <args> -n <namesrv>`` (Apache's MQAdminStartup) to completion; a
        CompletedProcess with text stdout/stderr."""
        return run_mqadmin(
            [*args, "-n", self.namesrv_addr], self.data_dir / "mqadmin", timeout=timeout
        )


def run_mqadmin(
    args: Sequence[str], run_dir: Path, *, timeout: float = 120, classpath: str = ""
) -> Any:
    """Apache's mqadmin (5.4.0) against any NameServer (pass ``-n`` in ``args``): ferrymq's too."""
    return run_java(
        MQADMIN_MAIN,
        args,
        classpath=classpath or resolve_classpath(),
        run_dir=run_dir,
        timeout=timeout,
        jvm_opts=("-Xms64m", "-Xmx256m", "-XX:+UseSerialGC", *logback_opt(MQADMIN_MAIN)),
    )
