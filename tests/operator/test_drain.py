"""Drained scale-in: the pure assessment, and the admin calls against real ferrymq brokers
(a NameServer and two broker groups as child processes on 127.0.0.1)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from ferrymq.broker.local_cluster import LocalCluster
from ferrymq.client.admin import AdminClient
from ferrymq.client.allocate import MessageQueue
from ferrymq.client.errors import NoRouteError
from ferrymq.client.producer import Producer
from ferrymq.message import Message
from ferrymq.remoting.bodies import PERM_WRITE
from ferrymq_operator.drain import (
    Backlog,
    DrainUnavailable,
    GroupLag,
    RemotingDrainAdmin,
    UnreadTopic,
    assess,
    backlog_of,
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


def test_a_reader_of_the_topic_elsewhere_has_read_nothing_here() -> None:
    # the scale 2 -> 3 -> 2 of the real-node suite: "g-host" read node-host on groups 0 and 1,
    # group 2 (new) got 40 messages and no offsets at all; the drain saw no consumer group there
    queues = {"node-host": {0: (0, 10), 1: (0, 10), 2: (0, 10), 3: (0, 10)}}
    lags, unread = backlog_of(queues, {}, {"node-host": ["g-host"]})
    assert lags == {"g-host": 40} and unread == []
    result = assess("orders-broker-2", [GroupLag("g-host", 40, False)], unread)
    assert not result.drained and result.reason == "DrainBlocked" and "g-host" in result.message


def test_offsets_here_count_from_the_committed_offset_and_the_queue_minimum() -> None:
    queues = {"t": {0: (5, 10), 1: (0, 4)}}
    offsets = {"t@a": {0: 7}, "t@b": {0: 10, 1: 4}}
    lags, unread = backlog_of(queues, offsets, {"t": ["a", "c"]})
    # a: queue 0 from 7 (3), queue 1 never read (4); b: read everything; c: read nothing here
    assert lags == {"a": 7, "b": 0, "c": 9} and unread == []


def test_a_topic_nobody_reads_blocks_and_is_named() -> None:
    queues = {"orders": {0: (0, 3)}, "%RETRY%billing": {0: (0, 2)}, "%DLQ%billing": {0: (0, 9)}}
    lags, unread = backlog_of(queues, {}, {})
    # a retry topic is read by its group; dead letters are not waited for
    assert lags == {"billing": 2}
    assert unread == [UnreadTopic("orders", 3)]
    result = assess("orders-broker-2", [GroupLag("billing", 0, True)], unread)
    assert result.reason == "DrainBlocked" and "orders (3)" in result.message
    assert assess("b", [GroupLag("billing", 0, True)], [UnreadTopic("orders", 0)]).drained


# --- real brokers ---


async def poll_lags(
    drain: RemotingDrainAdmin, namesrv: str, addr: str, expected: list[GroupLag]
) -> list[GroupLag]:
    deadline = asyncio.get_running_loop().time() + 15
    while True:
        lags = (await drain.lags(namesrv, addr)).groups
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
        lags = (await drain.lags(cluster.namesrv_addr, draining)).groups
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


async def test_scale_in_waits_for_a_group_that_read_the_topic_only_elsewhere(
    cluster: LocalCluster,
) -> None:
    """The real-node suite's scale 2 -> 3 -> 2: a consumer group read the topic on the other
    group, the draining group got messages after that and was never pulled from. Its messages
    are unread by that group (before: no offsets there, so "all 0 consumer groups have consumed
    every message", the group and its claims were removed, 40 acknowledged messages lost)."""
    keep, draining = cluster.broker_addrs
    keep_name, name = cluster.group_name(0), cluster.group_name(1)
    topic, orphan = "drain-elsewhere", "drain-orphan"
    async with AdminClient(cluster.namesrv_addr) as admin:
        for addr in (keep, draining):
            await admin.create_topic(topic, broker_addr=addr, read_queue_nums=2, write_queue_nums=2)
        await admin.create_topic(
            orphan, broker_addr=draining, read_queue_nums=1, write_queue_nums=1
        )
        # "host-readers" read the topic on the group that stays (offsets there only)
        for q in range(2):
            await admin.instance.broker.update_consumer_offset(
                keep, "host-readers", MessageQueue(topic, keep_name, q), 0
            )

        async def routed_on(t: str) -> set[str]:
            # a topic no broker has registered yet has no route at all (NoRouteError)
            try:
                return {qd.broker_name for qd in (await admin.topic_route(t)).queue_datas}
            except NoRouteError:
                return set()

        deadline = asyncio.get_running_loop().time() + 30
        while True:
            if await routed_on(topic) >= {name, keep_name} and await routed_on(orphan):
                break
            assert asyncio.get_running_loop().time() < deadline, "routes never complete"
            await asyncio.sleep(0.1)

    producer = Producer("drain-elsewhere", cluster.namesrv_addr)
    await producer.start()
    try:
        on_draining = 0
        for i in range(20):
            result = await producer.send(Message(topic, f"e{i}".encode()))
            on_draining += result.queue.broker_name == name
        for i in range(3):
            await producer.send(Message(orphan, f"o{i}".encode()))
    finally:
        await producer.shutdown()
    assert on_draining > 0

    drain = RemotingDrainAdmin(timeout_seconds=5)
    deadline = asyncio.get_running_loop().time() + 15
    while True:  # the consume queues are dispatched from the commit log asynchronously
        backlog = await drain.lags(cluster.namesrv_addr, draining)
        lag = {g.consumer_group: g.lag for g in backlog.groups}.get("host-readers")
        if (lag == on_draining and backlog.unread) or asyncio.get_running_loop().time() > deadline:
            break
        await asyncio.sleep(0.1)
    assert GroupLag("host-readers", on_draining, False) in backlog.groups
    assert UnreadTopic(orphan, 3) in backlog.unread
    result = assess(name, backlog.groups, backlog.unread)
    assert not result.drained and result.reason == "DrainBlocked"
    assert "host-readers" in result.message and orphan in result.message
    assert isinstance(backlog, Backlog)
