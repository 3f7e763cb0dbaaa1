"""LocalCluster: one NameServer and N broker groups as local child processes running the same code
as production (``python -m ferrymq.cli.main namesrv|broker``), for ``ferrymq local-cluster`` and for
tests that need real processes.

Children are started in order (NameServer first, its port read from its "ready on port" line), each
writes to ``<data-dir>/logs/<name>.log`` (a restarted child's earlier log is kept as
``<name>.<n>.log``, so how it ended stays readable), and all are stopped by PID: SIGTERM (graceful: brokers
unregister, flush and remove their abort files), then SIGKILL after a grace period. On Linux a
child also gets SIGTERM from the kernel when its supervisor dies without stopping it
(:func:`die_with_parent`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import ctypes
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ferrymq.store.config import MessageStoreConfig

_READY = re.compile(rb"ready on port (\d+)")
_SIZE = re.compile(r"\s*(\d+)\s*([kmg]?)(?:i?b)?\s*", re.IGNORECASE)
_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}

# A dev cluster's CommitLog files: each broker preallocates (posix_fallocate) one whole file at
# start, so upstream's 1 GiB would reserve 4 GiB of disk for the default 2 groups x (master + slave).
LOCAL_COMMITLOG_FILE_SIZE = 128 * 1024 * 1024


PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent(sig: int = signal.SIGTERM) -> Callable[[], None] | None:
    """A ``preexec_fn`` making the kernel send ``sig`` to the child when the thread that started
    it exits (Linux ``PR_SET_PDEATHSIG``), so children of a hard-killed supervisor or test run
    shut down instead of living on; None where the call does not exist (then nothing changes).

    The signal follows the *thread*: spawn from a thread that outlives the child (the main
    thread, or an executor thread that lives as long as its event loop). The child checks its
    parent once more after the call, for a parent that died in between.
    """
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved here: the child only calls it
    parent = os.getpid()

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), sig)

    return preexec


# the thread that forks children started off the main thread (see popen_with_parent); created on
# first use, it lives until the interpreter exits
_SPAWNER: concurrent.futures.ThreadPoolExecutor | None = None
_SPAWNER_LOCK = threading.Lock()


def _spawner() -> concurrent.futures.ThreadPoolExecutor:
    global _SPAWNER
    with _SPAWNER_LOCK:
        if _SPAWNER is None:
            _SPAWNER = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="spawner")
        return _SPAWNER


def popen_with_parent(argv: Any, **kwargs: Any) -> subprocess.Popen[Any]:
    """``subprocess.Popen(argv, **kwargs)`` whose child gets SIGTERM when this process dies
    (:func:`die_with_parent`).

    The kernel ties PR_SET_PDEATHSIG to the forking *thread*: a child forked on a short-lived
    thread is terminated when that thread ends. A broker restarted through
    ``asyncio.to_thread`` in a test got SIGTERM when the test's event loop closed its executor
    (Apache's broker unregistered itself right after the restart test, and the next test found
    no master). So a call from any thread but the main one forks on one thread that lives as
    long as the process.
    """
    if "preexec_fn" in kwargs:
        raise TypeError("popen_with_parent sets preexec_fn itself")

    def spawn() -> subprocess.Popen[Any]:
        return subprocess.Popen(argv, preexec_fn=die_with_parent(), **kwargs)

    if threading.current_thread() is threading.main_thread():
        return spawn()
    return _spawner().submit(spawn).result()


def describe_exit(returncode: int | None) -> str:
    """A Popen return code in words: None -> "running", -9 -> "killed by SIGKILL", 3 -> "exit
    code 3" (a death reported as a bare number hides a signal such as SIGBUS)."""
    if returncode is None:
        return "running"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"killed by {name}"
    return f"exit code {returncode}"


class ClusterStartError(RuntimeError):
    """A child did not come up; the message includes the tail of its log."""


@dataclass(slots=True)
class Child:
    name: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    port: int = 0
    conf_path: Path | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def ending(self) -> str:
        """How the process ended, for reports: "running", "exit code N" or "killed by SIGx"."""
        return describe_exit(self.proc.poll())

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


@dataclass(slots=True)
class BrokerSpec:
    """One broker process: name, id and its broker.conf lines."""

    group: str
    broker_id: int
    listen_port: int
    conf: dict[str, str] = field(default_factory=dict)


