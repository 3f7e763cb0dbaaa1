"""Broker restarts under SYNC_FLUSH: no acknowledged message is lost, even to kill -9, and a consumer
group resumes from its committed offsets."""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Iterator

import pytest
from e2e_helpers import wait_for
from ferrymq.broker.local_cluster import LocalCluster
from ferrymq.client import ConsumeFromWhere, Message, Producer, PushConsumer, SendStatus
from ferrymq.message import MessageExt

TOPIC = "Restart_Topic"


@pytest.fixture
def sync_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(
        tmp_path_factory.mktemp("restart"),
        groups=1,
        namesrv_port=0,
        broker_port=0,
        flush_disk_type="SYNC_FLUSH",
        mapped_file_size_commit_log=1024 * 1024,
    ) as running:
        yield running


async def produce(cluster: LocalCluster, start: int, count: int) -> None:
    async with Producer(f"Restart_P{start}", cluster.namesrv_addr) as producer:
        for i in range(start, start + count):
            msg = Message(TOPIC, f"r{i}".encode() + b"x" * (i % 700))
            msg.keys = [f"rk{i}"]
            result = await producer.send(msg)
            assert result.status is SendStatus.SEND_OK


async def consume(
    cluster: LocalCluster, group: str, expect: int, settle: float = 1.0
) -> collections.Counter[str]:
    got: collections.Counter[str] = collections.Counter()

    def listener(msgs: list[MessageExt], context: object) -> None:
        for m in msgs:
            got[m.body.split(b"x", 1)[0].decode()] += 1

    consumer = PushConsumer(
        group, cluster.namesrv_addr, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
    )
    consumer.subscribe(TOPIC, "*")
    consumer.register_listener(listener)
    await consumer.start()
    try:
        await wait_for(lambda: sum(got.values()) >= expect, 60, f"{expect} messages for {group}")
        # anything beyond the expected set (a redelivery) would show up now
        await asyncio.sleep(settle)
    finally:
        await consumer.shutdown()  # commits the consumed offsets to the broker
    return got


async def test_restart_loses_no_acked_message_and_offsets_resume(
    sync_cluster: LocalCluster,
) -> None:
    await produce(sync_cluster, 0, 150)
    first = await consume(sync_cluster, "Restart_G", 150)
    assert set(first) == {f"r{i}" for i in range(150)}

    addr = sync_cluster.broker_addrs[0]
    sync_cluster.restart_broker(0)  # graceful: offsets and metadata saved, abort file removed
    assert sync_cluster.broker_addrs[0] == addr, "a restarted broker keeps its address"
    await produce(sync_cluster, 150, 150)
    sync_cluster.restart_broker(0, kill=True)  # kill -9 right after the acks

    resumed = await consume(sync_cluster, "Restart_G", 150)
    assert set(resumed) == {f"r{i}" for i in range(150, 300)}, "did not resume at the commit"
    everything = await consume(sync_cluster, "Restart_Fresh", 300)
    assert set(everything) == {f"r{i}" for i in range(300)}
    assert max(everything.values()) == 1
