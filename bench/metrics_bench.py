"""Cost of the consumer-lag metrics (issue 18), over loopback, against broker child processes.

In one run: two brokers (``LocalCluster``, ASYNC_FLUSH) on a topic of 1,000 queues with two
consumer groups committed on every queue (and a message in each queue, so every queue lags), one
with the lag sampler off (``consumerLagEnable=false``) and one with it on at a 1 s sample interval
and a 30 s window (10x the default rate, the default 30 samples per window, to make its cost
visible); on each, acked single sends spread over the queues and a drain by pulls (committing
offsets), interleaved A/B then B/A. Then, on a broker with per-queue series on,
the time and size of a ``/metrics`` scrape and of one lag sample at 1,000 and at 10,000 queues.
Reported as msgs/s, the ratio on/off measured in the same run, broker CPU per message. Every loop
is bounded by a count and a time cap. Usage::

    .venv/bin/python bench/metrics_bench.py [--messages 4000] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from ferrymq.broker.local_cluster import LocalCluster, pick_free_port
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.eventloop import run
from ferrymq.remoting.headers import (
    PULL_FLAG_COMMIT_OFFSET,
    PULL_FLAG_SUBSCRIPTION,
    CreateTopicRequestHeader,
    PullMessageRequestHeader,
    SendMessageRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)

BODY = b"x" * 256
QUEUES = 1000
GROUPS = ("lag_a", "lag_b")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def gather_bounded(jobs: list[Any], width: int = 64) -> None:
    gate = asyncio.Semaphore(width)

    async def one(job: Any) -> None:
        async with gate:
            await job

    await asyncio.gather(*(one(j) for j in jobs))


async def prepare(
    client: RemotingClient, addr: str, topic: str, queues: int, warm_up: bool = True
) -> None:
    header = CreateTopicRequestHeader(topic=topic, read_queue_nums=queues, write_queue_nums=queues)
    resp = await client.invoke(
        addr, RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, header.to_ext())
    )
    assert resp.code == 0, resp.remark

    async def commit(group: str, queue_id: int) -> None:
        ext = UpdateConsumerOffsetRequestHeader(
            consumer_group=group, topic=topic, queue_id=queue_id, commit_offset=0
        ).to_ext()
        r = await client.invoke(
            addr, RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, ext), 30
        )
        assert r.code == 0, r.remark

    await gather_bounded([commit(g, q) for g in GROUPS for q in range(queues)])

    async def warm(queue_id: int) -> None:
        # one message per queue: its ConsumeQueue file exists before anything is measured, and
        # every queue of both groups has lag (the sampler judges real windows, not lag-free ones)
        ext = SendMessageRequestHeader(
            producer_group="bench", topic=topic, queue_id=queue_id
        ).to_ext_v2()
        r = await client.invoke(
            addr, RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, ext, BODY), 30
        )
        assert r.code == 0, r.remark

    if warm_up:
        await gather_bounded([warm(q) for q in range(queues)])


async def send_sync(client: RemotingClient, addr: str, topic: str, count: int, cap: float) -> int:
    deadline = time.perf_counter() + cap
    for i in range(count):
        ext = SendMessageRequestHeader(
            producer_group="bench", topic=topic, queue_id=i % QUEUES
        ).to_ext_v2()
        resp = await client.invoke(
            addr, RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, ext, BODY)
        )
        assert resp.code == 0, resp.remark
        if time.perf_counter() > deadline:
            return i + 1
    return count


async def drain(client: RemotingClient, addr: str, topic: str, group: str, cap: float) -> int:
    got = 0
    deadline = time.perf_counter() + cap

    async def one(queue_id: int) -> None:
        nonlocal got
        offset = 0
        while time.perf_counter() < deadline:
            ext = PullMessageRequestHeader(
                consumer_group=group,
                topic=topic,
                queue_id=queue_id,
                queue_offset=offset,
                max_msg_nums=32,
                sys_flag=PULL_FLAG_SUBSCRIPTION | PULL_FLAG_COMMIT_OFFSET,
                commit_offset=offset,
                subscription="*",
            ).to_ext()
            resp = await client.invoke(
                addr, RemotingCommand.request(RequestCode.PULL_MESSAGE, ext), 30
            )
            if resp.code != 0:
                return
            got += int(resp.ext_fields["nextBeginOffset"]) - offset
            offset = int(resp.ext_fields["nextBeginOffset"])

    await gather_bounded([one(q) for q in range(QUEUES)], width=32)
    return got


async def measure(pid: int, name: str, job: Any) -> dict[str, Any]:
    cpu0, t0 = cpu_seconds(pid), time.perf_counter()
    n = await job
    seconds = time.perf_counter() - t0
    cpu = cpu_seconds(pid) - cpu0
    return {
        "name": name,
        "messages": n,
        "seconds": round(seconds, 3),
        "msgs_per_s": round(n / seconds, 1),
        "broker_cpu_us_per_msg": round(cpu / max(1, n) * 1e6, 1),
    }


def scrape(port: int) -> tuple[float, int, float]:
    """(seconds, bytes, the broker's last lag-sample seconds) of one /metrics scrape."""
    t0 = time.perf_counter()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=300) as r:
        text = r.read()
    seconds = time.perf_counter() - t0
    match = re.search(rb"^ferrymq_consumer_lag_sample_seconds\{[^}]*\} (\S+)$", text, re.M)
    return seconds, len(text), float(match.group(1)) if match else -1.0