def pick_free_port(host: str) -> int:
    """A port that is free now, below the kernel's ephemeral range: a broker restarted on the same
    port must not find it taken by some client's outgoing connection (which port 0 would risk)."""
    for _ in range(200):
        port = random.randrange(20000, 32000)
        with socket.socket() as probe:
            try:
                probe.bind((host, port))
            except OSError:
                continue
            return port
    raise ClusterStartError("no free port found in 20000-32000")


def pick_free_ports(host: str, count: int) -> list[int]:
    """``count`` distinct ports, each free now (:func:`pick_free_port`): one process given several
    ports must not be handed the same one twice."""
    ports: list[int] = []
    while len(ports) < count:
        port = pick_free_port(host)
        if port not in ports:
            ports.append(port)
    return ports


def parse_size(text: str) -> int:
    """``"128M"``/``"128MiB"``/``"1g"``/``"134217728"`` -> bytes (binary units). Pure; ValueError
    names the accepted forms or the store's limit that the size breaks."""
    match = _SIZE.fullmatch(text)
    if match is None:
        raise ValueError(
            f"{text!r} is not a size: use bytes or a number with K, M or G (e.g. 128M)"
        )
    size = int(match.group(1)) * _UNITS[match.group(2).lower()]
    try:
        # the broker's own limits, so the cluster never starts brokers that refuse their conf
        MessageStoreConfig.model_validate({"mappedFileSizeCommitLog": size})
    except ValidationError as exc:
        reason = exc.errors()[0].get("msg", "invalid")
        raise ValueError(f"{text!r} = {size} bytes: mappedFileSizeCommitLog {reason}") from None
    return size


async def _registered(namesrv_addr: str) -> dict[str, dict[int, str]]:
    from ferrymq.client.admin import AdminClient  # here: the client package imports the broker's

    async with AdminClient(namesrv_addr, timeout=3.0) as admin:
        info = await admin.cluster_info()
    return {name: dict(data.broker_addrs) for name, data in info.broker_addr_table.items()}


