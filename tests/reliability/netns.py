"""A partition harness for real processes: each NameServer, controller and broker in a network
namespace of its own, made by the test, joined by veth pairs to a bridge in one more namespace;
``iptables`` and ``tc`` inside those namespaces cut, heal and slow links (issue 34, item 4).

Addresses come from a private range used only inside these namespaces: nothing is added to the
host's interfaces, and the host never routes to them. The test's own client code runs in a thread
that entered the client's namespace (``setns`` is per thread), so its sockets live there too.

Layout (``<p>`` is a per-run prefix, so parallel runs and leftovers do not collide)::

    <p>sw   bridge br0, one veth end per node
    <p>ns   NameServer      SUBNET.9:9876
    <p>ctl  controller      SUBNET.10:9878
    <p>b1.. broker 1..3     SUBNET.11..13:10911 (HA 10912)
    <p>cli  producer, consumer, checks   SUBNET.20

Needs root (as CI has); installs iproute2 and iptables with apt-get when missing.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import shutil
import subprocess
import threading
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from ferrymq.broker.controller_cluster import ControllerLocalCluster
from ferrymq.broker.local_cluster import BrokerSpec

T = TypeVar("T")

SUBNET = "10.213.77"  # /24, only inside the namespaces this module creates
NAMESRV_PORT = 9876
CONTROLLER_PORT = 9878
BROKER_PORT = 10911
HA_PORT = 10912
HA_PROXY_PORT = 10913  # a DelayProxy in front of the HA port (the slow-link scenario)
CLONE_NEWNET = 0x40000000
NODE_IPS = {"ns": 9, "ctl": 10, "b1": 11, "b2": 12, "b3": 13, "cli": 20}


def ensure_tools() -> None:
    """iproute2 (ip, tc) and iptables, installed when missing (idempotent)."""
    missing = [t for t in ("ip", "tc", "iptables") if shutil.which(t) is None]
    if not missing:
        return
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-q"], check=True, env=env, capture_output=True)
    subprocess.run(
        ["apt-get", "install", "-y", "-q", "iproute2", "iptables"],
        check=True,
        env=env,
        capture_output=True,
    )


def run(*args: str) -> None:
    done = subprocess.run(list(args), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")


class Network:
    """The namespaces, the bridge and the links; ``cut``/``heal``/``slow`` act on one node."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.made: list[str] = []

    def ns(self, node: str) -> str:
        return f"{self.prefix}{node}"

    @staticmethod
    def ip(node: str) -> str:
        return f"{SUBNET}.{NODE_IPS[node]}"

    def up(self) -> None:
        ensure_tools()
        sw = self.ns("sw")
        run("ip", "netns", "add", sw)
        self.made.append(sw)
        run("ip", "-n", sw, "link", "set", "lo", "up")
        run("ip", "-n", sw, "link", "add", "br0", "type", "bridge")
        run("ip", "-n", sw, "link", "set", "br0", "up")
        for node in NODE_IPS:
            ns = self.ns(node)
            run("ip", "netns", "add", ns)
            self.made.append(ns)
            run("ip", "-n", ns, "link", "set", "lo", "up")
            port = f"s-{node}"
            run("ip", "-n", sw, "link", "add", port, "type", "veth", "peer", "name", "eth0",
                "netns", ns)  # fmt: skip
            run("ip", "-n", sw, "link", "set", port, "master", "br0")
            run("ip", "-n", sw, "link", "set", port, "up")
            run("ip", "-n", ns, "addr", "add", f"{self.ip(node)}/24", "dev", "eth0")
            run("ip", "-n", ns, "link", "set", "eth0", "up")

    def down(self) -> None:
        for ns in reversed(self.made):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)
        self.made.clear()

    # --- faults (inside the node's own namespace) ----------------------------------------------

    def _in(self, node: str, *args: str) -> None:
        run("ip", "netns", "exec", self.ns(node), *args)

    def cut(self, node: str, peers: list[str] | None = None) -> None:
        """Drop ``node``'s traffic with ``peers`` (nodes), or with everyone on its link."""
        if peers is None:
            self._in(node, "iptables", "-A", "INPUT", "-i", "eth0", "-j", "DROP")
            self._in(node, "iptables", "-A", "OUTPUT", "-o", "eth0", "-j", "DROP")
            return
        for peer in peers:
            self._in(node, "iptables", "-A", "INPUT", "-s", self.ip(peer), "-j", "DROP")
            self._in(node, "iptables", "-A", "OUTPUT", "-d", self.ip(peer), "-j", "DROP")

    def heal(self, node: str) -> None:
        self._in(node, "iptables", "-F", "INPUT")
        self._in(node, "iptables", "-F", "OUTPUT")

    def redirect(self, node: str, port: int, to_port: int) -> None:
        """New connections to ``node``'s ``port`` from other nodes go to ``to_port`` instead
        (a DelayProxy there). Used instead of ``tc ... netem``: kernels without sch_netem
        (this CI's) refuse that qdisc."""
        self._in(node, "iptables", "-t", "nat", "-A", "PREROUTING", "-i", "eth0", "-p", "tcp",
                 "--dport", str(port), "-j", "REDIRECT", "--to-ports", str(to_port))  # fmt: skip

    # --- running code inside a namespace --------------------------------------------------------

    def run_in(self, node: str, main: Callable[[], Awaitable[T]]) -> T:
        """Run ``main()`` on an event loop of its own in a thread that entered ``node``'s
        namespace (blocking; call it through ``asyncio.to_thread``)."""
        box: dict[str, Any] = {}

        def body() -> None:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = os.open(f"/var/run/netns/{self.ns(node)}", os.O_RDONLY)
            try:
                if libc.setns(fd, CLONE_NEWNET) != 0:
                    err = ctypes.get_errno()
                    raise OSError(err, f"setns into {self.ns(node)}: {os.strerror(err)}")
            finally:
                os.close(fd)
            try:
                box["result"] = asyncio.run(main())  # type: ignore[arg-type]
            except BaseException as exc:
                box["error"] = exc

        thread = threading.Thread(target=body, name=f"netns-{node}")
        thread.start()
        thread.join()
        if "error" in box:
            raise box["error"]
        return box["result"]  # type: ignore[no-any-return]


