"""A planned switchover (upstream ELECT_MASTER naming a replica) with real processes: while a
producer sends, mastership moves to a chosen in-sync replica; the old master, alive, stops
acknowledging, becomes a slave in place (no restart) and every acknowledged message stays
readable exactly once."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from ferrymq.client.broker_api import BrokerApi
from ferrymq.controller.protocol import ControllerRequestCode as Req
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.command import RemotingCommand

from .failover_helpers import (
    GROUP,
    Recorder,
    addr_of,
    failover_cluster,
    produce,
    runtime_info,
    wait_healthy,
    wait_until,
)
from .test_failover_chaos import prepare, verify_round


async def test_switchover_to_a_chosen_replica(tmp_path: Path) -> None:
    with failover_cluster(tmp_path / "cluster") as cluster:
        client = RemotingClient()
        api = BrokerApi(client)
        rec = Recorder()
        stop = asyncio.Event()
        master = await prepare(client, cluster)
        old_pid = cluster.brokers[master - 1].pid
        target = next(b for b in (1, 2, 3) if b != master)
        producer = asyncio.create_task(produce(cluster.namesrv_addr, rec, stop, 3))
        try:

            async def acks(n: int) -> bool:
                return len(rec.acks) >= n

            await wait_until("acks", lambda: acks(100), 60)
            reply = await client.invoke(
                cluster.controller_addr,
                RemotingCommand.request(
                    Req.CONTROLLER_ELECT_MASTER, {"brokerName": GROUP, "brokerId": target}
                ),
            )
            assert reply.code == 0, reply.remark

            async def switched() -> bool:
                old = await runtime_info(client, addr_of(cluster, master))
                new = await runtime_info(client, addr_of(cluster, target))
                return old["controllerIsMaster"] == "false" and new["controllerIsMaster"] == "true"

            await wait_until("the switchover", switched, 30)
            after = len(rec.acks)
            await wait_until("acks on the new master", lambda: acks(after + 50), 30)
        finally:
            stop.set()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(producer, 30)
        print(f"\nswitchover: {rec.failures} of {rec.tried} sends not acknowledged (no retries)")
        assert cluster.brokers[master - 1].pid == old_pid and cluster.brokers[master - 1].alive()
        state = await wait_healthy(client, cluster)
        assert state["masterBrokerId"] == target
        await verify_round(client, api, cluster, dict(rec.acks))
        await client.close()
