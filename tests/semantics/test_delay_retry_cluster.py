"""Delay levels and retry/DLQ through a real broker with ferrymq's client."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest
from ferrymq.broker.schedule import SCHEDULE_TOPIC
from ferrymq.client import (
    ConsumeContext,
    ConsumeStatus,
    Message,
    MessageExt,
    Producer,
    PushConsumer,
)
from ferrymq.client.admin import AdminClient
from ferrymq.client.allocate import MessageQueue
from ferrymq.client.pull_consumer import PullConsumer
from ferrymq.message import MessageInner
from polling import wait_for

from semantics.cluster import semantics_cluster

pytestmark = pytest.mark.timeout(180)


async def test_delayed_message_is_delivered_after_its_level(tmp_path: Path) -> None:
    async with semantics_cluster(tmp_path, delay_levels="1s 3s") as cluster:
        await cluster.create_topic("Delayed", queues=2)
        got: list[tuple[float, MessageExt]] = []
        consumer = PushConsumer("delay-g", instance=cluster.instance())
        consumer.subscribe("Delayed")
        consumer.register_listener(lambda msgs, ctx: got.extend((time.time(), m) for m in msgs))
        await consumer.start()
        try:
            async with Producer("delay-p", cluster.namesrv_addr) as producer:
                sent_at = time.time()
                plain = Message("Delayed", b"now")
                late = Message("Delayed", b"later")
                late.delay_time_level = 2
                clamped = Message("Delayed", b"clamped")
                clamped.delay_time_level = 99  # beyond the last level: clamped to it
                for m in (late, clamped, plain):
                    await producer.send(m)
            await wait_for(lambda: len(got) == 3, 20, "three deliveries")
        finally:
            await consumer.shutdown()
        by_body = {m.body: (t, m) for t, m in got}
        assert by_body[b"now"][0] - sent_at < 2.5
        for body in (b"later", b"clamped"):
            arrived, msg = by_body[body]
            assert arrived - sent_at >= 2.9, body
            assert msg.topic == "Delayed"
            # DELAY kept on delivery, as Apache RocketMQ 5.4.0 does (tests/interop)
            assert msg.properties["DELAY"] and msg.properties["REAL_TOPIC"] == "Delayed"


async def test_message_failing_16_times_lands_in_the_dlq_and_nowhere_else(tmp_path: Path) -> None:
    async with semantics_cluster(tmp_path) as cluster:  # every delay level is 1 s here
        await cluster.create_topic("Fragile", queues=1)
        attempts: Counter[bytes] = Counter()
        reconsume_seen: list[int] = []

        def always_fail(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeStatus:
            for m in msgs:
                attempts[m.body] += 1
                if m.body == b"poison":
                    reconsume_seen.append(m.reconsume_times)
                    assert m.topic == "Fragile"  # the retry topic is restored for the listener
            return (
                ConsumeStatus.RECONSUME_LATER
                if any(m.body == b"poison" for m in msgs)
                else ConsumeStatus.CONSUME_SUCCESS
            )

        consumer = PushConsumer("fragile-g", instance=cluster.instance(), consume_thread_max=2)
        consumer.subscribe("Fragile")
        consumer.register_listener(always_fail)
        await consumer.start()
        try:
            async with Producer("fragile-p", cluster.namesrv_addr) as producer:
                poison = await producer.send(Message("Fragile", b"poison"))
                await producer.send(Message("Fragile", b"fine"))
            store = cluster.broker.store
            assert store is not None
            await wait_for(
                lambda: store.get_max_offset_in_queue("%DLQ%fragile-g", 0) == 1,
                90,
                "the poison message in the DLQ",
            )
            # nothing is left anywhere that could come back: every delay queue delivered, the
            # retry queue consumed to its end; so one first delivery + 16 retries in all
            semantics = cluster.broker.semantics
            assert semantics is not None

            def drained() -> bool:
                schedule = semantics.schedule
                delays_done = all(
                    schedule.offsets.get(level, 0)
                    >= store.get_max_offset_in_queue(SCHEDULE_TOPIC, level - 1)
                    for level in range(1, schedule.max_level + 1)
                )
                retry_mq = MessageQueue("%RETRY%fragile-g", "broker-s", 0)
                assert consumer.offset_store is not None
                retry_done = consumer.offset_store.offsets.get(
                    retry_mq, -1
                ) == store.get_max_offset_in_queue("%RETRY%fragile-g", 0)
                return delays_done and retry_done

            await wait_for(drained, 20, "delay and retry queues drained")
            assert attempts[b"poison"] == 17
            assert reconsume_seen == list(range(17))
            assert attempts[b"fine"] == 1
        finally:
            await consumer.shutdown()
        store = cluster.broker.store
        assert store is not None
        assert store.get_max_offset_in_queue("%DLQ%fragile-g", 0) == 1
        dlq_config = cluster.broker.topics.get("%DLQ%fragile-g")
        assert (
            dlq_config is not None and dlq_config.perm == 6
        )  # as upstream: a consumer can read it
        async with PullConsumer("dlq-reader", cluster.namesrv_addr) as reader:
            pulled = await reader.pull(MessageQueue("%DLQ%fragile-g", "broker-s", 0), "*", 0, 32)
        assert [m.body for m in pulled.messages] == [b"poison"]
        dead = store.look_message_by_offset(
            store.get_commit_log_offset_in_queue("%DLQ%fragile-g", 0, 0)
        )
        assert dead is not None and dead.body == b"poison" and dead.reconsume_times == 17
        assert dead.properties["RETRY_TOPIC"] == "Fragile"
        # admin tools read the dead letter by the producer's message id (QUERY_MESSAGE index)
        async with AdminClient(cluster.namesrv_addr) as admin:
            await wait_for(
                lambda: admin.query_message_by_key("%DLQ%fragile-g", poison.msg_id),
                10,
                "the DLQ message indexed",
            )
            found = await admin.view_message(poison.msg_id, topic="%DLQ%fragile-g")
        assert found.body == b"poison" and found.topic == "%DLQ%fragile-g"
        # the original topic holds the two originals only; no copy was written back to it
        assert store.get_max_offset_in_queue("Fragile", 0) == 2


async def test_failed_send_back_is_consumed_again_locally(tmp_path: Path) -> None:
    """With no retry queue for the group, the broker drops nothing silently: the client keeps the
    message and consumes it again itself."""
    async with semantics_cluster(tmp_path) as cluster:
        await cluster.create_topic("Local", queues=1)
        seen: list[int] = []
        consumer = PushConsumer("local-g", instance=cluster.instance())
        consumer.subscribe("Local")

        def fail_once(msgs: list[MessageExt], ctx: ConsumeContext) -> bool:
            seen.append(len(seen))
            return len(seen) > 1

        consumer.register_listener(fail_once)
        await consumer.start()
        try:
            # the broker refuses every send-back: write permission removed from the broker
            cluster.broker.config.broker_permission = 4
            assert cluster.broker.store is not None
            await cluster.broker.store.put_message(MessageInner.create("Local", 0, b"x", {}))
            await wait_for(lambda: len(seen) >= 2, 20, "local re-consume")
        finally:
            await consumer.shutdown()
        assert consumer.stats["sent_back"] == 0
