"""Ordered messages: hash-by-key producer, broker queue locks, orderly push consumers."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from pathlib import Path

import pytest
from ferrymq.client import Message, MessageExt, Producer
from ferrymq.client.orderly_consume_service import (
    ConsumeOrderlyContext,
    ConsumeOrderlyStatus,
    OrderlyPushConsumer,
)
from ferrymq.client.selectors import send_orderly
from ferrymq.remoting.bodies import LockBatchRequestBody, LockBatchResponseBody
from ferrymq.remoting.bodies import MessageQueue as WireQueue
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from polling import wait_for

from semantics.cluster import semantics_cluster

pytestmark = pytest.mark.timeout(180)

KEYS = [f"order-{i}" for i in range(8)]
PER_KEY = 30


async def test_per_key_order_survives_a_rebalance(tmp_path: Path) -> None:
    async with semantics_cluster(tmp_path) as cluster:
        await cluster.create_topic("Orders", queues=4)
        events: list[tuple[str, str, int, int]] = []  # (consumer, key, seq, queue)

        def listener(name: str):  # type: ignore[no-untyped-def]
            async def consume(
                msgs: list[MessageExt], ctx: ConsumeOrderlyContext
            ) -> ConsumeOrderlyStatus:
                for m in msgs:
                    key, seq = m.body.decode().split(":")
                    events.append((name, key, int(seq), m.queue_id))
                await asyncio.sleep(0.004)  # slow enough for the rebalance to land mid-stream
                return ConsumeOrderlyStatus.SUCCESS

            return consume

        first = OrderlyPushConsumer("ord-g", instance=cluster.instance())
        first.subscribe("Orders")
        first.register_listener(listener("first"))
        await first.start()
        second = OrderlyPushConsumer("ord-g", instance=cluster.instance())
        second.subscribe("Orders")
        second.register_listener(listener("second"))
        try:
            async with Producer("ord-p", cluster.namesrv_addr) as producer:
                queue_of: dict[str, int] = {}
                for seq in range(PER_KEY):
                    for key in KEYS:
                        result = await send_orderly(
                            producer, Message("Orders", f"{key}:{seq}".encode()), key
                        )
                        assert (
                            queue_of.setdefault(key, result.queue.queue_id) == result.queue.queue_id
                        )
                    if seq == PER_KEY // 4:
                        await second.start()  # a second consumer joins: queues move mid-stream
            total = len(KEYS) * PER_KEY
            await wait_for(
                lambda: len({(k, s) for _, k, s, _ in events}) == total, 60, "all consumed"
            )
            await wait_for(lambda: bool(second.owned_queues()) and bool(first.owned_queues()), 10)
        finally:
            await second.shutdown()
            await first.shutdown()

        # a graceful hand-over (the batch in the listener finished, its offset committed before
        # the unlock) redelivers nothing
        pairs = [(k, s) for _, k, s, _ in events]
        if first.stats["quiesce_timeouts"] == 0 and second.stats["quiesce_timeouts"] == 0:
            assert len(pairs) == len(set(pairs)), "duplicates at a graceful hand-over"
        by_key: dict[str, list[int]] = defaultdict(list)
        for _consumer, key, seq, _queue in events:
            by_key[key].append(seq)
        for key, seqs in by_key.items():
            firsts: list[int] = []
            seen: set[int] = set()
            for s in seqs:
                if s not in seen:
                    seen.add(s)
                    firsts.append(s)
            # a message is never consumed before every earlier message of its key
            assert firsts == list(range(PER_KEY)), (key, seqs)
        consumers_by_queue: dict[int, set[str]] = defaultdict(set)
        for consumer, _k, _s, queue in events:
            consumers_by_queue[queue].add(consumer)
        assert {c for cs in consumers_by_queue.values() for c in cs} == {"first", "second"}
        # at least one queue changed hands while it still had messages: the handover was tested
        assert any(len(cs) == 2 for cs in consumers_by_queue.values()), consumers_by_queue
        # every key stayed on one queue (hash by key)
        assert all(len({q for _, k2, _, q in events if k2 == key}) == 1 for key in KEYS)


async def test_suspend_redelivers_the_same_head_in_order(tmp_path: Path) -> None:
    async with semantics_cluster(tmp_path) as cluster:
        await cluster.create_topic("Seq", queues=1)
        seen: list[tuple[int, int]] = []
        failures = {2: 2}  # message 2 is suspended twice before it succeeds

        def consume(msgs: list[MessageExt], ctx: ConsumeOrderlyContext) -> ConsumeOrderlyStatus:
            (m,) = msgs
            n = int(m.body)
            seen.append((n, m.reconsume_times))
            if failures.get(n, 0) > 0:
                failures[n] -= 1
                ctx.suspend_current_queue_time_millis = 100
                return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
            return ConsumeOrderlyStatus.SUCCESS

        consumer = OrderlyPushConsumer("seq-g", instance=cluster.instance())
        consumer.subscribe("Seq")
        consumer.register_listener(consume)
        await consumer.start()
        try:
            async with Producer("seq-p", cluster.namesrv_addr) as producer:
                for i in range(5):
                    await send_orderly(producer, Message("Seq", str(i).encode()), "k")
            await wait_for(lambda: [n for n, _ in seen][-1:] == [4], 20, "all five")
        finally:
            await consumer.shutdown()
        assert seen == [(0, 0), (1, 0), (2, 0), (2, 1), (2, 2), (3, 0), (4, 0)]


async def test_lock_batch_is_exclusive_per_group_over_the_wire(tmp_path: Path) -> None:
    async with semantics_cluster(tmp_path) as cluster:
        await cluster.create_topic("Locked", queues=2)
        queues = [WireQueue(topic="Locked", broker_name="broker-s", queue_id=i) for i in range(2)]
        client = RemotingClient()

        async def lock(client_id: str, mqs: list[WireQueue]) -> set[int]:
            body = LockBatchRequestBody(consumer_group="lk", client_id=client_id, mq_set=mqs)
            response = await client.invoke(
                cluster.broker_addr,
                RemotingCommand.request(RequestCode.LOCK_BATCH_MQ, None, body.encode()),
            )
            assert response.code == ResponseCode.SUCCESS
            return {
                q.queue_id
                for q in LockBatchResponseBody.decode(response.body_bytes()).lock_ok_mq_set
            }

        try:
            assert await lock("c1", queues[:1]) == {0}
            assert await lock("c2", queues) == {1}
            assert await lock("c1", queues) == {0}  # renewal of its own; queue 1 is c2's
            body = LockBatchRequestBody(consumer_group="lk", client_id="c1", mq_set=queues[:1])
            response = await client.invoke(
                cluster.broker_addr,
                RemotingCommand.request(RequestCode.UNLOCK_BATCH_MQ, None, body.encode()),
            )
            assert response.code == ResponseCode.SUCCESS
            assert await lock("c2", queues) == {0, 1}
            bad = await client.invoke(
                cluster.broker_addr, RemotingCommand.request(RequestCode.LOCK_BATCH_MQ, None, b"{")
            )
            assert bad.code == ResponseCode.SYSTEM_ERROR and "LockBatchRequestBody" in (
                bad.remark or ""
            )
        finally:
            await client.close()
