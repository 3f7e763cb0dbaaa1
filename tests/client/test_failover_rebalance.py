"""Client behaviours with brokers and consumers coming and going (real servers on 127.0.0.1)."""

from __future__ import annotations

import time

import pytest
from ferrymq.client import (
    ConsumeContext,
    ConsumeFromWhere,
    Message,
    MessageExt,
    Producer,
    PushConsumer,
)
from ferrymq.client.errors import MQClientError
from ferrymq.client.instance import ClientInstance
from polling import wait_for

from .cluster import LocalCluster

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("fault_tolerance", [False, True])
async def test_sync_send_retries_on_the_other_broker(
    cluster: LocalCluster, fault_tolerance: bool
) -> None:
    await cluster.create_topic("F1", queues=2)
    async with Producer(
        "pg", cluster.namesrv_addr, send_latency_fault_enable=fault_tolerance
    ) as producer:
        await producer.send(Message("F1", b"warm"))  # route cached: both brokers
        assert {q.broker_name for q in producer.instance.routes.publish["F1"].queues} == {
            "broker-a",
            "broker-b",
        }
        await cluster.stop_broker("broker-b")
        results = [await producer.send(Message("F1", f"m{i}".encode())) for i in range(12)]
        # every send succeeded although half of the cached queues point at a dead broker
        assert {r.queue.broker_name for r in results} == {"broker-a"}
        if fault_tolerance:
            # the failure isolated broker-b: it is not even tried while isolated
            assert not producer.fault.tolerance.is_available("broker-b", now=producer_now())


def producer_now() -> int:
    import time

    return time.monotonic_ns() // 1_000_000


async def test_async_send_is_not_retried_after_a_transport_failure(cluster: LocalCluster) -> None:
    await cluster.create_topic("F2", queues=1)
    async with Producer("pg", cluster.namesrv_addr) as producer:
        await producer.send(Message("F2", b"warm"))
        await cluster.stop_broker("broker-b")
        outcomes = []
        for i in range(6):
            try:
                outcomes.append(
                    (await producer.send_async(Message("F2", f"a{i}".encode()))).queue.broker_name
                )
            except MQClientError:
                outcomes.append("failed")
        # round-robin puts half on broker-b; upstream async sends do not retry a connection failure
        assert "failed" in outcomes and "broker-a" in outcomes


async def test_route_refresh_drops_a_stopped_broker(cluster: LocalCluster) -> None:
    await cluster.create_topic("F3", queues=2)
    instance = ClientInstance(cluster.namesrv_addr, poll_namesrv_interval=0.2)
    producer = Producer("pg", instance=instance)
    await producer.start()
    try:
        await producer.send(Message("F3", b"x"))
        await cluster.stop_broker("broker-b")  # unregisters from the NameServer
        await wait_for(
            lambda: {q.broker_name for q in instance.routes.publish["F3"].queues} == {"broker-a"},
            what="periodic route refresh without broker-b",
        )
        await cluster.start_broker("broker-b")
        await cluster.create_topic("F3", queues=2)
        await wait_for(
            lambda: (
                {q.broker_name for q in instance.routes.publish["F3"].queues}
                == {"broker-a", "broker-b"}
            ),
            what="broker-b back in the route",
        )
    finally:
        await producer.shutdown()
        await instance.shutdown()


async def test_consumer_join_triggers_rebalance_without_waiting(cluster: LocalCluster) -> None:
    """NOTIFY_CONSUMER_IDS_CHANGED from the broker makes both consumers rebalance at once (not in 20 s)."""
    await cluster.create_topic("F4", queues=2)
    got: dict[str, list[MessageExt]] = {"a": [], "b": []}

    def make(name: str) -> PushConsumer:
        c = PushConsumer(
            "g-join",
            cluster.namesrv_addr,
            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        )
        c.subscribe("F4", "*")

        def listener(msgs: list[MessageExt], ctx: ConsumeContext) -> None:
            got[name].extend(msgs)

        c.register_listener(listener)
        return c

    first = make("a")
    await first.start()
    second = make("b")
    try:
        await wait_for(
            lambda: len([q for q in first.owned_queues() if q.topic == "F4"]) == 4,
            what="first owns all",
        )
        await second.start()

        def split() -> bool:
            a = {q for q in first.owned_queues() if q.topic == "F4"}
            b = {q for q in second.owned_queues() if q.topic == "F4"}
            return len(a) == 2 and len(b) == 2 and not a & b

        # well under the 20 s rebalance interval: driven by the broker's notification
        await wait_for(split, timeout=8, what="queues split after the join")
        async with Producer("pg", cluster.namesrv_addr) as producer:
            sent = {
                (await producer.send(Message("F4", f"j{i}".encode()))).msg_id for i in range(40)
            }
        await wait_for(
            lambda: {m.msg_id for v in got.values() for m in v} >= sent,
            timeout=20,
            what="all consumed",
        )
        assert got["a"] and got["b"]
    finally:
        await second.shutdown()
        await first.shutdown()


