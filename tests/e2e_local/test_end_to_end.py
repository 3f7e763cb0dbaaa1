"""End to end over 127.0.0.1 with ferrymq's own client against NameServer + 2 broker processes:
clustering consumption exactly once by 3 consumers, query by key and id, a held pull woken by an
arrival."""

from __future__ import annotations

import asyncio
import collections
from pathlib import Path

from e2e_helpers import wait_for
from ferrymq.broker.local_cluster import LocalCluster
from ferrymq.client import (
    AdminClient,
    ConsumeFromWhere,
    Message,
    Producer,
    PullResult,
    PullStatus,
    PushConsumer,
)
from ferrymq.message import MessageExt
from ferrymq.remoting.headers import (
    PULL_FLAG_SUBSCRIPTION,
    PULL_FLAG_SUSPEND,
    PullMessageRequestHeader,
)


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


async def test_held_pull_is_answered_by_the_arrival_that_wakes_it(tmp_path: Path) -> None:
    """A pull the broker holds (suspended) is answered FOUND by the message whose arrival wakes
    it, while an identical pull held earlier on a topic that receives nothing is still held.

    The broker's re-check (``longPollingCheckInterval``) is set beyond the 30 s suspend, so a
    held pull ends only when woken or at its suspend's end. Without the wake-up the earlier
    (sentinel) pull would reach its end first, and be answered first: the check is an order of
    events, not a time. How fast the wake-up is belongs in ``bench/`` (e2e p50/p99)."""
    suspend_ms = 30_000
    topic, idle_topic, group = "E2E_Woken", "E2E_Idle", "E2E_WokenGroup"
    with LocalCluster(
        tmp_path,
        groups=1,
        namesrv_port=0,
        broker_port=0,
        extra_conf={"longPollingCheckInterval": str(3 * suspend_ms)},
    ) as cluster:
        broker = cluster.broker_addrs[0]
        async with AdminClient(cluster.namesrv_addr) as admin:
            for name in (topic, idle_topic):
                await admin.create_topic(
                    name, broker_addr=broker, read_queue_nums=1, write_queue_nums=1
                )

            def pull(name: str) -> asyncio.Task[PullResult]:
                header = PullMessageRequestHeader(
                    consumer_group=group,
                    topic=name,
                    queue_id=0,
                    queue_offset=0,
                    sys_flag=PULL_FLAG_SUSPEND | PULL_FLAG_SUBSCRIPTION,
                    suspend_timeout_millis=suspend_ms,
                    subscription="*",
                    expression_type="TAG",
                )
                # the client waits longer than the broker holds: the broker decides the answer
                call = admin.instance.broker.pull_message(broker, header, 2 * suspend_ms / 1000)
                return asyncio.ensure_future(call)

            async def held() -> int:
                return int((await admin.broker_runtime_info(broker))["heldPullRequests"])

            async def held_is(n: int) -> bool:
                return await held() == n

            async with Producer("E2E_WokenProducer", cluster.namesrv_addr) as producer:
                sentinel = pull(idle_topic)
                try:
                    await wait_for(lambda: held_is(1), 60, "the broker to hold the sentinel pull")
                    woken = pull(topic)
                    await wait_for(lambda: held_is(2), 60, "the broker to hold the second pull")
                    await producer.send(Message(topic, b"wake"))
                    result = await woken
                    assert result.status is PullStatus.FOUND, result
                    assert [m.body for m in result.messages] == [b"wake"]
                    assert not sentinel.done(), "the sentinel pull ended first: no wake-up"
                    assert await held() == 1, "the broker no longer holds the sentinel pull"
                finally:
                    sentinel.cancel()
