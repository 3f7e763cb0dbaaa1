"""A replica learns its master's HA address whenever it becomes known (issue 34, item 1).

A controller-mode group whose replicas start together (a StatefulSet's pods) could leave one
replica outside replication for good: it registered before the master published its HA address,
was told "master 2, epoch 1" with no HA address, and later answers of the same epoch (which did
carry the address) were ignored because the master had not changed
(``shared/evidence/controller-start-race.log``).

- ``test_a_replica_told_no_ha_address_connects_once_it_is_published``: the interleaving forced
  (a stand-in master registered with the real controller publishes its HA address only after the
  real replica joined); the old code never connects.
- ``test_parallel_starts_put_every_replica_in_the_sync_state_set``: NameServer, controller and 3
  replicas launched at once, every replica in the SyncStateSet within 30 s, every round: 10
  rounds in the default run, the issue's 30 in ``test_parallel_starts_30_rounds`` (slow).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path

import pytest
from ferrymq.broker.controller_client import BrokerIdentity, ControllerClient, epoch_cache_body
from ferrymq.broker.controller_cluster import ControllerLocalCluster
from ferrymq.broker.role_decisions import SlaveStep, slave_step
from ferrymq.controller.protocol import ControllerRequestCode as Req
from ferrymq.controller.protocol import ReplicaInfo
from ferrymq.remoting.channel import Channel
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.server import RemotingServer

from .failover_helpers import (
    GROUP,
    group_state,
    runtime_info,
    wait_until,
)

# the default run: 10 rounds (6-18 s each on a shared 2-core machine); the 30 rounds
# in the slow variant
DEFAULT_ROUNDS = int(os.environ.get("FERRYMQ_PARALLEL_START_ROUNDS", "10"))


def test_slave_steps() -> None:
    no_ha = ReplicaInfo(2, "127.0.0.1:1", "", 1)
    with_ha = ReplicaInfo(2, "127.0.0.1:1", "127.0.0.1:2", 1)
    assert slave_step(no_ha, following=None, known_epoch=None) is SlaveStep.WAIT
    assert slave_step(ReplicaInfo(None, "", "", 1), following=None, known_epoch=1) is SlaveStep.WAIT
    assert slave_step(with_ha, following=None, known_epoch=None) is SlaveStep.FOLLOW
    # the master followed since start-up, its HA address published only now: point at it
    assert slave_step(with_ha, following="127.0.0.1:1", known_epoch=1) is SlaveStep.POINT
    assert (
        slave_step(
            ReplicaInfo(2, "127.0.0.1:1", "127.0.0.1:2", 2), following="127.0.0.1:1", known_epoch=1
        )
        is SlaveStep.FOLLOW
    )


def _cluster(data_dir: Path, slaves: int) -> ControllerLocalCluster:
    return ControllerLocalCluster(
        data_dir,
        groups=1,
        slaves=slaves,
        namesrv_port=0,
        broker_port=0,
        heartbeat_timeout_ms=3000,
        heartbeat_interval_ms=300,
        scan_interval_ms=200,
    )


async def test_a_replica_told_no_ha_address_connects_once_it_is_published(tmp_path: Path) -> None:
    cluster = _cluster(tmp_path, slaves=0)
    stand_in = RemotingServer("127.0.0.1", 0, name="stand-in-master")

    async def epoch_cache(channel: Channel, request: RemotingCommand) -> RemotingCommand:
        return request.response(ResponseCode.SUCCESS, None, None, epoch_cache_body([], 0))

    stand_in.register(Req.GET_BROKER_EPOCH_CACHE, epoch_cache)
    connections: list[str] = []

    async def on_ha_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(str(writer.get_extra_info("peername")))
        writer.close()

    ha_listener = await asyncio.start_server(on_ha_connection, "127.0.0.1", 0)
    ha_addr = f"127.0.0.1:{ha_listener.sockets[0].getsockname()[1]}"
    client = RemotingClient()
    publish = asyncio.Event()
    beating: asyncio.Task[None] | None = None
    try:
        await stand_in.start()
        cluster.namesrv = cluster._spawn(
            "namesrv", ["namesrv", "--listen-port", "0", "--bind", cluster.host]
        )
        await asyncio.to_thread(cluster._wait_ready, cluster.namesrv)
        await asyncio.to_thread(cluster.start_controller)
        master = ControllerClient(
            client,
            [cluster.controller_addr],
            BrokerIdentity(cluster.cluster_name, GROUP, 2, f"127.0.0.1:{stand_in.port}"),
        )
        args = {"epoch": 0, "max_offset": 0, "timeout_ms": 30000, "ha_addr": ""}
        first = await master.register(**args)  # type: ignore[arg-type]
        assert (first.master_broker_id, first.master_ha_addr) == (2, "")

        async def heartbeats() -> None:
            # the master's heartbeats keep it alive, publishing its HA address only when told
            while True:
                await master.heartbeat(**{**args, "ha_addr": ha_addr if publish.is_set() else ""})  # type: ignore[arg-type]
                # one heartbeat period, cut short by the publish. Not asyncio.wait_for on the
                # event: once it is set, 3.11's wait_for can swallow the cancel that ends this
                # loop, which then spun until the test timed out (seen in a CI run)
                waiter = asyncio.ensure_future(publish.wait())
                try:
                    await asyncio.wait({waiter}, timeout=0.3)
                finally:
                    waiter.cancel()
                if publish.is_set():
                    await asyncio.sleep(0.3)  # the heartbeat period once published

        beating = asyncio.create_task(heartbeats())
        # the real replica joins now: master 2 of epoch 1, no HA address yet
        spec = cluster.broker_specs()[0]
        spec.broker_id = 3
        # in a thread: the stand-in master's server and heartbeats run on this loop meanwhile
        replica = await asyncio.to_thread(cluster.start_broker, spec)
        replica_addr = f"{cluster.host}:{replica.port}"
        info = await runtime_info(client, replica_addr)
        assert info["controllerIsMaster"] == "false", info
        assert info["controllerInSyncStateSet"] == "false", info
        publish.set()
        await wait_until(
            "the replica's HA connection to the published address", lambda: _true(connections), 30
        )
        state = await group_state(client, cluster.controller_addr)
        assert state["masterEpoch"] == 1, state  # the same epoch: no election helped it
    finally:
        if beating is not None:
            beating.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await beating
        await asyncio.to_thread(cluster.stop)
        ha_listener.close()
        await stand_in.stop()
        await client.close()


async def _true(items: list[str]) -> bool:
    return bool(items)


@pytest.mark.timeout(900)
async def test_parallel_starts_put_every_replica_in_the_sync_state_set(
    tmp_path: Path, record_property: pytest.RecordProperty
) -> None:
    await _parallel_starts(tmp_path, DEFAULT_ROUNDS, record_property)


@pytest.mark.slow
@pytest.mark.timeout(3600)
async def test_parallel_starts_30_rounds(
    tmp_path: Path, record_property: pytest.RecordProperty
) -> None:
    await _parallel_starts(tmp_path, 30, record_property)


async def _parallel_starts(
    tmp_path: Path, rounds: int, record_property: pytest.RecordProperty
) -> None:
    client = RemotingClient()
    waited: list[float] = []
    try:
        for n in range(rounds):
            cluster = _cluster(tmp_path / f"round-{n}", slaves=2)
            loop = asyncio.get_running_loop()
            try:
                await asyncio.to_thread(cluster.start_all_at_once)
                started = loop.time()

                async def all_in(c: ControllerLocalCluster = cluster) -> bool:
                    state = await group_state(client, c.controller_addr)
                    return sorted(state.get("syncStateSet", [])) == [1, 2, 3]

                await wait_until(f"round {n}: SyncStateSet [1, 2, 3]", all_in, 30)
                waited.append(loop.time() - started)
            finally:
                await asyncio.to_thread(cluster.stop)
    finally:
        await client.close()
    record_property(
        "parallel_start", f"{rounds} rounds, SyncStateSet full after max {max(waited):.1f} s"
    )
