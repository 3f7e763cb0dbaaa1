"""A slave that starts before its master (the pods of a new group start in parallel on Kubernetes)
finds the master at once, not at its next periodic registration.

A slave learns its master from the NameServer's answer to its registration. Started first, it
registers before the master did and hears no master; it used to wait a whole
registerNameServerPeriod (30 s by default) before asking again, and for all that time its
SYNC_MASTER answered every send SLAVE_NOT_AVAILABLE although the group was routed and its pods
Ready (the real-node suite's scale 2 -> 3: none of 120 sends reached the new group). Now the slave
registers again after 1 s, doubling up to 5 s, until it is named a master.

Real processes on 127.0.0.1: a NameServer, then the slave, then its SYNC_MASTER, both with a 60 s
registration period, so the old behaviour cannot pass within the 45 s this test polls.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from ferrymq.broker.local_cluster import BrokerSpec, LocalCluster, pick_free_port
from ferrymq.broker.register import MASTER_RETRY_S, next_wait
from ferrymq.client.admin import AdminClient
from ferrymq.client.broker_api import SendStatus
from ferrymq.client.errors import MQClientError
from ferrymq.client.producer import Producer
from ferrymq.message import Message

GROUP = "late-master"
TOPIC = "slave-first"
PERIOD = {"registerNameServerPeriod": "60000"}


def test_a_slave_without_master_retries_quickly_then_waits_the_period() -> None:
    waits = []
    retry = MASTER_RETRY_S
    for _ in range(8):
        wait, retry = next_wait(30.0, retry, wants_master=True)
        waits.append(wait)
    assert waits == [1.0, 2.0, 4.0, 5.0, 5.0, 5.0, 5.0, 5.0]
    assert next_wait(3.0, 2.0, wants_master=True) == (2.0, 3.0)  # never beyond the period
    # named a master (or not a slave): the period, and the quick retry starts over next time
    assert next_wait(30.0, 16.0, wants_master=False) == (30.0, MASTER_RETRY_S)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    # group "broker-a" only gives LocalCluster its NameServer; the group under test is added below
    with LocalCluster(
        tmp_path, groups=1, namesrv_port=0, broker_port=0, mapped_file_size_commit_log=1 << 20
    ) as running:
        yield running


async def test_a_slave_started_before_its_master_replicates_at_once(
    cluster: LocalCluster,
) -> None:
    slave_port, master_port = pick_free_port("127.0.0.1"), pick_free_port("127.0.0.1")
    cluster.start_broker(BrokerSpec(GROUP, 1, slave_port, {"brokerRole": "SLAVE", **PERIOD}))
    cluster.start_broker(BrokerSpec(GROUP, 0, master_port, {"brokerRole": "SYNC_MASTER", **PERIOD}))
    master = f"127.0.0.1:{master_port}"
    async with AdminClient(cluster.namesrv_addr) as admin:
        await admin.create_topic(TOPIC, broker_addr=master, read_queue_nums=1, write_queue_nums=1)
    producer = Producer("slave-first", cluster.namesrv_addr)
    await producer.start()
    statuses: list[str] = []
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 45  # < the 60 s period: only a quick re-registration passes
        while loop.time() < deadline:
            try:
                result = await producer.send(Message(TOPIC, b"replicated"))
            except MQClientError as error:  # no route yet, or SLAVE_NOT_AVAILABLE as an error
                statuses.append(type(error).__name__)
            else:
                statuses.append(result.status.name)
                if result.status is SendStatus.SEND_OK:
                    break
            await asyncio.sleep(0.2)  # polling the broker with a deadline
    finally:
        await producer.shutdown()
    assert statuses and statuses[-1] == "SEND_OK", statuses[-5:]
