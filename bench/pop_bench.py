"""POP bookkeeping cost: consuming the same backlog by PULL (baseline) and by POP + batch ack, on
ferrymq and on Apache RocketMQ 5.4.0 in the same run, with the same Python remoting client.

    pull          PULL_MESSAGE of 32 from each queue until the backlog is read (no bookkeeping)
    pop+ack       POP_MESSAGE of 32 (a checkpoint per queue read) + BATCH_ACK_MESSAGE of them

Figures: messages/s for each, pop+ack / pull per broker (what POP's checkpoints and acks cost),
and ferrymq / Apache for pop+ack. Loops are bounded in count and time. Usage::

    .venv/bin/python bench/pop_bench.py [--messages 4000] [--out bench/results/pop_bench.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from ferrymq.client.pop_api import PopApi
from ferrymq.message import MessageConst
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.store.record import decode_messages
from interop.reference import ApacheCluster, ferrymq_cluster
from raw_remoting import create_topic, send_message

QUEUES = 4
MAX_SECONDS = 120.0


async def fill(client: RemotingClient, addr: str, topic: str, n: int) -> None:
    reply = await create_topic(client, addr, topic, QUEUES)
    assert reply.code == ResponseCode.SUCCESS, reply.remark
    body = b"x" * 256
    for start in range(0, n, 16):
        for i in range(start, min(n, start + 16)):
            for _ in range(20):  # Apache answers SYSTEM_BUSY under load: back off and resend
                reply = await send_message(client, addr, topic, body, queue_id=i % QUEUES)
                if reply.code == ResponseCode.SUCCESS:
                    break
                await asyncio.sleep(0.2)
            assert reply.code == ResponseCode.SUCCESS, reply.remark


async def pull_all(client: RemotingClient, addr: str, topic: str, n: int) -> float:
    start = time.perf_counter()
    got = 0
    offsets = dict.fromkeys(range(QUEUES), 0)
    while got < n and time.perf_counter() - start < MAX_SECONDS:
        for q in range(QUEUES):
            header = {
                "consumerGroup": "bench_pull",
                "topic": topic,
                "queueId": q,
                "queueOffset": offsets[q],
                "maxMsgNums": 32,
                "sysFlag": 4,
                "commitOffset": 0,
                "suspendTimeoutMillis": 0,
                "subscription": "*",
                "subVersion": 0,
            }
            reply = await client.invoke(
                addr, RemotingCommand.request(RequestCode.PULL_MESSAGE, header)
            )
            if reply.code == ResponseCode.SUCCESS:
                got += len(decode_messages(reply.body_bytes()))
                offsets[q] = int(reply.ext_fields["nextBeginOffset"])
    return got / (time.perf_counter() - start)


async def pop_all(client: RemotingClient, addr: str, topic: str, n: int) -> float:
    api = PopApi(client, timeout=10)
    start = time.perf_counter()
    got = 0
    while got < n and time.perf_counter() - start < MAX_SECONDS:
        result = await api.pop(
            addr,
            "broker-a",
            group="bench_pop",
            topic=topic,
            max_msg_nums=32,
            invisible_time_ms=60_000,
            poll_time_ms=0,
        )
        if result.messages:
            got += len(result.messages)
            handles = [m.properties[MessageConst.PROPERTY_POP_CK] for m in result.messages]
            assert await api.batch_ack(addr, "bench_pop", topic, handles)
    return got / (time.perf_counter() - start)


async def measure(addr: str, n: int) -> dict[str, float]:
    client = RemotingClient()
    try:
        await fill(client, addr, "BenchPull", n)
        await fill(client, addr, "BenchPop", n)
        pull = await pull_all(client, addr, "BenchPull", n)
        pop = await pop_all(client, addr, "BenchPop", n)
        return {
            "pull_msgs_per_s": round(pull),
            "pop_ack_msgs_per_s": round(pop),
            "pop_ack_over_pull": round(pop / pull, 3),
        }
    finally:
        await client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=4000)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    out: dict[str, Any] = {"messages": args.messages, "loadavg_before": os.getloadavg()}
    with tempfile.TemporaryDirectory() as tmp:
        with ferrymq_cluster(Path(tmp) / "ferrymq") as cluster:
            out["ferrymq"] = asyncio.run(measure(cluster.broker_addrs[0], args.messages))
        with ApacheCluster(Path(tmp) / "apache") as apache:
            out["apache"] = asyncio.run(measure(apache.broker_addrs[0], args.messages))
    out["ferrymq_over_apache_pop_ack"] = round(
        out["ferrymq"]["pop_ack_msgs_per_s"] / out["apache"]["pop_ack_msgs_per_s"], 3
    )
    out["loadavg_after"] = os.getloadavg()
    text = json.dumps(out, indent=2)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
