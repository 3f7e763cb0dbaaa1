"""Issue 23 item 9: a slave serves a topic created 1 s before its master was killed (real
processes: NameServer, SYNC_MASTER, SLAVE with the upstream 10 s metadata sync). Before, the topic
config reached the slave only by that sync, and the slave answered TOPIC_NOT_EXIST until the
master came back although the messages were replicated."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import orjson
from ferrymq.broker.local_cluster import LocalCluster
from ferrymq.client.broker_api import BrokerApi
from ferrymq.client.errors import MQClientError
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.errors import RemotingError
from ha.cluster_helpers import broker_addr, pull_queue, wait_slave_connected
from reliab_helpers import create_topic_request, send_request

TOPIC = "BornLate"
QUEUES = 2
GROWN = "Grown"  # a topic the slave knows with 1 queue, grown to 2 on the master


async def _wait_slave_serves(
    api: BrokerApi, slave: str, topic: str, bodies: dict[int, list[bytes]]
) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 8
    while True:
        got: dict[int, list[bytes]] | str
        try:
            got = {q: [m.body for m in await pull_queue(api, slave, topic, q)] for q in bodies}
        except (RemotingError, MQClientError) as exc:
            got = str(exc)
        if got == bodies:
            return
        assert loop.time() < deadline, f"slave serves {got!r} of {topic}, expected {bodies}"
        await asyncio.sleep(0.1)


async def test_slave_serves_topic_created_one_second_before_master_died(tmp_path: Path) -> None:
    cluster = LocalCluster(
        tmp_path / "cluster",
        groups=1,
        slaves=1,
        namesrv_port=0,
        broker_port=0,
        flush_disk_type="SYNC_FLUSH",
        mapped_file_size_commit_log=1 << 20,
        # the upstream 10 s metadata sync: the topic cannot arrive by it within this test
        extra_conf={"brokerRole": "SYNC_MASTER", "haSlaveSyncInterval": "10000"},
    )
    with cluster:
        client = RemotingClient()
        api = BrokerApi(client)
        master, slave = broker_addr(cluster, 0), broker_addr(cluster, 1)
        try:
            await wait_slave_connected(client, master, 60)
            reply = await client.invoke(master, create_topic_request(GROWN, 1))
            assert reply.code == ResponseCode.SUCCESS, reply.remark
            sent = await client.invoke(master, send_request(GROWN, b"g0", queue_id=0))
            assert sent.code == ResponseCode.SUCCESS, sent.remark
            await _wait_slave_serves(api, slave, GROWN, {0: [b"g0"]})
            # let the slave's first sync round pass: the topic must be new to it
            await asyncio.sleep(0.5)  # not synchronisation: only makes the topic "late"
            created_at = time.monotonic()
            reply = await client.invoke(master, create_topic_request(GROWN, 2))
            assert reply.code == ResponseCode.SUCCESS, reply.remark
            sent = await client.invoke(master, send_request(GROWN, b"g1", queue_id=1))
            assert sent.code == ResponseCode.SUCCESS, sent.remark
            reply = await client.invoke(master, create_topic_request(TOPIC, QUEUES))
            assert reply.code == ResponseCode.SUCCESS, reply.remark
            bodies: dict[int, list[bytes]] = {q: [] for q in range(QUEUES)}
            for i in range(10):
                body = f"late-{i}".encode()
                sent = await client.invoke(master, send_request(TOPIC, body, queue_id=i % QUEUES))
                # SYNC_MASTER: SEND_OK means the slave holds the message
                assert sent.code == ResponseCode.SUCCESS, sent.remark
                bodies[i % QUEUES].append(body)
            await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - created_at)))
            cluster.brokers[0].proc.kill()
            await asyncio.to_thread(cluster.brokers[0].proc.wait, 30)

            # 8 s: under the 10 s sync period (which needs a live master anyway)
            await _wait_slave_serves(api, slave, TOPIC, bodies)
            await _wait_slave_serves(api, slave, GROWN, {0: [b"g0"], 1: [b"g1"]})
            # the route clients use still leads to the slave
            route = await client.invoke(
                cluster.namesrv_addr,
                RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC}),
            )
            assert route.code == ResponseCode.SUCCESS, route.remark
            addrs = orjson.loads(route.body_bytes())["brokerDatas"][0]["brokerAddrs"]
            assert slave in addrs.values()
        finally:
            await client.close()
