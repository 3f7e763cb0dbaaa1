"""HA benchmark: replication throughput and acked-send latency, ASYNC_MASTER vs SYNC_MASTER, one run.

Part 1, replication throughput (MB/s), both sides in separate processes over loopback:
- baseline: a raw asyncio TCP copy of the same number of bytes in 32 KiB writes to a child process
  that only counts them;
- replication: a master CommitLog prefilled with 1 KiB messages, served by the HA master in this
  process, pulled by an HA slave child appending into its own CommitLog (the real code path).
Part 2, acked-send latency p50/p99 (ms) of single 1 KiB sends from the Python producer to a real
master + slave (LocalCluster, ASYNC_FLUSH so the difference is the replica wait), first with the
master as ASYNC_MASTER, then as SYNC_MASTER; the ratio SYNC/ASYNC is printed.

Usage: ``python bench/ha_bench.py [--mib 64] [--sends 2000] [--runs 3]``
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ferrymq.broker.local_cluster import LocalCluster
from ferrymq.client.broker_api import SendStatus
from ferrymq.client.producer import Producer
from ferrymq.ha.config import HAConfig, Role
from ferrymq.ha.service import HAService
from ferrymq.ha.store_adapter import CommitLogReplication
from ferrymq.message import Message, MessageInner
from ferrymq.remoting.eventloop import run
from ferrymq.store.commit_log import CommitLog

MiB = 1024 * 1024
FILE_SIZE = 128 * MiB
CHUNK = 32 * 1024


# --- child processes -------------------------------------------------------------------------


async def _sink_child(port: int, total: int) -> None:
    """Baseline receiver: read ``total`` bytes and exit."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 20)
    got = 0
    while got < total:
        data = await reader.read(1 << 18)
        if not data:
            break
        got += len(data)
    writer.close()


async def _slave_child(port: int, store_dir: str, total: int) -> None:
    """Replication receiver: a real HA slave over a real CommitLog, until ``total`` bytes."""
    path = Path(store_dir)
    path.mkdir(parents=True, exist_ok=True)
    log = CommitLog(path, FILE_SIZE, ("127.0.0.1", 1), 4 * MiB)
    config = HAConfig(role=Role.SLAVE, master_ha_address=f"127.0.0.1:{port}")
    service = HAService(config, CommitLogReplication(log))
    await service.start()
    while log.max_offset < total:
        await asyncio.sleep(0.002)  # bench polling cadence
    await service.shutdown()
    log.mapped_file_queue.shutdown()


# --- part 1 ----------------------------------------------------------------------------------


def _spawn(args: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, __file__, *args])


async def baseline_tcp(total: int) -> float:
    """Seconds to push ``total`` bytes over loopback to a child that only reads them."""
    payload = bytes(CHUNK)
    done = asyncio.Event()
    elapsed = 0.0

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal elapsed
        start = time.perf_counter()
        sent = 0
        while sent < total:
            n = min(CHUNK, total - sent)
            writer.write(payload[:n])
            sent += n
            await writer.drain()
        await reader.read()  # the child closes once it has everything
        elapsed = time.perf_counter() - start
        writer.close()
        done.set()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    child = _spawn(["--child-sink", str(port), str(total)])
    await done.wait()
    await asyncio.to_thread(child.wait, 60)
    server.close()
    return elapsed


def prefill(path: Path, total: int) -> CommitLog:
    path.mkdir(parents=True, exist_ok=True)
    log = CommitLog(path, FILE_SIZE, ("127.0.0.1", 1), 4 * MiB)
    msg = MessageInner.create("HaBench", 0, b"x" * 1024)
    while log.max_offset < total:
        log.put_message(msg)
    return log


async def replication(log: CommitLog, work: Path) -> float:
    """Seconds for a fresh slave process to replicate the master's CommitLog."""
    total = log.max_offset
    config = HAConfig(role=Role.ASYNC_MASTER, listen_host="127.0.0.1", listen_port=0)
    master = HAService(config, CommitLogReplication(log))
    await master.start()
    child = _spawn(["--child-slave", str(master.listen_port), str(work / "slave"), str(total)])
    while master.connection_count == 0:  # the clock starts when the slave is connected
        await asyncio.sleep(0.001)
    start = time.perf_counter()
    assert master.transfer is not None
    while master.transfer.push2slave_max_offset < total:
        await asyncio.sleep(0.002)  # bench polling cadence
    elapsed = time.perf_counter() - start
    await asyncio.to_thread(child.wait, 60)
    await master.shutdown()
    return elapsed


