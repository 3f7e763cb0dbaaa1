"""Broker-side cost of the hot paths, over loopback, with the raw remoting client (no client library).

Starts a NameServer and one broker (ASYNC_FLUSH) as child processes (``LocalCluster``), then, in one
run: a no-op request round trip (an unknown code; the baseline: remoting + scheduling only), acked single sends,
batched sends (64 x 1 KiB per SEND_BATCH_MESSAGE, 16 in flight), and a drain of the backlog by
pulls of 32 on every queue in parallel. For each it reports msgs/s, the ratio to the baseline, and the
broker's CPU time per message (from /proc), which on a shared machine says more than wall-clock
rates. Every loop is bounded by a count and a time cap. Usage::

    .venv/bin/python bench/broker_bench.py [--messages 64000] [--queues 8] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from ferrymq.broker.local_cluster import LocalCluster
from ferrymq.message import Message, encode_batch
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.eventloop import run
from ferrymq.remoting.headers import (
    PULL_FLAG_SUBSCRIPTION,
    CreateTopicRequestHeader,
    PullMessageRequestHeader,
    SendMessageRequestHeader,
)

TOPIC = "BrokerBench"
NOOP_CODE = 9999
BODY = b"x" * 1024


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Measure:
    def __init__(self, pid: int) -> None:
        self.pid = pid

    async def run(self, name: str, count: int, job: Any) -> dict[str, Any]:
        cpu0, t0 = cpu_seconds(self.pid), time.perf_counter()
        done = await job
        seconds = time.perf_counter() - t0
        cpu = cpu_seconds(self.pid) - cpu0
        n = done if isinstance(done, int) else count
        return {
            "name": name,
            "messages": n,
            "seconds": round(seconds, 3),
            "msgs_per_s": round(n / seconds, 1),
            "broker_cpu_us_per_msg": round(cpu / max(1, n) * 1e6, 1),
            "broker_cpu_pct": round(100 * cpu / seconds, 1),
        }


async def ping(client: RemotingClient, addr: str, count: int, cap: float) -> int:
    deadline = time.perf_counter() + cap
    for i in range(count):
        # an unknown code: answered at once with REQUEST_CODE_NOT_SUPPORTED (remoting cost only)
        await client.invoke(addr, RemotingCommand.request(NOOP_CODE))
        if time.perf_counter() > deadline:
            return i + 1
    return count


async def send_sync(client: RemotingClient, addr: str, count: int, cap: float) -> int:
    ext = SendMessageRequestHeader(producer_group="bench", topic=TOPIC, queue_id=0).to_ext_v2()
    deadline = time.perf_counter() + cap
    for i in range(count):
        resp = await client.invoke(
            addr, RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, ext, BODY)
        )
        assert resp.code == 0, resp.remark
        if time.perf_counter() > deadline:
            return i + 1
    return count


async def send_batched(client: RemotingClient, addr: str, count: int, queues: int) -> int:
    body = encode_batch([Message(TOPIC, BODY) for _ in range(64)])
    window = asyncio.Semaphore(16)

    async def one(queue_id: int) -> None:
        ext = SendMessageRequestHeader(
            producer_group="bench", topic=TOPIC, queue_id=queue_id, batch=True
        ).to_ext_v2()
        async with window:
            resp = await client.invoke(
                addr, RemotingCommand.request(RequestCode.SEND_BATCH_MESSAGE, ext, body), 60
            )
            assert resp.code == 0, resp.remark

    await asyncio.gather(*(one(i % queues) for i in range(count // 64)))
    return (count // 64) * 64


async def drain(client: RemotingClient, addr: str, queues: int, cap: float) -> int:
    got = 0
    deadline = time.perf_counter() + cap

    async def one(queue_id: int) -> None:
        nonlocal got
        offset = 0
        while time.perf_counter() < deadline:
            ext = PullMessageRequestHeader(
                consumer_group="bench_drain",
                topic=TOPIC,
                queue_id=queue_id,
                queue_offset=offset,
                max_msg_nums=32,
                sys_flag=PULL_FLAG_SUBSCRIPTION,
                subscription="*",
            ).to_ext()
            resp = await client.invoke(
                addr, RemotingCommand.request(RequestCode.PULL_MESSAGE, ext), 30
            )
            if resp.code != 0:
                return
            got += int(resp.ext_fields["nextBeginOffset"]) - offset
            offset = int(resp.ext_fields["nextBeginOffset"])

    await asyncio.gather(*(one(q) for q in range(queues)))
    return got


async def bench(broker_addr: str, pid: int, messages: int, queues: int) -> list[dict[str, Any]]:
    client = RemotingClient()
    m = Measure(pid)
    try:
        header = CreateTopicRequestHeader(
            topic=TOPIC, read_queue_nums=queues, write_queue_nums=queues
        )
        await client.invoke(
            broker_addr,
            RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, header.to_ext()),
        )
        results = [
            await m.run("ping_noop", 3000, ping(client, broker_addr, 3000, 10)),
            await m.run("send_sync", 3000, send_sync(client, broker_addr, 3000, 10)),
            await m.run(
                "send_batched", messages, send_batched(client, broker_addr, messages, queues)
            ),
        ]
        # let dispatch catch up before draining
        await asyncio.sleep(2)
        results.append(await m.run("drain", 0, drain(client, broker_addr, queues, 120)))
    finally:
        await client.close()
    base = results[0]["msgs_per_s"]
    for r in results:
        r["ratio_to_ping"] = round(r["msgs_per_s"] / base, 2)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=64_000)
    parser.add_argument("--queues", type=int, default=8)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="broker-bench-") as tmp,
        LocalCluster(
            Path(tmp),
            groups=1,
            namesrv_port=0,
            broker_port=0,
            mapped_file_size_commit_log=256 * 1024 * 1024,
        ) as cluster,
    ):
        pid = cluster.brokers[0].pid
        results = run(bench(cluster.broker_addrs[0], pid, args.messages, args.queues))
    out = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "load_average": os.getloadavg(),
        "results": results,
    }
    text = json.dumps(out, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text)


if __name__ == "__main__":
    main()
