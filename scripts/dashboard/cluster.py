"""A cluster for looking at rocketmq-dashboard by hand: ferrymq or Apache RocketMQ 5.4.0 (the
interop launchers), one broker group with a slave, on 127.0.0.1, with the same topics, groups,
messages and lag, and a live producer and consumer left running until SIGINT/SIGTERM.

    .venv/bin/python scripts/dashboard/cluster.py ferrymq|apache DATA_DIR

Prints ``NAMESRV <host:port>`` once everything is seeded. Not a test: docs/dashboard/README.md.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

from ferrymq.broker.local_cluster import LocalCluster, pick_free_port
from ferrymq.client import ConsumeFromWhere, Message, Producer, PushConsumer
from ferrymq.client.admin import AdminClient
from ferrymq.remoting import bodies
from interop.reference import ApacheCluster, pick_broker_port

HOST = "127.0.0.1"
ORDERS, AUDIT = "DashOrders", "DashAudit"
LAGGING, CAUGHT_UP = "DashBilling", "DashShipping"
PRODUCER_GROUP = "DashProducerGroup"


async def wait_committed(admin: AdminClient, group: str, topic: str, want: int) -> None:
    """Until ``group`` has committed ``want`` messages of ``topic`` (polling with a deadline)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 120
    while True:
        try:
            stats = await admin.consume_stats(group, topic)
            if sum(w.consumer_offset for w in stats.offset_table.values()) >= want:
                return
        except Exception:  # the group's stats appear with its first commit
            pass
        if loop.time() > deadline:
            raise TimeoutError(f"{group} did not commit {want} messages of {topic}")
        await asyncio.sleep(0.5)


async def send(producer: Producer, topic: str, count: int, start: int) -> None:
    for i in range(start, start + count):
        msg = Message(topic, f"{topic} body {i}".encode())
        msg.tags = "TagA" if i % 2 == 0 else "TagB"
        msg.keys = f"{topic}-key-{i}"
        await producer.send(msg)


async def seed_and_hold(namesrv: str, stop: asyncio.Event) -> None:
    async with AdminClient(namesrv) as admin:
        await admin.create_topic(
            ORDERS, cluster="DefaultCluster", read_queue_nums=4, write_queue_nums=4
        )
        await admin.create_topic(
            AUDIT, cluster="DefaultCluster", read_queue_nums=2, write_queue_nums=2
        )
        for group in (LAGGING, CAUGHT_UP):
            await admin.create_subscription_group(
                bodies.SubscriptionGroupConfig(group_name=group), cluster="DefaultCluster"
            )
        producer = Producer(PRODUCER_GROUP, namesrv)
        await producer.start()
        await send(producer, ORDERS, 20, 0)
        await send(producer, AUDIT, 6, 0)
        # LAGGING consumes the first 20 of ORDERS and goes offline; 12 more arrive: lag 12
        lagging = PushConsumer(
            LAGGING, namesrv, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
        )
        lagging.subscribe(ORDERS, "*")
        lagging.register_listener(lambda msgs, ctx: None)
        await lagging.start()
        await wait_committed(admin, LAGGING, ORDERS, 20)
        await lagging.shutdown()
        await send(producer, ORDERS, 12, 20)
        # CAUGHT_UP stays online on both topics (connections, client info, lag 0)
        online = PushConsumer(
            CAUGHT_UP, namesrv, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
        )
        online.subscribe(ORDERS, "*")
        online.subscribe(AUDIT, "TagA || TagB")
        online.register_listener(lambda msgs, ctx: None)
        await online.start()
        await wait_committed(admin, CAUGHT_UP, ORDERS, 32)
        await wait_committed(admin, CAUGHT_UP, AUDIT, 6)
        print(f"NAMESRV {namesrv}", flush=True)
        await stop.wait()
        await online.shutdown()
        await producer.shutdown()


async def main(which: str, data_dir: Path) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    cluster: LocalCluster | ApacheCluster
    if which == "ferrymq":
        # fixed ports (not 0): a slave at master + 4 with its VIP channel at port - 2, as
        # `ferrymq local-cluster` lays them out
        cluster = LocalCluster(
            data_dir,
            groups=1,
            slaves=1,
            namesrv_port=pick_free_port(HOST),
            broker_port=pick_broker_port(HOST),
            mapped_file_size_commit_log=8 * 1024 * 1024,
        )
    else:
        cluster = ApacheCluster(data_dir, groups=1, slaves=1)
    await asyncio.to_thread(cluster.start)
    try:
        await seed_and_hold(cluster.namesrv_addr, stop)
    finally:
        await asyncio.to_thread(cluster.stop)


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("ferrymq", "apache"):
        sys.exit("usage: cluster.py ferrymq|apache DATA_DIR")
    asyncio.run(main(sys.argv[1], Path(sys.argv[2])))
