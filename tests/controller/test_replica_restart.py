"""A replica's restart (what a planned roll does to every slave) with allAckInSyncStateSet, the
operator's default in controller mode: the master keeps acknowledging once the controller has
dropped the absent replica from the SyncStateSet, and the replica rejoins it when it is back.

On the real node a 1 x 2 group without allAck answered SLAVE_NOT_AVAILABLE to every send while
its only replica restarted (SYNC_MASTER waits for "a slave"); this is the path that replaces it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from ferrymq.broker.controller_cluster import ControllerLocalCluster
from ferrymq.client import Producer
from ferrymq.client.broker_api import SendStatus
from ferrymq.message import Message
from ferrymq.remoting.client import RemotingClient

from .failover_helpers import (
    TOPIC,
    addr_of,
    create_topic,
    group_state,
    has_topic,
    wait_until,
)


async def test_master_acks_while_its_only_replica_restarts(tmp_path: Path) -> None:
    cluster = ControllerLocalCluster(
        tmp_path / "cluster",
        groups=1,
        slaves=1,
        namesrv_port=0,
        broker_port=0,
        flush_disk_type="SYNC_FLUSH",
        all_ack_in_sync_state_set=True,
        heartbeat_timeout_ms=3000,
        heartbeat_interval_ms=300,
        scan_interval_ms=200,
    )
    with cluster:
        client = RemotingClient()

        async def both_in_sync() -> dict[str, object] | None:
            s = await group_state(client, cluster.controller_addr)
            ok = s.get("masterBrokerId") is not None and len(s.get("syncStateSet", [])) == 2
            return s if ok else None

        state = await wait_until("2 in-sync replicas", both_in_sync, 60)
        master = int(state["masterBrokerId"])  # type: ignore[call-overload]
        replica = 3 - master
        await create_topic(client, addr_of(cluster, master))
        await wait_until(
            "topic on the replica", lambda: has_topic(client, addr_of(cluster, replica)), 30
        )
        async with Producer("replica-restart-p", cluster.namesrv_addr) as producer:
            first = await producer.send(Message(TOPIC, b"before"))
            assert first.status == SendStatus.SEND_OK

            cluster.brokers[replica - 1].proc.kill()
            await asyncio.to_thread(cluster.brokers[replica - 1].proc.wait, 30)
            statuses: list[str] = []

            async def acked_without_the_replica() -> bool:
                try:
                    result = await producer.send(Message(TOPIC, b"alone"))
                except Exception as exc:  # refused sends are what the old path gave
                    statuses.append(type(exc).__name__)
                    return False
                statuses.append(result.status.name)
                return bool(result.status == SendStatus.SEND_OK)

            await wait_until("an ack with the replica down", acked_without_the_replica, 30)
            s = await group_state(client, cluster.controller_addr)
            assert s["syncStateSet"] == [master], s

            await asyncio.to_thread(cluster.restart_broker, replica - 1, kill=True)
            await wait_until("the replica back in the SyncStateSet", both_in_sync, 60)
            last = await producer.send(Message(TOPIC, b"after"))
            assert last.status == SendStatus.SEND_OK, statuses
        await client.close()
