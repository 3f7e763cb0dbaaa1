"""Failover benchmark, one run, real processes on loopback:

Part 1, acknowledged-send throughput (msg/s) of 1 KiB SYNC sends from C concurrent senders of the
Python producer to one group of 3 brokers, SYNC_FLUSH:
- baseline: a fixed SYNC_MASTER with 2 slaves (a send waits for one slave);
- controller mode with allAckInSyncStateSet=true (a send waits for every in-sync replica);
the ratio allAck / SYNC_MASTER is printed.
Part 2, write outage per automatic failover: the controller-mode group under a sending producer,
the current master SIGKILLed K times at a random moment; the outage is kill -> next acknowledged
send; p50 and max are printed (heartbeat timeout 3 s, interval 300 ms, controller scan 200 ms).

Usage: ``python bench/failover_bench.py [--sends 2000] [--concurrency 8] [--kills 5]``
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
from ferrymq.broker.controller_cluster import ControllerLocalCluster
from ferrymq.broker.local_cluster import LocalCluster
from ferrymq.client.broker_api import SendStatus
from ferrymq.client.errors import MQClientError
from ferrymq.client.producer import Producer
from ferrymq.controller.protocol import ControllerRequestCode as Req
from ferrymq.message import Message
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.errors import RemotingError

TOPIC = "FailoverBench"
BODY = b"x" * 1024


async def throughput(namesrv: str, sends: int, concurrency: int) -> float:
    producer = Producer("failover_bench", namesrv, send_msg_timeout=5.0)
    await producer.start()
    try:
        for _ in range(200):  # route + topic creation + warm-up, until a send is acknowledged
            try:
                if (await producer.send(Message(TOPIC, BODY))).status is SendStatus.SEND_OK:
                    break
            except MQClientError:
                await asyncio.sleep(0.1)
        acked = 0

        async def sender(n: int) -> None:
            nonlocal acked
            for _ in range(n):
                result = await producer.send(Message(TOPIC, BODY))
                if result.status is SendStatus.SEND_OK:
                    acked += 1

        start = time.perf_counter()
        await asyncio.gather(*(sender(sends // concurrency) for _ in range(concurrency)))
        return acked / (time.perf_counter() - start)
    finally:
        await producer.shutdown()


async def group_state(client: RemotingClient, controller: str) -> dict[str, object]:
    reply = await client.invoke(
        controller, RemotingCommand.request(Req.CONTROLLER_GET_SYNC_STATE_DATA), 3
    )
    data: dict[str, object] = orjson.loads(reply.body_bytes()).get("broker-a", {})
    return data


async def wait_state(
    client: RemotingClient, controller: str, ok: object, timeout: float
) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            state = await group_state(client, controller)
            if ok(state):  # type: ignore[operator]
                return state
        except (RemotingError, OSError):
            pass
        await asyncio.sleep(0.1)
    raise RuntimeError("controller state not reached in time")


async def outages(cluster: ControllerLocalCluster, kills: int) -> list[float]:
    client = RemotingClient()
    acks: list[float] = []
    stop = asyncio.Event()

    async def produce() -> None:
        producer = Producer(
            "failover_outage",
            cluster.namesrv_addr,
            send_msg_timeout=3.0,
            retry_times_when_send_failed=0,
        )
        await producer.start()
        try:
            while not stop.is_set():
                try:
                    if (await producer.send(Message(TOPIC, BODY))).status is SendStatus.SEND_OK:
                        acks.append(time.monotonic())
                        continue
                except (MQClientError, RemotingError, OSError, TimeoutError):
                    pass
                await asyncio.sleep(0.02)
        finally:
            await producer.shutdown()

    def healthy(s: dict[str, object]) -> bool:
        return s.get("masterBrokerId") is not None and len(s.get("syncStateSet", [])) == 3  # type: ignore[arg-type]

    task = asyncio.create_task(produce())
    rng = random.Random(1)
    result: list[float] = []
    try:
        for _ in range(kills):
            state = await wait_state(client, cluster.controller_addr, healthy, 60)
            master = int(str(state["masterBrokerId"]))
            await asyncio.sleep(1 + rng.uniform(0, 1))
            victim = cluster.brokers[master - 1]
            victim.proc.kill()
            killed = time.monotonic()
            await asyncio.to_thread(victim.proc.wait, 30)
            deadline = killed + 60
            while not any(t > killed for t in acks[-50:]) and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            first = next(t for t in acks if t > killed)
            result.append(first - killed)
            await asyncio.to_thread(cluster.restart_broker, master - 1, kill=True)
    finally:
        stop.set()
        await task
        await client.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sends", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--kills", type=int, default=5)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="failover-bench-"))
    common: dict[str, Any] = {
        "groups": 1,
        "slaves": 2,
        "namesrv_port": 0,
        "broker_port": 0,
        "flush_disk_type": "SYNC_FLUSH",
        "mapped_file_size_commit_log": 64 * 1024 * 1024,
    }
    try:
        with LocalCluster(
            root / "plain", extra_conf={"brokerRole": "SYNC_MASTER"}, **common
        ) as plain:  # type: ignore[arg-type]
            time.sleep(2)  # slaves connect
            base = asyncio.run(throughput(plain.namesrv_addr, args.sends, args.concurrency))
        ctl = ControllerLocalCluster(root / "controller", **common)
        ctl.start()
        try:
            all_ack = asyncio.run(throughput(ctl.namesrv_addr, args.sends, args.concurrency))
            outs = asyncio.run(outages(ctl, args.kills))
        finally:
            ctl.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"acked sends, SYNC_MASTER (1 of 2 slaves): {base:8.0f} msg/s")
    print(
        f"acked sends, allAckInSyncStateSet (2 of 2): {all_ack:8.0f} msg/s  ratio {all_ack / base:.2f}"
    )
    print(
        f"failover write outage over {len(outs)} kills: p50 {statistics.median(outs):.2f} s, "
        f"max {max(outs):.2f} s"
    )


if __name__ == "__main__":
    main()
