"""Master kill chaos: SYNC_MASTER + SYNC_FLUSH, a producer sending continuously, the master SIGKILLed
at random moments (5 times in the default run, 20 in the slow one). After every kill each
acknowledged message is readable from the slave at its queue offset; after each restart the master
catches the slave up again; at the end both serve every acknowledged message with no gap.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from pathlib import Path

import pytest
from ferrymq.broker.local_cluster import LocalCluster
from ferrymq.client.broker_api import BrokerApi, SendStatus
from ferrymq.client.errors import MQClientError
from ferrymq.client.producer import Producer
from ferrymq.message import Message
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.errors import RemotingError

from .cluster_helpers import broker_addr, ha_cluster, pin_ports, pull_queue, wait_slave_connected

TOPIC = "HaKillTopic"
QUEUES = 4
Acks = dict[tuple[int, int], bytes]


async def create_topic(client: RemotingClient, addr: str) -> None:
    request = RemotingCommand.request(
        RequestCode.UPDATE_AND_CREATE_TOPIC,
        {
            "topic": TOPIC,
            "defaultTopic": "TBW102",
            "readQueueNums": QUEUES,
            "writeQueueNums": QUEUES,
            "perm": 6,
            "topicFilterType": "SINGLE_TAG",
        },
    )
    reply = await client.invoke(addr, request)
    assert reply.code == ResponseCode.SUCCESS, reply.remark


async def produce(namesrv: str, acks: Acks, stop: asyncio.Event, seed: int) -> int:
    """Send until stopped; record (queue, offset) -> body of every SEND_OK. Returns sends tried."""
    rng = random.Random(seed)
    producer = Producer(
        "ha_kill_producer", namesrv, send_msg_timeout=3.0, retry_times_when_send_failed=0
    )
    await producer.start()
    tried = 0
    try:
        while not stop.is_set():
            tried += 1
            body = f"kill-{tried}-".encode() + bytes([tried % 256]) * rng.choice([10, 300, 3000])
            try:
                result = await producer.send(Message(TOPIC, body))
            except (MQClientError, RemotingError, OSError, TimeoutError):
                # master down or restarting: not acknowledged, nothing to check
                await asyncio.sleep(0.05)
                continue
            if result.status is SendStatus.SEND_OK:
                acks[(result.queue.queue_id, result.queue_offset)] = body
            else:
                await asyncio.sleep(0.02)  # SLAVE_NOT_AVAILABLE while the slave reconnects
    finally:
        await producer.shutdown()
    return tried


async def check_broker_has(api: BrokerApi, addr: str, acks: Acks, timeout: float) -> int:
    """Every ack is served by ``addr`` at its queue offset, queues gap-free; retried until dispatch
    catches up or ``timeout``. Returns the number of messages found."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        problems: list[str] = []
        found = 0
        for queue_id in range(QUEUES):
            try:
                msgs = await pull_queue(api, addr, TOPIC, queue_id)
            except (MQClientError, RemotingError) as exc:
                problems.append(f"queue {queue_id}: pull failed: {exc}")
                continue
            found += len(msgs)
            offsets = [m.queue_offset for m in msgs]
            if offsets != list(range(len(msgs))):
                problems.append(f"queue {queue_id} offsets not contiguous from 0")
            by_offset = {m.queue_offset: m.body for m in msgs}
            for (qid, qoff), body in acks.items():
                if qid == queue_id and by_offset.get(qoff) != body:
                    problems.append(f"acked message at queue {qid} offset {qoff} missing/different")
        if not problems:
            return found
        if loop.time() > deadline:
            raise AssertionError(f"{addr}: {len(problems)} problems, e.g. {problems[:3]}")
        await asyncio.sleep(0.2)


async def run_kills(cluster: LocalCluster, kills: int, seed: int) -> None:
    rng = random.Random(seed)
    client = RemotingClient()
    api = BrokerApi(client)
    acks: Acks = {}
    stop = asyncio.Event()
    master_addr, slave_addr = broker_addr(cluster, 0), broker_addr(cluster, 1)
    pin_ports(cluster.brokers[0])
    await wait_slave_connected(client, master_addr, 30)
    await create_topic(client, master_addr)
    # the slave learns the topic by slave sync before the first kill can need it
    await check_broker_has(api, slave_addr, {}, 30)
    producer = asyncio.create_task(produce(cluster.namesrv_addr, acks, stop, seed))
    try:
        for kill in range(kills):
            # a random moment: after a random number of new acknowledged sends, plus jitter
            target = len(acks) + rng.randint(10, 120)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 60
            while len(acks) < target:
                assert not producer.done(), producer.exception()
                assert loop.time() < deadline, f"kill {kill}: producer stuck at {len(acks)} acks"
                await asyncio.sleep(0.01)
            await asyncio.sleep(rng.uniform(0, 0.3))
            cluster.brokers[0].proc.kill()
            await asyncio.to_thread(cluster.brokers[0].proc.wait, 30)
            acked_before_kill = dict(acks)
            found = await check_broker_has(api, slave_addr, acked_before_kill, 20)
            assert found >= len(acked_before_kill)
            await asyncio.to_thread(cluster.restart_broker, 0)
            await wait_slave_connected(client, master_addr, 30)
        # let the producer land some messages on the last master incarnation too
        target = len(acks) + 20
        while len(acks) < target:
            assert not producer.done(), producer.exception()
            await asyncio.sleep(0.01)
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(producer, 30)
    final = dict(acks)
    assert len(final) > kills * 10
    await check_broker_has(api, master_addr, final, 20)
    await check_broker_has(api, slave_addr, final, 20)
    await client.close()


async def test_master_killed_five_times_loses_no_acknowledged_message(tmp_path: Path) -> None:
    with ha_cluster(tmp_path / "cluster") as cluster:
        await run_kills(cluster, kills=5, seed=20261122)


@pytest.mark.slow
async def test_master_killed_twenty_times_soak(tmp_path: Path) -> None:
    with ha_cluster(tmp_path / "cluster", file_size=256 * 1024) as cluster:
        await run_kills(cluster, kills=20, seed=7)
