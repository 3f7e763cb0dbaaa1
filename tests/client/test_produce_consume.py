"""Producer and consumers against a real NameServer and two real brokers on 127.0.0.1."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import pytest
from ferrymq.client import (
    AdminClient,
    ConsumeContext,
    ConsumeFromWhere,
    Message,
    MessageExt,
    Producer,
    PullConsumer,
    PushConsumer,
    SendStatus,
)
from ferrymq.client.broker_api import PullStatus
from ferrymq.client.errors import MessageValidationError, MQClientError

from .cluster import LocalCluster, start_cluster, wait_for

pytestmark = pytest.mark.timeout(120)


def tagged(topic: str, i: int) -> Message:
    msg = Message(topic, f"body-{i}".encode())
    msg.tags = "TagA" if i % 2 == 0 else "TagB"
    msg.keys = [f"key-{i}", f"order-{i % 7}"]
    return msg


async def test_sync_send_spreads_over_both_brokers_and_pull_reads_back(
    cluster: LocalCluster,
) -> None:
    await cluster.create_topic("T1", queues=2)
    async with Producer("pg", cluster.namesrv_addr) as producer:
        results = [await producer.send(tagged("T1", i)) for i in range(8)]
    assert all(r.status is SendStatus.SEND_OK for r in results)
    assert {r.queue.broker_name for r in results} == {"broker-a", "broker-b"}
    assert len({r.msg_id for r in results}) == 8

    async with PullConsumer("pull-g", cluster.namesrv_addr) as consumer:
        got: list[MessageExt] = []
        for mq in await consumer.fetch_subscribe_message_queues("T1"):
            result = await consumer.pull(mq, "*", 0, 32)
            if result.status is PullStatus.FOUND:
                got.extend(result.messages)
            assert result.next_begin_offset == len(result.messages)
    assert sorted(m.body for m in got) == sorted(f"body-{i}".encode() for i in range(8))
    by_body = {m.body: m for m in got}
    assert by_body[b"body-3"].tags == "TagB" and by_body[b"body-3"].keys == ["key-3", "order-3"]
    assert {m.msg_id for m in got} == {r.msg_id for r in results}


async def test_pull_consumer_tag_filter_and_offsets(cluster: LocalCluster) -> None:
    await cluster.create_topic("T2", queues=1)
    async with Producer("pg", cluster.namesrv_addr) as producer:
        for i in range(10):
            await producer.send(tagged("T2", i))
    async with PullConsumer("pull-g2", cluster.namesrv_addr) as consumer:
        tag_a = 0
        for mq in await consumer.fetch_subscribe_message_queues("T2"):
            result = await consumer.pull(mq, "TagA", 0, 32)
            assert all(m.tags == "TagA" for m in result.messages)
            tag_a += len(result.messages)
            consumer.update_consume_offset(mq, result.next_begin_offset)
        assert tag_a == 5
        await consumer.persist()
        for mq in await consumer.fetch_subscribe_message_queues("T2"):
            stored = await consumer.fetch_consume_offset(mq, from_store=True)
            assert stored == await consumer.max_offset(mq)
        with pytest.raises(ValueError, match="offset"):
            await consumer.pull(mq, "*", -1)


async def test_batch_and_async_and_oneway(cluster: LocalCluster) -> None:
    await cluster.create_topic("T3", queues=2)
    async with Producer("pg", cluster.namesrv_addr) as producer:
        batch = [tagged("T3", i) for i in range(20)]
        result = await producer.send_batch(batch)
        assert result.status is SendStatus.SEND_OK
        assert result.msg_id.split(",") == [m.uniq_key for m in batch]
        tasks = [producer.send_async(tagged("T3", 100 + i)) for i in range(30)]
        results = await asyncio.gather(*tasks)
        assert all(r.status is SendStatus.SEND_OK for r in results)
        await producer.send_oneway(tagged("T3", 999))
    async with AdminClient(cluster.namesrv_addr) as admin:
        queues = await admin.topic_queues("T3")

        async def total() -> bool:
            return sum([await admin.max_offset(mq) for mq in queues]) == 51

        await wait_for(total, what="51 messages stored")


async def test_bad_input_is_refused_with_clear_errors(cluster: LocalCluster) -> None:
    async with Producer("pg", cluster.namesrv_addr, max_message_size=1024) as producer:
        with pytest.raises(MessageValidationError, match="empty"):
            await producer.send(Message("T", b""))
        with pytest.raises(MessageValidationError, match="exceeds"):
            await producer.send(Message("T", b"x" * 2000))
        with pytest.raises(MessageValidationError, match="characters"):
            await producer.send(Message("bad topic", b"x"))
        with pytest.raises(MessageValidationError, match="one topic"):
            await producer.send_batch([Message("A", b"x"), Message("B", b"y")])
    with pytest.raises(MQClientError, match="not running"):
        await producer.send(Message("T", b"x"))


async def test_new_topic_is_auto_created_through_tbw102(cluster: LocalCluster) -> None:
    async with Producer("pg", cluster.namesrv_addr) as producer:
        result = await producer.send(Message("AutoTopic", b"hello"))
        assert result.status is SendStatus.SEND_OK
    async with AdminClient(cluster.namesrv_addr) as admin:

        async def routed() -> bool:
            return "AutoTopic" in await admin.topic_list()

        await wait_for(routed, what="auto-created topic registered")


async def test_unknown_topic_without_auto_create_names_the_fix(tmp_path: Path) -> None:
    c = await start_cluster(tmp_path, ("broker-a",))
    try:
        await c.stop_broker("broker-a")
        await c.start_broker("broker-a", auto_create_topic_enable=False)
        async with Producer("pg", c.namesrv_addr) as producer:
            # TBW102 may still be routed (persisted), but the broker refuses to create the topic
            with pytest.raises(MQClientError, match=r"NoSuchTopic.*TOPIC_NOT_EXIST|no route info"):
                await producer.send(Message("NoSuchTopic", b"x"), timeout=3)
    finally:
        await c.stop()


async def collect(
    cluster: LocalCluster, group: str, topic: str, n_consumers: int, expected: int, **kwargs: object
) -> tuple[list[PushConsumer], dict[str, list[MessageExt]]]:
    received: dict[str, list[MessageExt]] = {}
    consumers = []
    for i in range(n_consumers):
        name = f"c{i}"
        received[name] = []

        def listener(msgs: list[MessageExt], ctx: ConsumeContext, name: str = name) -> None:
            received[name].extend(msgs)

        consumer = PushConsumer(
            group,
            cluster.namesrv_addr,
            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
            **kwargs,  # type: ignore[arg-type]
        )
        consumer.subscribe(topic, "*")
        consumer.register_listener(listener)
        await consumer.start()
        consumers.append(consumer)
    return consumers, received


async def test_three_push_consumers_share_queues_exactly_once(cluster: LocalCluster) -> None:
    await cluster.create_topic("T4", queues=4)
    consumers, received = await collect(cluster, "g4", "T4", 3, 0)
    try:
        for c in consumers:
            await c.instance.do_rebalance()

        def disjoint_cover() -> bool:
            owned = [q for c in consumers for q in c.owned_queues() if q.topic == "T4"]
            return (
                len(owned) == 8
                and len(set(owned)) == 8
                and all(any(q.topic == "T4" for q in c.owned_queues()) for c in consumers)
            )

        async def settled() -> bool:
            for c in consumers:
                await c.instance.do_rebalance()
            return disjoint_cover()

        await wait_for(settled, what="8 queues split over 3 consumers")
        async with Producer("pg", cluster.namesrv_addr) as producer:
            sent = [await producer.send(tagged("T4", i)) for i in range(60)]

        def all_in() -> bool:
            return sum(len(v) for v in received.values()) >= 60

        await wait_for(all_in, timeout=20, what="60 messages consumed")
        ids = Counter(m.msg_id for v in received.values() for m in v)
        assert set(ids) == {r.msg_id for r in sent}
        assert all(n == 1 for n in ids.values())
        assert all(received[name] for name in received)
    finally:
        for c in consumers:
            await c.shutdown()


async def test_rebalance_on_consumer_leave_and_offsets_resume(cluster: LocalCluster) -> None:
    await cluster.create_topic("T5", queues=2)
    consumers, received = await collect(cluster, "g5", "T5", 2, 0)
    async with Producer("pg", cluster.namesrv_addr) as producer:
        first = [await producer.send(tagged("T5", i)) for i in range(20)]

        await wait_for(
            lambda: sum(len(v) for v in received.values()) >= 20, timeout=20, what="first 20"
        )
        # one consumer leaves: its shutdown persists offsets and unregisters, the other takes over
        await consumers[0].shutdown()
        survivor = consumers[1]

        async def owns_all() -> bool:
            await survivor.instance.do_rebalance()
            return len([q for q in survivor.owned_queues() if q.topic == "T5"]) == 4

        await wait_for(owns_all, timeout=20, what="survivor owns every queue")
        second = [await producer.send(tagged("T5", 100 + i)) for i in range(20)]
        await wait_for(
            lambda: {m.msg_id for m in received["c1"]} >= {r.msg_id for r in second},
            timeout=20,
            what="survivor got the second round",
        )
    await survivor.shutdown()
    everything = [m.msg_id for v in received.values() for m in v]
    assert set(everything) == {r.msg_id for r in first + second}

    # a new consumer of the same group resumes from the committed offsets: nothing is redelivered
    late, late_received = await collect(cluster, "g5", "T5", 1, 0)
    try:
        async with Producer("pg2", cluster.namesrv_addr) as producer:
            third = await producer.send(tagged("T5", 500))
        await wait_for(
            lambda: any(m.msg_id == third.msg_id for m in late_received["c0"]),
            timeout=20,
            what="new message",
        )
        assert {m.msg_id for m in late_received["c0"]} == {third.msg_id}
    finally:
        await late[0].shutdown()


async def test_failed_listener_message_comes_back_via_retry(cluster: LocalCluster) -> None:
    await cluster.create_topic("T6", queues=1)
    attempts: Counter[str] = Counter()

    def flaky(msgs: list[MessageExt], ctx: ConsumeContext) -> bool:
        for m in msgs:
            attempts[m.msg_id] += 1
        return all(attempts[m.msg_id] > 1 for m in msgs)

    consumer = PushConsumer(
        "g6", cluster.namesrv_addr, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
    )
    consumer.subscribe("T6", "*")
    consumer.register_listener(flaky)
    await consumer.start()
    try:
        async with Producer("pg", cluster.namesrv_addr) as producer:
            sent = await producer.send(tagged("T6", 1))
        await wait_for(lambda: consumer.stats["sent_back"] >= 1, timeout=20, what="send back")
        assert attempts[sent.msg_id] >= 1
    finally:
        await consumer.shutdown()