def cluster(root: Path, extra: dict[str, str]) -> LocalCluster:
    return LocalCluster(
        root,
        groups=1,
        namesrv_port=0,
        broker_port=0,
        mapped_file_size_commit_log=64 * 1024 * 1024,
        extra_conf=extra,
    )


async def ab_runs(off: LocalCluster, on: LocalCluster, messages: int) -> list[dict[str, Any]]:
    client = RemotingClient()
    results: list[dict[str, Any]] = []
    try:
        sides = (("off", off), ("on", on))
        for _, c in sides:
            await prepare(client, c.broker_addrs[0], "MetricsBench", QUEUES)
        # the sampler sees both groups on all 1,000 queues before measuring
        await asyncio.sleep(2)
        for round_no in (1, 2):
            # alternate which broker goes first, so neither always runs on a warmer machine
            order = sides if round_no == 1 else sides[::-1]
            for label, c in order:
                pid, addr = c.brokers[0].pid, c.broker_addrs[0]
                r = await measure(
                    pid, f"send_sync_{label}", send_sync(client, addr, "MetricsBench", messages, 60)
                )
                results.append({**r, "round": round_no})
            await asyncio.sleep(1)  # let dispatch catch up before draining
            for label, c in order:
                pid, addr = c.brokers[0].pid, c.broker_addrs[0]
                group = GROUPS[round_no - 1]
                r = await measure(
                    pid, f"drain_{label}", drain(client, addr, "MetricsBench", group, 120)
                )
                results.append({**r, "round": round_no})
    finally:
        await client.close()
    return results


async def scrape_runs(c: LocalCluster, port: int) -> list[dict[str, Any]]:
    client = RemotingClient()
    out: list[dict[str, Any]] = []
    addr = c.broker_addrs[0]
    try:
        for topics in (1, 10):
            # idle queues (no backlog), as most queues of a large broker are
            await prepare(client, addr, f"ScrapeT{topics - 1}", QUEUES, warm_up=False)
            if topics == 10:
                for t in range(1, 9):
                    await prepare(client, addr, f"ScrapeT{t}", QUEUES, warm_up=False)
            await asyncio.sleep(5)  # two sample intervals: the new queues are sampled
            samples = [scrape(port) for _ in range(5)]
            out.append(
                {
                    "queues": topics * QUEUES * len(GROUPS),
                    "scrape_seconds_median": round(sorted(s[0] for s in samples)[2], 4),
                    "scrape_bytes": samples[-1][1],
                    "lag_sample_seconds": round(samples[-1][2], 4),
                }
            )
    finally:
        await client.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=4000)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    # 10x the default sample rate, with the default 30 samples per window
    metrics_on = {
        "consumerLagEnable": "true",
        "consumerLagSampleInterval": "1000",
        "consumerLagWindow": "30000",
        "consumerLagEtaWindow": "10000",
    }
    with tempfile.TemporaryDirectory(prefix="metrics-bench-") as tmp:
        root = Path(tmp)
        port_on = pick_free_port("127.0.0.1")
        with (
            cluster(root / "off", {"consumerLagEnable": "false"}) as off,
            cluster(root / "on", {**metrics_on, "metricsPort": str(port_on)}) as on,
        ):
            ab = run(ab_runs(off, on, args.messages))
        print(json.dumps(ab, indent=1), flush=True)
        port = pick_free_port("127.0.0.1")
        per_queue = {
            **metrics_on,
            "consumerLagSampleInterval": "2000",
            "metricsPort": str(port),
            "consumerLagPerQueueMetrics": "true",
            "consumerLagMaxQueueSeries": "20000",
            "consumerLagMaxGroupTopics": "100",
        }
        with cluster(root / "scrape", per_queue) as c:
            scrapes = run(scrape_runs(c, port))
    ratios = {}
    for name in ("send_sync", "drain"):
        on_rates = [r["msgs_per_s"] for r in ab if r["name"] == f"{name}_on"]
        off_rates = [r["msgs_per_s"] for r in ab if r["name"] == f"{name}_off"]
        ratios[f"{name}_on_over_off"] = round(sum(on_rates) / sum(off_rates), 3)
    out = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "load_average": os.getloadavg(),
        "queues": QUEUES,
        "ab": ab,
        "ratios": ratios,
        "scrape": scrapes,
    }
    text = json.dumps(out, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text)


if __name__ == "__main__":
    main()
