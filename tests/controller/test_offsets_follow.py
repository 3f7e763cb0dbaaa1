"""Consumer offsets and an automatic failover, with real processes: a PushConsumer consumes
everything and stops (its offsets committed to the master); the replicas hold those offsets
within a few seconds, well before the 10 s metadata sync would bring them; the master is then
killed, the elected one answers the same offsets, and a new consumer of the group re-delivers
nothing it had consumed, and receives what is sent after the failover."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

from ferrymq.client import ConsumeFromWhere, PushConsumer
from ferrymq.client.allocate import MessageQueue
from ferrymq.client.broker_api import BrokerApi
from ferrymq.message import MessageExt
from ferrymq.remoting.client import RemotingClient

from .failover_helpers import (
    GROUP,
    QUEUES,
    TOPIC,
    Recorder,
    addr_of,
    failover_cluster,
    group_state,
    produce,
    wait_until,
)
from .test_failover_chaos import prepare

CONSUMER_GROUP = "offsets_follow"
# the replicas' metadata sync of ordinary (not controller-mode) slaves runs every 10 s
PROMPT_S = 5.0


async def send(namesrv: str, rec: Recorder, count: int, seed: int) -> None:
    stop = asyncio.Event()
    task = asyncio.create_task(produce(namesrv, rec, stop, seed))
    target = len(rec.acks) + count

    async def enough() -> bool:
        assert not task.done(), task
        return len(rec.acks) >= target

    try:
        await wait_until(f"{count} acks", enough, 60)
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


def consumer(namesrv: str, received: Counter[bytes]) -> PushConsumer:
    def listener(msgs: list[MessageExt], context: object) -> None:
        for m in msgs:
            received[m.body] += 1

    c = PushConsumer(
        CONSUMER_GROUP, namesrv, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
    )
    c.subscribe(TOPIC, "*")
    c.register_listener(listener)
    return c


async def offsets(api: BrokerApi, addr: str) -> dict[int, int]:
    return {
        q: await api.query_consumer_offset(addr, CONSUMER_GROUP, MessageQueue(TOPIC, GROUP, q))
        for q in range(QUEUES)
    }


async def test_committed_offsets_reach_replicas_and_survive_a_failover(tmp_path: Path) -> None:
    with failover_cluster(tmp_path / "cluster") as cluster:
        client = RemotingClient()
        api = BrokerApi(client)
        master = await prepare(client, cluster)
        master_addr = addr_of(cluster, master)
        rec = Recorder()
        await send(cluster.namesrv_addr, rec, 200, 41)
        queue_ends = {
            q: 1 + max((o for (qq, o) in rec.acks if qq == q), default=-1) for q in range(QUEUES)
        }

        first: Counter[bytes] = Counter()
        c1 = consumer(cluster.namesrv_addr, first)
        await c1.start()
        try:

            async def consumed_all() -> bool:
                return all(body in first for body in rec.acks.values())

            await wait_until("every message consumed", consumed_all, 60)
        finally:
            await c1.shutdown()  # persists its offsets to the master
        committed = await offsets(api, master_addr)
        assert committed == queue_ends, (committed, queue_ends)

        for bid in (1, 2, 3):
            if bid == master:
                continue

            async def replicated(addr: str = addr_of(cluster, bid)) -> bool:
                return await offsets(api, addr) == committed

            await wait_until(f"offsets on replica {bid}", replicated, PROMPT_S)

        cluster.brokers[master - 1].proc.kill()
        await asyncio.to_thread(cluster.brokers[master - 1].proc.wait, 30)

        async def elected() -> int | None:
            state = await group_state(client, cluster.controller_addr)
            new = state.get("masterBrokerId")
            return int(new) if new not in (None, master) else None

        new_master = await wait_until("a new master", elected, 30)
        assert await offsets(api, addr_of(cluster, new_master)) == committed

        second: Counter[bytes] = Counter()
        c2 = consumer(cluster.namesrv_addr, second)
        await c2.start()
        try:
            before = dict(rec.acks)
            await send(cluster.namesrv_addr, rec, 50, 42)
            after = [body for key, body in rec.acks.items() if key not in before]

            async def consumed_new() -> bool:
                return all(body in second for body in after)

            await wait_until("the messages sent after the failover", consumed_new, 60)
        finally:
            await c2.shutdown()
        redelivered = [body for body in before.values() if body in second]
        assert not redelivered, f"{len(redelivered)} consumed messages delivered again"
        await client.close()
