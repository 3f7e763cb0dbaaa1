"""Soak: steady produce while consumers of one group come and go; nothing may be lost (slow)."""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from pathlib import Path

import pytest
from ferrymq.client import (
    ConsumeContext,
    ConsumeFromWhere,
    Message,
    MessageExt,
    Producer,
    PushConsumer,
)
from polling import wait_for

from .cluster import start_cluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
ROUNDS = int(os.environ.get("SOAK_ROUNDS", "6"))
PER_ROUND = int(os.environ.get("SOAK_PER_ROUND", "500"))


async def test_membership_churn_loses_nothing(tmp_path: Path) -> None:
    cluster = await start_cluster(tmp_path)
    received: Counter[str] = Counter()
    consumers: list[PushConsumer] = []

    async def join() -> PushConsumer:
        c = PushConsumer(
            "soak-g",
            cluster.namesrv_addr,
            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
            consume_batch_max_size=8,
        )
        c.subscribe("Soak", "*")

        async def listener(msgs: list[MessageExt], ctx: ConsumeContext) -> None:
            for m in msgs:
                received[m.msg_id] += 1

        c.register_listener(listener)
        await c.start()
        consumers.append(c)
        return c

    try:
        await cluster.create_topic("Soak", queues=4)
        for _ in range(3):
            await join()
        sent: set[str] = set()
        async with Producer("soak-p", cluster.namesrv_addr) as producer:
            for round_no in range(ROUNDS):
                tasks = [
                    producer.send_async(Message("Soak", f"r{round_no}-{i}".encode()))
                    for i in range(500)
                ]
                sent.update(r.msg_id for r in await asyncio.gather(*tasks))
                # churn: the oldest consumer leaves, a new one joins
                leaving = consumers.pop(0)
                await leaving.shutdown()
                await join()
        await wait_for(lambda: set(received) >= sent, timeout=120, what="every message consumed")
        assert set(received) == sent
        duplicates = sum(n - 1 for n in received.values())
        # at-least-once: rebalances may redeliver in-flight messages, never lose them
        assert duplicates <= len(sent), f"{duplicates} redeliveries for {len(sent)} messages"
    finally:
        for c in consumers:
            await c.shutdown()
        await cluster.stop()
