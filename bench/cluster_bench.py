"""Produce/consume/latency of a real ferrymq cluster over loopback, with ratios to the peer brokers.

Starts ``ferrymq namesrv`` and one ``ferrymq broker`` (ASYNC_FLUSH, the Redis-AOF-everysec
comparable) as child processes on 127.0.0.1, then measures with the ferrymq client in this process,
shaped like ``shared/bench/peers`` (1 KiB messages, count- and time-capped loops):

    produce_sync      one message in flight, acked                (peers: produce_sync)
    produce_blocking  the same from SyncProducer, blocking sockets   (peers: produce_sync; their
                      Redis and RabbitMQ clients block too, NATS' is asyncio)
    produce_batched   SEND_BATCH_MESSAGE, window of batches         (peers: produce_batched / produce_async)
    produce_async     single async sends, 1000 in flight            (peers: produce_async)
    consume_drain     push consumer drains the 200k backlog         (peers: consume_ack_batch)
    latency_2000      open-loop 2000 msg/s, consumer in a 2nd process (peers: latency_2000)
    latency_2000_1q   the same on a topic of ONE queue: each peer's latency case uses one
                      stream/queue, while latency_2000 spreads messages over 8 queues, so every
                      message wakes its own held pull (case name ``latency_1q``)

Ratios are ferrymq / peer, with the peer figures read from the peers' result JSON (run
``shared/bench/peers/run_all.sh`` right before or after, same machine). Usage::

    .venv/bin/python bench/cluster_bench.py [--backlog 200000] [--runs 1] \\
        [--peers /tmp/peerbench-results] [--out cluster_bench.json]

``--cases consume_drain,latency`` runs a subset (consume_drain needs produce_batched's backlog, so
it runs that too); ``--breakdown`` adds to the latency case where messages waited (send->store,
store->pulled, pulled->callback; see ``ferrymq.client.benchmark.latency_breakdown``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ferrymq.broker.local_cluster import pick_free_port
from ferrymq.client import AdminClient, Producer, SyncProducer
from ferrymq.client import benchmark as bm
from ferrymq.message import Message
from ferrymq.remoting.eventloop import run

ROOT = Path(__file__).resolve().parent.parent
FERRYMQ = [sys.executable, "-m", "ferrymq.cli.main"]


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_broker_port() -> int:
    """A listenPort whose neighbours are free too: the broker also binds listenPort - 2 (the
    VIP channel) and listenPort + 1 (HA), and a taken neighbour made a run fail at start."""
    for _ in range(50):
        port = pick_free_port("127.0.0.1")
        if _bindable(port - 2) and _bindable(port + 1):
            return port
    raise RuntimeError("no free port triple on 127.0.0.1")


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all threads), from /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Cluster:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.ns_port = pick_free_port("127.0.0.1")
        self.broker_port = free_broker_port()
        self.procs: list[subprocess.Popen[bytes]] = []

    @property
    def namesrv(self) -> str:
        return f"127.0.0.1:{self.ns_port}"

    @property
    def broker_pid(self) -> int:
        return self.procs[1].pid

    def start(self) -> None:
        log = open(self.workdir / "cluster.log", "ab")  # noqa: SIM115 - lives as long as the children
        ns = subprocess.Popen(
            [*FERRYMQ, "namesrv", "--listen-port", str(self.ns_port), "--bind", "127.0.0.1"],
            stdout=log,
            stderr=log,
        )
        self.procs.append(ns)
        conf = self.workdir / "broker.conf"
        conf.write_text(
            "\n".join(
                [
                    "brokerClusterName=BenchCluster",
                    "brokerName=broker-a",
                    "brokerId=0",
                    "brokerIP1=127.0.0.1",
                    "bindAddress=127.0.0.1",
                    f"listenPort={self.broker_port}",
                    f"namesrvAddr={self.namesrv}",
                    f"storePathRootDir={self.workdir / 'store'}",
                    "flushDiskType=ASYNC_FLUSH",
                    "brokerRole=ASYNC_MASTER",
                    "autoCreateTopicEnable=true",
                    "mappedFileSizeCommitLog=268435456",
                ]
            )
            + "\n"
        )
        broker = subprocess.Popen([*FERRYMQ, "broker", "-c", str(conf)], stdout=log, stderr=log)
        self.procs.append(broker)

    async def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError(
                        f"cluster process {p.args!r} exited with {p.returncode}; see cluster.log"
                    )
            try:
                async with AdminClient(self.namesrv) as admin:
                    info = await admin.cluster_info()
                    if "broker-a" in info.broker_addr_table:
                        return
            except Exception:
                pass
            await asyncio.sleep(0.2)
        raise RuntimeError("cluster did not become ready")

    def stop(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in reversed(self.procs):
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


async def create_topic(namesrv: str, topic: str, queues: int = 8) -> None:
    async with AdminClient(namesrv) as admin:
        await admin.create_topic(topic, read_queue_nums=queues, write_queue_nums=queues)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            route = await admin.instance.namesrv.get_route(topic)
            if route is not None and route.queue_datas:
                return
            await asyncio.sleep(0.1)
    raise RuntimeError(f"topic {topic} not routed")


CASES = (
    "produce_sync",
    "produce_blocking",
    "produce_batched",
    "produce_async",
    "consume_drain",
    "latency",
    "latency_1q",
)


async def one_run(
    cluster: Cluster,
    run_no: int,
    backlog: int,
    lat_rate: int,
    lat_seconds: float,
    cases: frozenset[str] = frozenset(CASES),
    breakdown: bool = False,
) -> dict[str, Any]:
    ns = cluster.namesrv
    out: dict[str, Any] = {}
    suffix = f"{run_no}_{int(time.time())}"
    topics = {k: f"Bench{k}{suffix}" for k in ("Sync", "Backlog", "Async", "Latency", "Latency1q")}
    for key, t in topics.items():
        await create_topic(ns, t, queues=1 if key == "Latency1q" else 8)

    client_cpu0 = [time.process_time()]

    def measured(name: str, result: dict[str, Any], cpu0: float, wall: float) -> None:
        cpu = cpu_seconds(cluster.broker_pid) - cpu0
        client_cpu = time.process_time() - client_cpu0[0]
        client_cpu0[0] = time.process_time()
        result["server_cpu_pct"] = round(100 * cpu / wall, 1) if wall > 0 else None
        result["client_cpu_pct"] = round(100 * client_cpu / wall, 1) if wall > 0 else None
        result["load_average_1m"] = os.getloadavg()[0]
        out[name] = result
        print(f"  {name}: {json.dumps(result)}", flush=True)

    async with Producer(f"bench_pg_{suffix}", [ns]) as producer:
        await producer.send(Message(topics["Sync"], bm.payload(1024)))  # warm the route/connection
        if "produce_sync" in cases:
            cpu0, t0 = cpu_seconds(cluster.broker_pid), time.perf_counter()
            client_cpu0[0] = time.process_time()
            r = await bm.produce_sync(producer, topics["Sync"], max_count=50_000, max_seconds=8.0)
            measured("produce_sync", r.as_dict(), cpu0, time.perf_counter() - t0)

        if "produce_blocking" in cases:
            with SyncProducer(f"bench_pg_blocking_{suffix}", [ns]) as blocking:
                blocking.send(Message(topics["Sync"], bm.payload(1024)))  # warm, as above
                cpu0, t0 = cpu_seconds(cluster.broker_pid), time.perf_counter()
                client_cpu0[0] = time.process_time()
                # a thread of its own: the sends block it, this loop only waits for the result
                r = await asyncio.to_thread(
                    bm.produce_blocking, blocking, topics["Sync"], max_count=50_000, max_seconds=8.0
                )
                measured("produce_blocking", r.as_dict(), cpu0, time.perf_counter() - t0)

        stored = 0
        if "produce_batched" in cases or "consume_drain" in cases:
            cpu0, t0 = cpu_seconds(cluster.broker_pid), time.perf_counter()
            client_cpu0[0] = time.process_time()
            r = await bm.produce_batched(
                producer, topics["Backlog"], total=backlog, batch=64, window=8, max_seconds=150
            )
            measured("produce_batched", r.as_dict(), cpu0, time.perf_counter() - t0)
            stored = r.messages

        if "produce_async" in cases:
            cpu0, t0 = cpu_seconds(cluster.broker_pid), time.perf_counter()
            client_cpu0[0] = time.process_time()
            r = await bm.produce_async(
                producer, topics["Async"], total=min(backlog, 100_000), window=1000, max_seconds=150
            )
            measured("produce_async", r.as_dict(), cpu0, time.perf_counter() - t0)

    if "consume_drain" in cases:
        cpu0, t0 = cpu_seconds(cluster.broker_pid), time.perf_counter()
        client_cpu0[0] = time.process_time()
        r = await bm.drain(
            [ns], topics["Backlog"], f"bench_drain_{suffix}", stored, max_seconds=150
        )
        measured("consume_drain", r.as_dict(), cpu0, time.perf_counter() - t0)

    variants = [("latency", "Latency", ""), ("latency_1q", "Latency1q", "_1q")]
    for case, topic_key, label in variants:
        if case not in cases:
            continue
        topic = topics[topic_key]
        async with Producer(f"bench_lat{label}_{suffix}", [ns]) as producer:
            await producer.send(Message(topic, bm.payload(1024)))
            with tempfile.TemporaryDirectory(prefix="ferrymq-lat-") as tmp:
                cpu0, t0 = cpu_seconds(cluster.broker_pid), time.perf_counter()
                client_cpu0[0] = time.process_time()
                lat = await bm.latency(
                    producer,
                    [ns],
                    topic,
                    Path(tmp),
                    rate=lat_rate,
                    seconds=lat_seconds,
                    breakdown=breakdown,
                )
                result = lat.as_dict()
                result["queues"] = 1 if label else 8
                measured(f"latency_{lat_rate}{label}", result, cpu0, time.perf_counter() - t0)
    return out


def median_of(runs: list[dict[str, Any]], metric: str, key: str) -> float | None:
    vals = [
        r[metric][key] for r in runs if metric in r and isinstance(r[metric].get(key), (int, float))
    ]
    return statistics.median(vals) if vals else None


def peer_value(peers: dict[str, Any], peer: str, metric: str, key: str) -> float | None:
    data = peers.get(peer, {}).get("metrics", {}).get(metric, {}).get(key)
    if isinstance(data, dict):
        data = data.get("median")
    return float(data) if isinstance(data, (int, float)) else None


def load_peers(directory: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in ("redis", "rabbitmq", "nats"):
        path = directory / f"{name}.json"
        if path.exists():
            out[name] = json.loads(path.read_text())
    return out


COMPARE = [
    # (our metric, our key, peer metric, peer key, higher is better)
    ("produce_sync", "msgs_per_s", "produce_sync", "msgs_per_s", True),
    ("produce_blocking", "msgs_per_s", "produce_sync", "msgs_per_s", True),
    ("produce_batched", "msgs_per_s", "produce_batched", "msgs_per_s", True),
    ("produce_batched", "msgs_per_s", "produce_async", "msgs_per_s", True),
    ("produce_async", "msgs_per_s", "produce_async", "msgs_per_s", True),
    ("consume_drain", "msgs_per_s", "consume_ack_batch", "msgs_per_s", True),
    ("latency_2000", "p50_us", "latency_2000", "p50_us", False),
    ("latency_2000", "p99_us", "latency_2000", "p99_us", False),
    ("latency_2000_1q", "p50_us", "latency_2000", "p50_us", False),
    ("latency_2000_1q", "p99_us", "latency_2000", "p99_us", False),
]


def ratios(ours: list[dict[str, Any]], peers: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for metric, key, peer_metric, peer_key, _higher in COMPARE:
        mine = median_of(ours, metric, key)
        for peer in ("redis", "nats", "rabbitmq"):
            theirs = peer_value(peers, peer, peer_metric, peer_key)
            if mine is None or theirs is None or theirs == 0:
                continue
            rows.append(
                {
                    "ferrymq": metric,
                    "key": key,
                    "peer": peer,
                    "peer_metric": peer_metric,
                    "ferrymq_value": round(mine, 1),
                    "peer_value": round(theirs, 1),
                    "ratio": round(mine / theirs, 3),
                }
            )
    return rows


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="ferrymq-cluster-bench-") as tmp:
        cluster = Cluster(Path(tmp))
        cluster.start()
        try:
            await cluster.wait_ready()
            runs = []
            for i in range(args.runs):
                print(f"run {i + 1}/{args.runs}", flush=True)
                runs.append(
                    await one_run(
                        cluster,
                        i,
                        args.backlog,
                        args.lat_rate,
                        args.lat_seconds,
                        args.cases,
                        args.breakdown,
                    )
                )
        finally:
            cluster.stop()
            log = Path(tmp) / "cluster.log"
            if args.keep_log and log.exists():
                Path(args.keep_log).write_bytes(log.read_bytes())
    peers = load_peers(Path(args.peers))
    return {
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "config": {
            "backlog": args.backlog,
            "runs": args.runs,
            "size": 1024,
            "flushDiskType": "ASYNC_FLUSH",
            "latency_rate": args.lat_rate,
            "latency_seconds": args.lat_seconds,
            "cases": sorted(args.cases),
            "breakdown": args.breakdown,
        },
        "load_average": os.getloadavg(),
        "runs": runs,
        "peers_from": str(args.peers),
        "ratios": ratios(runs, peers),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--backlog", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--lat-rate", type=int, default=2000)
    parser.add_argument("--lat-seconds", type=float, default=10.0)
    parser.add_argument(
        "--peers", default=os.environ.get("PEERBENCH_RESULTS", "/tmp/peerbench-results")
    )
    parser.add_argument(
        "--cases",
        default=",".join(CASES),
        type=lambda text: frozenset(c.strip() for c in text.split(",") if c.strip()),
        help=f"comma-separated subset of {','.join(CASES)}",
    )
    parser.add_argument(
        "--breakdown", action="store_true", help="latency: where messages waited, per slice"
    )
    parser.add_argument("--out", default="cluster_bench.json")
    parser.add_argument("--keep-log", default=None, help="copy the cluster's log here")
    args = parser.parse_args()
    unknown = args.cases - set(CASES)
    if unknown:
        parser.error(
            f"unknown case(s) {', '.join(sorted(unknown))}; choose from {', '.join(CASES)}"
        )
    result = run(main_async(args))
    Path(args.out).write_text(json.dumps(result, indent=1))
    print("\nratios (ferrymq / peer):")
    for row in result["ratios"]:
        print(
            f"  {row['ferrymq']:16s} {row['key']:10s} vs {row['peer']:8s} {row['peer_metric']:18s} "
            f"{row['ferrymq_value']:>12,.1f} / {row['peer_value']:>12,.1f} = {row['ratio']:.3f}"
        )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