def registered_brokers(namesrv_addr: str) -> dict[str, dict[int, str]] | None:
    """brokerName -> {brokerId: addr} as the NameServer answers GET_BROKER_CLUSTER_INFO; None
    while it does not answer. Callable from sync code, also from a thread that runs a loop."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        try:
            return pool.submit(asyncio.run, _registered(namesrv_addr)).result()
        except Exception:  # not answering yet, whatever the client raised
            return None


def keep_previous_log(log_path: Path) -> Path | None:
    """Move an existing ``<name>.log`` to ``<name>.<n>.log`` (n = 1, 2, ...) and return where: a
    restarted child starts a fresh log, and what its predecessor wrote (how it died) stays for
    the post-mortem."""
    if not log_path.exists():
        return None
    n = 1
    while (target := log_path.with_name(f"{log_path.stem}.{n}.log")).exists():
        n += 1
    log_path.rename(target)
    return target


def broker_conf_text(values: dict[str, str]) -> str:
    return "".join(f"{k}={v}\n" for k, v in values.items())


# A broker uses four ports: its VIP channel (listenPort - 2), listenPort and its HA port
# (listenPort + 1), with listenPort - 1 left free. Slave n of a group listens at the master's
# port + 4n, so no broker's VIP port is another broker's port: a client whose VIP channel is on
# (listenPort - 2) must reach the broker it chose, not its neighbour. (Slaves at master + 2n,
# as before, put a slave's VIP port on its master, and a dashboard showed the master's data in
# the slave's row.)
SLAVE_PORT_STEP = 4


def group_port_step(slaves: int) -> int:
    """Ports between two groups' masters: 10 (upstream's 10911, 10921...) while a group's
    ports, from its master's VIP port to its last slave's HA port, fit; else 20, 30... Pure."""
    span = SLAVE_PORT_STEP * slaves + 4  # master VIP port .. last slave's HA port, plus a gap
    return 10 * -(-span // 10)


class LocalCluster:
    def __init__(
        self,
        data_dir: Path,
        *,
        groups: int = 2,
        slaves: int = 0,
        cluster_name: str = "DefaultCluster",
        host: str = "127.0.0.1",
        namesrv_port: int = 9876,
        broker_port: int = 10911,
        flush_disk_type: str = "ASYNC_FLUSH",
        mapped_file_size_commit_log: int | None = None,
        extra_conf: dict[str, str] | None = None,
        namesrv_conf: dict[str, str] | None = None,
        python: str = sys.executable,
        start_timeout: float = 60.0,
    ) -> None:
        if groups < 1:
            raise ValueError("at least one broker group is needed")
        self.data_dir = data_dir.resolve()
        self.groups = groups
        if slaves < 0:
            raise ValueError("the number of slaves per group cannot be negative")
        self.slaves = slaves
        self.cluster_name = cluster_name
        self.host = host
        self.namesrv_port = namesrv_port
        self.broker_port = broker_port
        self.flush_disk_type = flush_disk_type
        self.mapped_file_size_commit_log = mapped_file_size_commit_log
        self.extra_conf = dict(extra_conf or {})
        # namesrv.conf lines (TLS, ACL); none: the NameServer runs from its flags alone
        self.namesrv_conf = dict(namesrv_conf or {})
        self.python = python
        self.start_timeout = start_timeout
        self.namesrv: Child | None = None
        self.brokers: list[Child] = []
        # earlier incarnations of restarted children (their logs are kept as <name>.<n>.log)
        self.retired: list[Child] = []

    # --- addresses --------------------------------------------------------------------------
    @property
    def namesrv_addr(self) -> str:
        if self.namesrv is None:
            raise RuntimeError("the cluster is not started")
        return f"{self.host}:{self.namesrv.port}"

    @property
    def broker_addrs(self) -> list[str]:
        return [f"{self.host}:{b.port}" for b in self.brokers]

    @property
    def children(self) -> list[Child]:
        return ([self.namesrv] if self.namesrv else []) + self.brokers

    def group_name(self, index: int) -> str:
        return f"broker-{chr(ord('a') + index)}" if index < 26 else f"broker-{index}"

    def broker_specs(self) -> list[BrokerSpec]:
        specs = []
        step = group_port_step(self.slaves)
        for i in range(self.groups):
            # upstream convention: 10911, 10921, ... (0 = pick free ones, for tests: a fixed
            # port lets a restarted broker come back at the same address)
            port = self.broker_port + step * i if self.broker_port else pick_free_port(self.host)
            specs.append(BrokerSpec(self.group_name(i), 0, port))
            # HA integration: slaves of the group (brokerId 1..n) after their master
            for n in range(1, self.slaves + 1):
                slave_port = (
                    port + SLAVE_PORT_STEP * n if self.broker_port else pick_free_port(self.host)
                )
                spec = BrokerSpec(self.group_name(i), n, slave_port, {"brokerRole": "SLAVE"})
                specs.append(spec)
        return specs

    def broker_conf(self, spec: BrokerSpec) -> dict[str, str]:
        conf = {
            "brokerClusterName": self.cluster_name,
            "brokerName": spec.group,
            "brokerId": str(spec.broker_id),
            "brokerIP1": self.host,
            "bindAddress": self.host,
            "listenPort": str(spec.listen_port),
            "namesrvAddr": self.namesrv_addr,
            "storePathRootDir": str(self.data_dir / f"{spec.group}-{spec.broker_id}" / "store"),
            "flushDiskType": self.flush_disk_type,
        }
        # upstream: haListenPort = listenPort + 1; with picked ports, pick that one too
        ha_port = spec.listen_port + 1 if self.broker_port else pick_free_port(self.host)
        conf["haListenPort"] = str(ha_port)
        if not self.broker_port:
            # listenPort - 2 (the VIP channel) is not known to be free for picked ports
            conf["fastChannelEnable"] = "false"
        if self.mapped_file_size_commit_log:
            conf["mappedFileSizeCommitLog"] = str(self.mapped_file_size_commit_log)
        conf.update(self.extra_conf)
        conf.update(spec.conf)
        return conf

    # --- lifecycle --------------------------------------------------------------------------
    def command_prefix(self, name: str) -> list[str]:
        """What runs child ``name``'s command (a subclass: ``ip netns exec NS``)."""
        return []

    def _spawn(self, name: str, args: list[str]) -> Child:
        logs = self.data_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        log_path = logs / f"{name}.log"
        keep_previous_log(log_path)
        out = open(log_path, "wb")  # noqa: SIM115 - handed to the child, closed below
        env = dict(os.environ)
        env.pop("NAMESRV_ADDR", None)  # each child gets its address explicitly
        try:
            # a SIGKILLed supervisor (or test run) still takes its children down
            proc = popen_with_parent(
                [*self.command_prefix(name), self.python, "-m", "ferrymq.cli.main", *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,  # Ctrl-C in the terminal reaches the supervisor only
            )
        finally:
            out.close()
        return Child(name, proc, log_path)

    def _wait_ready(self, child: Child) -> None:
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            try:
                match = _READY.search(child.log_path.read_bytes())
            except OSError:
                match = None
            if match:
                child.port = int(match.group(1))
                return
            if not child.alive():
                raise ClusterStartError(
                    f"{child.name} exited with code {child.proc.returncode}:\n{child.log_tail()}"
                )
            time.sleep(0.05)  # polling a child's log with a deadline
        raise ClusterStartError(
            f"{child.name} not ready within {self.start_timeout:.0f}s:\n{child.log_tail()}"
        )

    def start(self) -> None:
        try:
            args = ["namesrv", "--listen-port", str(self.namesrv_port), "--bind", self.host]
            if self.namesrv_conf:
                conf_path = self.data_dir / "namesrv.conf"
                conf_path.parent.mkdir(parents=True, exist_ok=True)
                conf_path.write_text(broker_conf_text(self.namesrv_conf))
                args += ["--config", str(conf_path)]
            self.namesrv = self._spawn("namesrv", args)
            self._wait_ready(self.namesrv)
            for spec in self.broker_specs():
                self.start_broker(spec)
        except BaseException:
            self.stop()
            raise

    def start_broker(self, spec: BrokerSpec, *, wait: bool = True) -> Child:
        name = f"{spec.group}-{spec.broker_id}"
        conf_dir = self.data_dir / "conf"
        conf_dir.mkdir(parents=True, exist_ok=True)
        conf_path = conf_dir / f"{name}.conf"
        conf_path.write_text(broker_conf_text(self.broker_conf(spec)))
        child = self._spawn(name, ["broker", "-c", str(conf_path)])
        child.conf_path = conf_path
        self.brokers.append(child)
        if wait:
            self._wait_ready(child)
        return child

    def restart_broker(self, index: int, *, kill: bool = False) -> Child:
        """Stop broker ``index`` (SIGTERM, or SIGKILL when ``kill``) and start it again on the
        same data and port."""
        old = self.brokers[index]
        if kill:
            old.proc.kill()
            old.proc.wait(timeout=30)
        else:
            self._terminate([old])
        assert old.conf_path is not None
        old.log_path = keep_previous_log(old.log_path) or old.log_path
        self.retired.append(old)
        child = self._spawn(old.name, ["broker", "-c", str(old.conf_path)])
        child.conf_path = old.conf_path
        self.brokers[index] = child
        self._wait_ready(child)
        self._wait_registered(child)
        return child

    def _wait_registered(self, child: Child) -> None:
        """Until the NameServer lists ``child``'s address again. A broker prints its ready line
        before its first registration round has been answered, and one stopped by SIGTERM
        unregistered itself: a client right after the restart found no route (a producer's
        first send failed with "no route info")."""
        addr = f"{self.host}:{child.port}"
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            table = registered_brokers(self.namesrv_addr)
            if table is not None and any(addr in ids.values() for ids in table.values()):
                return
            if not child.alive():
                raise ClusterStartError(
                    f"{child.name} exited with code {child.proc.returncode}:\n{child.log_tail()}"
                )
            time.sleep(0.05)  # asking the NameServer again, with a deadline
        raise ClusterStartError(
            f"{child.name} not registered with the NameServer within "
            f"{self.start_timeout:.0f}s:\n{child.log_tail()}"
        )

    def _terminate(self, children: list[Child], grace: float = 20.0) -> None:
        for child in children:
            if child.alive():
                child.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        for child in children:
            remaining = max(0.1, deadline - time.monotonic())
            try:
                child.proc.wait(timeout=remaining)
            except subprocess.TimeoutExpired:
                child.proc.kill()
                child.proc.wait(timeout=10)

    def stop(self) -> None:
        """Brokers first (they unregister from the NameServer), then the NameServer."""
        self._terminate(self.brokers)
        if self.namesrv is not None:
            self._terminate([self.namesrv])

    def __enter__(self) -> LocalCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