@contextlib.contextmanager
def network(prefix: str) -> Iterator[Network]:
    net = Network(prefix)
    try:
        net.up()
        yield net
    finally:
        net.down()


class NetnsCluster(ControllerLocalCluster):
    """The controller-mode group of ``failover_cluster`` with each process in its namespace."""

    def __init__(self, net: Network, data_dir: Path, **kwargs: Any) -> None:
        super().__init__(
            data_dir,
            groups=1,
            slaves=2,
            namesrv_port=NAMESRV_PORT,
            broker_port=BROKER_PORT,
            host=net.ip("ns"),
            **kwargs,
        )
        self.net = net
        self._node_of: dict[str, str] = {"namesrv": "ns", "controller": "ctl"}

    def command_prefix(self, name: str) -> list[str]:
        return ["ip", "netns", "exec", self.net.ns(self._node_of[name])]

    @property
    def controller_addr(self) -> str:
        return f"{self.net.ip('ctl')}:{CONTROLLER_PORT}"

    def broker_addr(self, broker_id: int) -> str:
        return f"{self.net.ip(f'b{broker_id}')}:{BROKER_PORT}"

    @property
    def broker_addrs(self) -> list[str]:
        return [self.broker_addr(b) for b in (1, 2, 3)]

    def broker_specs(self) -> list[BrokerSpec]:
        return [BrokerSpec(self.group_name(0), n, BROKER_PORT) for n in (1, 2, 3)]

    def ha_port(self, spec: BrokerSpec) -> int:
        return HA_PORT

    def broker_conf(self, spec: BrokerSpec) -> dict[str, str]:
        conf = super().broker_conf(spec)
        ip = self.net.ip(f"b{spec.broker_id}")
        conf.update(
            {
                "brokerIP1": ip,
                "bindAddress": ip,
                "listenPort": str(BROKER_PORT),
                "haListenPort": str(HA_PORT),
                "controllerAddr": self.controller_addr,
            }
        )
        self._node_of[f"{spec.group}-{spec.broker_id}"] = f"b{spec.broker_id}"
        return conf

    def start_controller(self, *, wait: bool = True) -> Any:
        conf_dir = self.data_dir / "conf"
        conf_dir.mkdir(parents=True, exist_ok=True)
        conf_path = conf_dir / "controller.conf"
        conf_path.write_text(
            f"listenPort={CONTROLLER_PORT}\nbindAddress={self.net.ip('ctl')}\n"
            f"controllerStorePath={self.data_dir / 'controller'}\n"
            f"scanNotActiveBrokerInterval={self.scan_interval_ms}\n"
        )
        self.controller_port = CONTROLLER_PORT
        return super().start_controller(wait=wait)


class DelayProxy:
    """A TCP relay in a node's namespace: ``listen_port`` -> ``target``, what the target sends
    back delayed by ``delay_s`` (settable while it runs; order kept). Runs on its own thread
    and loop, started with :meth:`start`, ended with :meth:`stop`."""

    def __init__(self, net: Network, node: str, listen_port: int, target: tuple[str, int]):
        self.net, self.node, self.listen_port, self.target = net, node, listen_port, target
        self.delay_s = 0.0
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def start(self) -> None:
        def body() -> None:
            try:
                self.net.run_in(self.node, self._main)
            except BaseException as exc:
                self.error = exc
                self._ready.set()

        self._thread = threading.Thread(target=body, name=f"delay-proxy-{self.node}")
        self._thread.start()
        self._ready.wait(30)
        if self.error is not None:
            raise self.error

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)

    async def _main(self) -> None:
        conns: set[asyncio.Task[None]] = set()

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                up_r, up_w = await asyncio.open_connection(*self.target)
            except OSError:
                writer.close()
                return
            pumps = [
                asyncio.create_task(self._pump(reader, up_w, delayed=False)),
                asyncio.create_task(self._pump(up_r, writer, delayed=True)),
            ]
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
            for task in pumps:
                task.cancel()
            writer.close()
            up_w.close()

        def track(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            task = asyncio.create_task(serve(r, w))
            conns.add(task)
            task.add_done_callback(conns.discard)

        server = await asyncio.start_server(track, "0.0.0.0", self.listen_port)
        self._ready.set()
        try:
            while not self._stop.is_set():
                await asyncio.sleep(0.2)  # polls the cross-thread stop flag
        finally:
            server.close()
            for task in list(conns):
                task.cancel()

    async def _pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, delayed: bool
    ) -> None:
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
        loop = asyncio.get_running_loop()

        async def send() -> None:
            while True:
                due, data = await queue.get()
                wait = due - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)  # the link's delay
                writer.write(data)
                await writer.drain()

        sender = asyncio.create_task(send())
        try:
            while data := await reader.read(65536):
                queue.put_nowait((loop.time() + (self.delay_s if delayed else 0.0), data))
        finally:
            sender.cancel()