# --- part 2 ----------------------------------------------------------------------------------


async def send_latencies(namesrv: str, sends: int) -> list[float]:
    body = b"l" * 1024
    out: list[float] = []
    async with Producer("ha_bench_producer", namesrv, body_transform=None) as producer:
        for _ in range(50):  # warm-up: routes, connections, topic creation
            await producer.send(Message("HaLatency", body))
        for _ in range(sends):
            start = time.perf_counter()
            result = await producer.send(Message("HaLatency", body))
            out.append((time.perf_counter() - start) * 1000)
            if result.status is not SendStatus.SEND_OK:
                raise RuntimeError(f"send not acknowledged: {result.status}")
    return out


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


def latency_run(role: str, sends: int) -> list[float]:
    work = Path(tempfile.mkdtemp(prefix=f"ha-bench-{role}-"))
    try:
        with LocalCluster(
            work,
            groups=1,
            slaves=1,
            namesrv_port=0,
            broker_port=0,
            flush_disk_type="ASYNC_FLUSH",
            mapped_file_size_commit_log=64 * MiB,
            extra_conf={"brokerRole": role},
        ) as cluster:
            # the slave must be connected before SYNC_MASTER can acknowledge anything
            deadline = time.monotonic() + 30
            log_path = cluster.brokers[0].log_path
            while b"HA: slave connected" not in log_path.read_bytes():
                if time.monotonic() > deadline:
                    raise RuntimeError("the slave never connected")
                time.sleep(0.05)  # bench polling cadence
            return run(send_latencies(cluster.namesrv_addr, sends))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mib", type=int, default=64, help="MiB replicated per run")
    parser.add_argument("--sends", type=int, default=2000, help="acked sends per mode per run")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    total = args.mib * MiB
    ratios: list[float] = []
    sync_ratios: list[tuple[float, float]] = []
    for i in range(args.runs):
        work = Path(tempfile.mkdtemp(prefix="ha-bench-"))
        try:
            log = prefill(work / "master", total)
            base_s = run(baseline_tcp(log.max_offset))
            repl_s = run(replication(log, work))
            log.mapped_file_queue.shutdown()
        finally:
            shutil.rmtree(work, ignore_errors=True)
        base_mb, repl_mb = total / MiB / base_s, total / MiB / repl_s
        ratios.append(repl_mb / base_mb)
        print(f"--- run {i + 1}/{args.runs}")
        print(f"raw loopback TCP (baseline)     {base_mb:9.1f} MB/s")
        print(
            f"HA replication (slave appends)  {repl_mb:9.1f} MB/s   ratio {repl_mb / base_mb:.3f}"
        )
        lat: dict[str, list[float]] = {}
        for role in ("ASYNC_MASTER", "SYNC_MASTER"):
            lat[role] = latency_run(role, args.sends)
            values = lat[role]
            print(
                f"acked send {role:12}  p50 {pct(values, 50):6.2f} ms  p99 {pct(values, 99):6.2f} ms"
                f"  mean {statistics.fmean(values):6.2f} ms  ({len(values)} sends)"
            )
        p50 = pct(lat["SYNC_MASTER"], 50) / pct(lat["ASYNC_MASTER"], 50)
        p99 = pct(lat["SYNC_MASTER"], 99) / pct(lat["ASYNC_MASTER"], 99)
        sync_ratios.append((p50, p99))
        print(f"SYNC_MASTER / ASYNC_MASTER latency ratio: p50 {p50:.2f}x  p99 {p99:.2f}x")
    ratios.sort()
    print("--- across runs (best / median / worst)")
    print(
        f"replication / raw TCP ratio: {ratios[-1]:.3f} / {ratios[len(ratios) // 2]:.3f} / {ratios[0]:.3f}"
    )
    p50s = sorted(r[0] for r in sync_ratios)
    p99s = sorted(r[1] for r in sync_ratios)
    print(f"SYNC/ASYNC p50 ratio: {p50s[0]:.2f} / {p50s[len(p50s) // 2]:.2f} / {p50s[-1]:.2f}")
    print(f"SYNC/ASYNC p99 ratio: {p99s[0]:.2f} / {p99s[len(p99s) // 2]:.2f} / {p99s[-1]:.2f}")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--child-sink":
        run(_sink_child(int(sys.argv[2]), int(sys.argv[3])))
    elif len(sys.argv) == 5 and sys.argv[1] == "--child-slave":
        run(_slave_child(int(sys.argv[2]), sys.argv[3], int(sys.argv[4])))
    else:
        main()
