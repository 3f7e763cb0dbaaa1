"""End to end over 127.0.0.1 with ferrymq's own client against NameServer + 2 broker processes:
clustering consumption exactly once by 3 consumers, query by key and id, long-poll latency."""

from __future__ import annotations

import asyncio
import collections

from e2e_helpers import wait_for
from ferrymq.broker.config import BrokerConfig
from ferrymq.broker.local_cluster import LocalCluster
from ferrymq.client import AdminClient, ConsumeFromWhere, Message, Producer, PushConsumer
from ferrymq.message import MessageExt


async def test_three_consumers_each_message_exactly_once(cluster: LocalCluster) -> None:
    topic, group, n = "E2E_Clustered", "E2E_Group3", 600
    async with AdminClient(cluster.namesrv_addr) as admin:
        assert len(await admin.create_topic(topic, read_queue_nums=4, write_queue_nums=4)) == 2

    received: dict[int, list[tuple[str, MessageExt]]] = collections.defaultdict(list)
    consumers: list[PushConsumer] = []

    def listener_for(index: int):  # type: ignore[no-untyped-def]
        def listener(msgs: list[MessageExt], context: object) -> None:
            for m in msgs:
                received[index].append((m.body.decode(), m))

        return listener

    try:
        for i in range(3):
            c = PushConsumer(
                group,
                cluster.namesrv_addr,
                consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
            )
            c.subscribe(topic, "TagA || TagB")
            c.register_listener(listener_for(i))
            await c.start()
            consumers.append(c)

        def balanced() -> bool:
            owned = [set(q for q in c.owned_queues() if q.topic == topic) for c in consumers]
            union = set().union(*owned)
            return len(union) == 8 and sum(len(o) for o in owned) == 8 and all(owned)

        await wait_for(balanced, 60, "3 consumers to share the 8 queues")

        async with Producer("E2E_Producer", cluster.namesrv_addr) as producer:
            for i in range(n):
                msg = Message(topic, f"m{i}".encode())
                msg.tags = "TagA" if i % 3 else "TagB"
                msg.keys = [f"key-{i}"]
                await producer.send(msg)

        await wait_for(
            lambda: sum(len(v) for v in received.values()) >= n, 60, f"{n} messages consumed"
        )
        await asyncio.sleep(0)  # let in-flight callbacks land before counting duplicates
        bodies = [b for items in received.values() for b, _ in items]
        counts = collections.Counter(bodies)
        assert set(counts) == {f"m{i}" for i in range(n)}
        assert max(counts.values()) == 1, [b for b, c in counts.items() if c > 1][:10]
        # every consumer got a share, only from queues it owns
        owned = [set(c.owned_queues()) for c in consumers]
        for index, items in received.items():
            assert items, f"consumer {index} got nothing"
            for _, m in items:
                brokers = {
                    q.broker_name
                    for q in owned[index]
                    if q.topic == topic and q.queue_id == m.queue_id
                }
                assert brokers, f"consumer {index} got a message of a queue it does not own"
                assert m.tags in ("TagA", "TagB") and m.keys == [f"key-{m.body.decode()[1:]}"]
    finally:
        for c in consumers:
            await c.shutdown()


async def test_query_by_key_and_by_id(cluster: LocalCluster) -> None:
    topic = "E2E_Query"
    async with Producer("E2E_QueryProducer", cluster.namesrv_addr) as producer:
        results = []
        for i in range(10):
            msg = Message(topic, f"q{i}".encode())
            msg.tags = "TagQ"
            msg.keys = [f"order-{i}", "batch-7"]
            results.append(await producer.send(msg))
    async with AdminClient(cluster.namesrv_addr) as admin:

        async def indexed() -> bool:
            return len(await admin.query_message_by_key(topic, "batch-7")) == 10

        await wait_for(indexed, 20, "all ten messages indexed by key")
        found = await admin.query_message_by_key(topic, "order-4")
        assert [m.body for m in found] == [b"q4"]
        by_offset_id = await admin.view_message(results[6].offset_msg_id)
        assert by_offset_id.body == b"q6" and by_offset_id.tags == "TagQ"
        by_client_id = await admin.view_message(results[2].msg_id, topic)
        assert by_client_id.body == b"q2" and by_client_id.keys == ["order-2", "batch-7"]


async def test_long_polling_latency(cluster: LocalCluster) -> None:
    """A message sent while the consumer's pull is held wakes that pull at once.

    Without the wake-up the held pull would return only at the broker's re-check
    (``longPollingCheckInterval``, 5 s): each of 15 messages arriving within half of that proves the
    wake-up with a margin no busy machine erodes. How fast it is belongs in ``bench/`` (e2e p50/p99)."""
    topic, group = "E2E_Latency", "E2E_LatencyGroup"
    async with AdminClient(cluster.namesrv_addr) as admin:
        await admin.create_topic(
            topic, broker_addr=cluster.broker_addrs[0], read_queue_nums=1, write_queue_nums=1
        )
    arrivals: dict[str, float] = {}
    loop = asyncio.get_running_loop()

    def listener(msgs: list[MessageExt], context: object) -> None:
        for m in msgs:
            arrivals[m.body.decode()] = loop.time()

    consumer = PushConsumer(
        group,
        cluster.namesrv_addr,
        run_sync_listener_in_thread=False,
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
    )
    consumer.subscribe(topic, "*")
    consumer.register_listener(listener)
    await consumer.start()
    try:
        async with Producer("E2E_LatencyProducer", cluster.namesrv_addr) as producer:
            await producer.send(Message(topic, b"warmup"))
            await wait_for(lambda: "warmup" in arrivals, 60, "the consumer to start pulling")
            latencies = []
            for i in range(15):
                # the consumer's next pull is now held at the broker: give it a moment to arrive
                await asyncio.sleep(0.1)
                sent = loop.time()
                await producer.send(Message(topic, f"l{i}".encode()))
                await wait_for(lambda i=i: f"l{i}" in arrivals, 10, f"message l{i}")
                latencies.append(arrivals[f"l{i}"] - sent)
        recheck_s = BrokerConfig.model_fields["long_polling_check_interval"].default / 1000
        late = [round(x, 3) for x in latencies if x >= recheck_s / 2]
        assert not late, f"held pulls not woken by arrivals (s): {late} of {latencies}"
    finally:
        await consumer.shutdown()
