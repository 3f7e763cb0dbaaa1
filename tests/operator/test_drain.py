"""Drained scale-in: the pure assessment, and the admin calls against real ferrymq brokers
(a NameServer and two broker groups as child processes on 127.0.0.1)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from ferrymq.broker.local_cluster import LocalCluster
from ferrymq.client.admin import AdminClient
from ferrymq.client.allocate import MessageQueue
from ferrymq.client.producer import Producer
from ferrymq.message import Message
from ferrymq.remoting.bodies import PERM_WRITE
from ferrymq_operator.drain import (
    DrainUnavailable,
    GroupLag,
    RemotingDrainAdmin,
    assess,
    consumer_groups_of,
)

# --- pure ---


def test_no_consumer_group_left_means_drained() -> None:
    result = assess("orders-1", [GroupLag("billing", 0, False), GroupLag("audit", 0, True)])
    assert result.drained and result.reason == "Drained"
    assert "2 consumer groups" in result.message
    assert assess("orders-1", []).drained


def test_online_consumers_with_lag_are_waited_for() -> None:
    result = assess("orders-1", [GroupLag("billing", 12, True), GroupLag("audit", 0, True)])
    assert not result.drained and result.reason == "Draining"
    assert "billing (12 left)" in result.message and "audit" not in result.message


def test_a_dead_consumer_group_blocks_and_is_named() -> None:
    lags = [GroupLag("billing", 3, True), GroupLag("dead-reports", 40, False)]
    result = assess("orders-1", lags)
    assert not result.drained and result.reason == "DrainBlocked"
    assert "no consumer of dead-reports is online" in result.message
    assert "nothing is deleted" in result.message
    # the largest backlog is listed first
    assert result.message.index("dead-reports (40") < result.message.index("billing (3")


def test_long_lists_are_shortened() -> None:
    lags = [GroupLag(f"g{i}", i + 1, True) for i in range(8)]
    assert "and 3 more" in assess("b", lags).message


def test_consumer_groups_from_offset_keys() -> None:
    keys = ["orders@billing", "%RETRY%billing@billing", "x@audit", "bad", "t@"]
    assert consumer_groups_of(keys) == ["audit", "billing"]


# --- real brokers ---


async def poll_lags(
    drain: RemotingDrainAdmin, namesrv: str, addr: str, expected: list[GroupLag]
) -> list[GroupLag]:
    deadline = asyncio.get_running_loop().time() + 15
    while True:
        lags = await drain.lags(namesrv, addr)
        if lags == expected or asyncio.get_running_loop().time() > deadline:
            return lags
        await asyncio.sleep(0.1)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(
        tmp_path_factory.mktemp("drain"),
        groups=2,
        namesrv_port=0,
        broker_port=0,
        cluster_name="orders",
        mapped_file_size_commit_log=1024 * 1024,
    ) as running:
        yield running


async def test_drain_against_real_brokers(cluster: LocalCluster) -> None:
    keep, draining = cluster.broker_addrs
    name = cluster.group_name(1)
    topic = "drain-orders"
    async with AdminClient(cluster.namesrv_addr) as admin:
        await admin.create_topic(topic, broker_addr=draining, read_queue_nums=2, write_queue_nums=2)
        await admin.create_topic(topic, broker_addr=keep, read_queue_nums=2, write_queue_nums=2)
        broker = admin.instance.broker
        queues = [MessageQueue(topic, name, q) for q in range(2)]
        # nothing consumed yet: a consumer group that committed offset 0 and went away
        for mq in queues:
            await broker.update_consumer_offset(draining, "reports", mq, 0)

        # each broker re-registers with the NameServer after a topic change, asynchronously: wait
        # until the route names both groups, or the producer may only ever see one of them
        deadline = asyncio.get_running_loop().time() + 30
        while True:
            route = await admin.topic_route(topic)
            if {qd.broker_name for qd in route.queue_datas} >= {name, cluster.group_name(0)}:
                break
            assert asyncio.get_running_loop().time() < deadline, "route never named both groups"
            await asyncio.sleep(0.1)

    producer = Producer("drain-test", cluster.namesrv_addr)
    await producer.start()
    try:
        sent_to_draining = 0
        for i in range(20):
            result = await producer.send(Message(topic, f"m{i}".encode()))
            sent_to_draining += result.queue.broker_name == name
        assert sent_to_draining > 0

        drain = RemotingDrainAdmin(timeout_seconds=5)
        await drain.stop_writes(cluster.namesrv_addr, name, draining)
        async with AdminClient(cluster.namesrv_addr) as admin:
            route = await admin.topic_route(topic)
        perms = {qd.broker_name: qd.perm for qd in route.queue_datas}
        assert perms[name] & PERM_WRITE == 0 and perms[cluster.group_name(0)] & PERM_WRITE

        # the consume queues are dispatched from the commit log asynchronously: poll
        expected = [GroupLag("reports", sent_to_draining, False)]
        lags = await poll_lags(drain, cluster.namesrv_addr, draining, expected)
        assert lags == expected
        blocked = assess(name, lags)
        assert blocked.reason == "DrainBlocked" and "reports" in blocked.message

        # an admin (or a consumer) moves the group on: the drain completes
        async with AdminClient(cluster.namesrv_addr) as admin:
            for mq in [MessageQueue(topic, name, q) for q in range(2)]:
                top = await admin.instance.broker.get_max_offset(draining, mq)
                await admin.instance.broker.update_consumer_offset(draining, "reports", mq, top)
        lags = await drain.lags(cluster.namesrv_addr, draining)
        assert lags == [GroupLag("reports", 0, False)]
        assert assess(name, lags).drained

        # a scale-in called off (spec.groups raised again) gives the group its writes back
        await drain.resume_writes(cluster.namesrv_addr, name, draining)
        async with AdminClient(cluster.namesrv_addr) as admin:
            route = await admin.topic_route(topic)
        assert all(qd.perm & PERM_WRITE for qd in route.queue_datas)
    finally:
        await producer.shutdown()
        async with AdminClient(cluster.namesrv_addr) as admin:
            await admin.add_write_perm(name)


async def test_unreachable_broker_is_reported_not_raised_raw(cluster: LocalCluster) -> None:
    drain = RemotingDrainAdmin(timeout_seconds=1)
    with pytest.raises(DrainUnavailable, match="cannot read consume stats"):
        await asyncio.wait_for(drain.lags(cluster.namesrv_addr, "127.0.0.1:1"), 30)
    with pytest.raises(DrainUnavailable, match="cannot stop writes"):
        await asyncio.wait_for(drain.stop_writes(cluster.namesrv_addr, "x", "127.0.0.1:1"), 30)
