"""Soak: per-key order while orderly consumers keep joining and leaving (slow)."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from pathlib import Path

import pytest
from ferrymq.client import Message, MessageExt, Producer
from ferrymq.client.orderly_consume_service import ConsumeOrderlyContext, OrderlyPushConsumer
from ferrymq.client.selectors import send_orderly
from polling import wait_for

from semantics.cluster import semantics_cluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

KEYS = 12
PER_KEY = 60


async def test_order_holds_through_repeated_consumer_churn(tmp_path: Path) -> None:
    async with semantics_cluster(tmp_path) as cluster:
        await cluster.create_topic("Churn", queues=6)
        events: list[tuple[str, int]] = []

        async def consume(msgs: list[MessageExt], ctx: ConsumeOrderlyContext) -> bool:
            for m in msgs:
                key, seq = m.body.decode().split(":")
                events.append((key, int(seq)))
            await asyncio.sleep(0.002)
            return True

        def new_consumer() -> OrderlyPushConsumer:
            c = OrderlyPushConsumer("churn-g", instance=cluster.instance())
            c.subscribe("Churn")
            c.register_listener(consume)
            return c

        anchor = new_consumer()
        await anchor.start()
        stop = asyncio.Event()

        async def churn() -> None:
            while not stop.is_set():
                guest = new_consumer()
                await guest.start()
                await asyncio.sleep(1.5)  # let it own and consume queues for a while
                await guest.shutdown()
                await asyncio.sleep(0.5)

        churner = asyncio.create_task(churn())
        try:
            async with Producer("churn-p", cluster.namesrv_addr) as producer:
                for seq in range(PER_KEY):
                    for k in range(KEYS):
                        await send_orderly(
                            producer, Message("Churn", f"k{k}:{seq}".encode()), f"k{k}"
                        )
            await wait_for(lambda: len(set(events)) == KEYS * PER_KEY, 120, "all consumed")
        finally:
            stop.set()
            await churner
            await anchor.shutdown()
        firsts: dict[str, list[int]] = defaultdict(list)
        seen: set[tuple[str, int]] = set()
        for key, seq in events:
            if (key, seq) not in seen:
                seen.add((key, seq))
                firsts[key].append(seq)
        assert all(v == list(range(PER_KEY)) for v in firsts.values()), firsts