async def test_offsets_are_committed_periodically_and_visible_to_admin(
    cluster: LocalCluster,
) -> None:
    await cluster.create_topic("F5", queues=1)
    instance = ClientInstance(cluster.namesrv_addr, persist_offset_interval=0.2)
    consumer = PushConsumer(
        "g-progress",
        instance=instance,
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
    )
    consumer.subscribe("F5", "*")
    seen: list[MessageExt] = []
    consumer.register_listener(lambda msgs, ctx: seen.extend(msgs))
    await consumer.start()
    try:
        async with Producer("pg", cluster.namesrv_addr) as producer:
            for i in range(10):
                await producer.send(Message("F5", f"p{i}".encode()))
        await wait_for(lambda: len(seen) == 10, timeout=20, what="10 consumed")
        from ferrymq.client import AdminClient

        async with AdminClient(cluster.namesrv_addr) as admin:

            async def committed() -> bool:
                rows = [
                    r for r in await admin.consumer_progress("g-progress") if r.queue.topic == "F5"
                ]
                return sum(r.consumer_offset for r in rows) == 10 and all(r.diff == 0 for r in rows)

            # while the consumer is still running: the 0.2 s persist task committed the offsets
            await wait_for(committed, timeout=10, what="offsets committed")
    finally:
        await consumer.shutdown()
        await instance.shutdown()


async def test_running_info_lists_owned_queues_as_fastjson(cluster: LocalCluster) -> None:
    """The GET_CONSUMER_RUNNING_INFO answer (upstream ConsumerRunningInfo) names the owned queues."""
    from ferrymq.remoting import fastjson

    await cluster.create_topic("F6", queues=1)
    consumer = PushConsumer("g-info", cluster.namesrv_addr)
    consumer.subscribe("F6", "*")
    consumer.register_listener(lambda msgs, ctx: None)
    await consumer.start()
    try:
        await wait_for(
            lambda: len([q for q in consumer.owned_queues() if q.topic == "F6"]) == 2,
            what="owns F6",
        )
        raw = fastjson.dumps(consumer.running_info())
        parsed = fastjson.loads(raw)
        owned = {
            (k.get("brokerName"), k.get("queueId"))
            for k in parsed["mqTable"]
            if k.get("topic") == "F6"
        }
        assert owned == {("broker-a", 0), ("broker-b", 0)}
        props = parsed["properties"]
        assert props["messageModel"] == "CLUSTERING"
        # upstream's keys, which mqadmin consumerStatus analyses (tests/interop/mqadmin)
        assert props["PROP_CONSUME_TYPE"] == "CONSUME_PASSIVELY"
        assert props["PROP_CONSUMEORDERLY"] == "false"
        assert props["PROP_NAMESERVER_ADDR"] == f"{cluster.namesrv_addr};"
        assert 0 < int(props["PROP_CONSUMER_START_TIMESTAMP"]) <= time.time() * 1000
        for info in parsed["mqTable"].values():
            assert {"lastPullTimestamp", "lastConsumeTimestamp", "locked"} <= info.keys()
    finally:
        await consumer.shutdown()


async def test_producer_introduces_itself_to_a_new_broker_at_once(cluster: LocalCluster) -> None:
    """The first route naming a broker triggers a heartbeat, so the broker knows the producer group
    well before the 30 s heartbeat (transaction check-backs go to known producers)."""
    await cluster.create_topic("F7", queues=1)
    async with Producer("pg-known", cluster.namesrv_addr) as producer:
        await producer.send(Message("F7", b"x"))

        def known() -> bool:
            return all(b.producers.channels_of("pg-known") for b in cluster.brokers.values())

        await wait_for(known, timeout=5, what="both brokers know the producer group")
