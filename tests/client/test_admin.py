"""AdminClient against a real NameServer and two brokers: every admin code of issue 3."""

from __future__ import annotations

import pytest
from ferrymq.client import AdminClient, ConsumeFromWhere, Message, Producer, PushConsumer
from ferrymq.client.allocate import MessageQueue
from ferrymq.client.errors import MQClientError, NoRouteError
from ferrymq.remoting.bodies import PERM_WRITE, SubscriptionGroupConfig
from polling import wait_for

from .cluster import LocalCluster

pytestmark = pytest.mark.timeout(120)


async def test_cluster_topic_and_broker_admin(cluster: LocalCluster) -> None:
    async with AdminClient(cluster.namesrv_addr) as admin:
        masters = await admin.master_addrs("TestCluster")
        assert sorted(masters) == ["broker-a", "broker-b"]
        with pytest.raises(MQClientError, match="unknown"):
            await admin.master_addrs("NoSuchCluster")

        written = await admin.create_topic(
            "AdminT", cluster="TestCluster", read_queue_nums=3, write_queue_nums=3
        )
        assert sorted(written) == sorted(masters.values())
        for addr in masters.values():
            table = (await admin.topic_config(addr)).topic_config_table
            assert table["AdminT"].write_queue_nums == 3

        async def routed() -> bool:
            try:
                return len(await admin.topic_queues("AdminT", write=True)) == 6
            except NoRouteError:
                return False

        await wait_for(routed, what="AdminT routed on both brokers")
        assert "AdminT" in await admin.topic_list()

        config = await admin.broker_config(masters["broker-a"])
        assert config["brokerName"] == "broker-a"
        runtime = await admin.broker_runtime_info(masters["broker-a"])
        assert runtime  # a KV table of stats

        mq = MessageQueue("AdminT", "broker-a", 0)
        assert await admin.max_offset(mq) == 0
        async with Producer("pg", cluster.namesrv_addr) as producer:
            await producer.send_to_queue(Message("AdminT", b"one"), mq)
        assert await admin.max_offset(mq) == 1 and await admin.min_offset(mq) == 0
        stored = await admin.earliest_msg_store_time(mq)
        assert stored > 0
        assert await admin.search_offset(mq, stored + 60_000) == 1

        await admin.create_subscription_group(
            SubscriptionGroupConfig(group_name="admin-g"), cluster="TestCluster"
        )

        await admin.delete_topic("AdminT", cluster="TestCluster")
        assert "AdminT" not in await admin.topic_list()
        with pytest.raises(NoRouteError):
            await admin.topic_route("AdminT")
        with pytest.raises(MQClientError, match="characters"):
            await admin.create_topic("bad topic")


async def test_wipe_and_add_write_perm_moves_producers(cluster: LocalCluster) -> None:
    await cluster.create_topic("PermT", queues=2)
    async with AdminClient(cluster.namesrv_addr) as admin:
        counts = await admin.wipe_write_perm("broker-a")
        assert counts  # the broker and the NameServer answered
        assert not cluster.brokers["broker-a"].config.broker_permission & PERM_WRITE

        async def only_b() -> bool:
            return {q.broker_name for q in await admin.topic_queues("PermT", write=True)} == {
                "broker-b"
            }

        await wait_for(only_b, what="broker-a read-only in the route")
        async with Producer("pg", cluster.namesrv_addr) as producer:
            results = [await producer.send(Message("PermT", b"x")) for _ in range(6)]
        assert {r.queue.broker_name for r in results} == {"broker-b"}

        await admin.add_write_perm("broker-a")

        async def both() -> bool:
            return {q.broker_name for q in await admin.topic_queues("PermT", write=True)} == {
                "broker-a",
                "broker-b",
            }

        await wait_for(both, what="broker-a writable again")


async def test_group_admin_and_message_lookup(cluster: LocalCluster) -> None:
    await cluster.create_topic("GroupT", queues=1)
    consumer = PushConsumer(
        "admin-cg",
        cluster.namesrv_addr,
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
    )
    consumer.subscribe("GroupT", "*")
    seen: list[object] = []
    consumer.register_listener(lambda msgs, ctx: seen.extend(msgs))
    await consumer.start()
    try:
        async with Producer("pg", cluster.namesrv_addr) as producer:
            sent = []
            for i in range(4):
                msg = Message("GroupT", f"g{i}".encode())
                msg.keys = f"order-{i}"
                sent.append(await producer.send(msg))
        await wait_for(lambda: len(seen) == 4, timeout=20, what="consumed")
        await consumer.persist_offsets()
        async with AdminClient(cluster.namesrv_addr) as admin:
            conn = await admin.consumer_connection("admin-cg")
            assert consumer.instance.client_id in {c.client_id for c in conn.connection_set}
            assert "GroupT" in conn.subscription_table

            stats = await admin.consume_stats("admin-cg", "GroupT")
            assert sum(w.broker_offset for w in stats.offset_table.values()) == 4
            assert stats.compute_total_diff() == 0

            offsets = await admin.all_consumer_offsets(cluster.brokers["broker-a"].addr)
            assert "GroupT@admin-cg" in offsets.offset_table

            found = await admin.query_message_by_key("GroupT", "order-2")
            assert [m.body for m in found] == [b"g2"]
            by_offset_id = await admin.view_message(sent[1].offset_msg_id)
            assert by_offset_id.body == b"g1"
            by_client_id = await admin.view_message(sent[3].msg_id, topic="GroupT")
            assert by_client_id.body == b"g3"
            with pytest.raises(MQClientError):
                await admin.view_message("not-an-id")
            with pytest.raises(MQClientError, match="not online"):
                await admin.consumer_connection("nobody-here")
    finally:
        await consumer.shutdown()
