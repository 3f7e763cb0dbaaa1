"""Automatic failover with real processes: NameServer + controller + a group of 3 brokers
(master + 2 slaves, allAckInSyncStateSet, SYNC_FLUSH), a producer sending all along, and the
current master killed with SIGKILL at a random moment, N rounds (5 in the default run; 20 and 100
are marked slow).

After every round: a new master of the next epoch took over; every acknowledged message is
readable exactly once, in queue order, from the new master; the killed broker, restarted on its
data, rejoins as a slave (its divergent tail cut) and ends up serving the same queues; each
epoch's CommitLog range was written by a single broker. The write outage of every failover (kill
-> first acknowledged send) is printed as p50/max.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from pathlib import Path

import pytest
from ferrymq.broker.controller_cluster import ControllerLocalCluster
from ferrymq.client.broker_api import BrokerApi
from ferrymq.remoting.client import RemotingClient

from .failover_helpers import (
    Recorder,
    addr_of,
    check_acks_exactly_once,
    check_one_writer_per_epoch,
    create_topic,
    failover_cluster,
    group_state,
    has_topic,
    outage_summary,
    parse_epochs,
    produce,
    read_all,
    runtime_info,
    wait_healthy,
    wait_until,
)


async def prepare(client: RemotingClient, cluster: ControllerLocalCluster) -> int:
    state = await wait_healthy(client, cluster)
    master = int(state["masterBrokerId"])
    await create_topic(client, addr_of(cluster, master))
    for bid in (1, 2, 3):
        addr = addr_of(cluster, bid)
        await wait_until(f"topic on {addr}", lambda a=addr: has_topic(client, a), 30)
    return master


async def verify_round(
    client: RemotingClient,
    api: BrokerApi,
    cluster: ControllerLocalCluster,
    acks: dict[tuple[int, int], bytes],
) -> None:
    """Every replica serves the same queues holding every ack exactly once; one writer/epoch."""
    state = await wait_healthy(client, cluster)
    master_addr = addr_of(cluster, int(state["masterBrokerId"]))
    info = await runtime_info(client, master_addr)
    epochs = parse_epochs(info["epochFile"])
    assert epochs and epochs[-1][0] == state["masterEpoch"], (epochs, state)

    async def replicas_agree() -> bool:
        master_view = await read_all(api, master_addr)
        problems = check_acks_exactly_once(acks, master_view)
        problems += check_one_writer_per_epoch(epochs, master_view)
        assert not problems, problems[:5]
        for bid in (1, 2, 3):
            addr = addr_of(cluster, bid)
            if addr == master_addr:
                continue
            view = await read_all(api, addr)
            for q, msgs in master_view.items():
                mine = view[q]
                # read one after the other while sends go on: compare the common prefix
                common = min(len(mine), len(msgs))
                if [m.body for m in mine[:common]] != [m.body for m in msgs[:common]]:
                    raise AssertionError(f"replica {bid} queue {q} differs from the master")
            acked_tail = {
                q: max((o for (qq, o) in acks if qq == q), default=-1) for q in master_view
            }
            if any(len(view[q]) <= acked_tail[q] for q in view):
                return False  # still catching up
        return True

    await wait_until("replicas in agreement", replicas_agree, 60)


async def run_failovers(cluster: ControllerLocalCluster, rounds: int, seed: int) -> list[float]:
    rng = random.Random(seed)
    client = RemotingClient()
    api = BrokerApi(client)
    rec = Recorder()
    stop = asyncio.Event()
    outages: list[float] = []
    await prepare(client, cluster)
    producer = asyncio.create_task(produce(cluster.namesrv_addr, rec, stop, seed))
    try:
        for n in range(rounds):
            state = await wait_healthy(client, cluster)
            master, epoch = int(state["masterBrokerId"]), int(state["masterEpoch"])
            target = len(rec.acks) + rng.randint(10, 80)

            async def enough(t: int = target) -> bool:
                assert not producer.done(), producer
                return len(rec.acks) >= t

            await wait_until(f"round {n}: {target} acks", enough, 60)
            await asyncio.sleep(rng.uniform(0, 0.3))
            victim = cluster.brokers[master - 1]
            victim.proc.kill()
            killed_at = time.monotonic()
            await asyncio.to_thread(victim.proc.wait, 30)
            acked_before = dict(rec.acks)

            async def elected(old: int = master, e: int = epoch) -> dict[str, object] | None:
                s = await group_state(client, cluster.controller_addr)
                new = s.get("masterBrokerId")
                return s if new not in (None, old) and int(s["masterEpoch"]) == e + 1 else None

            new_state = await wait_until(f"round {n}: a new master", elected, 30)
            new_addr = addr_of(cluster, int(new_state["masterBrokerId"]))

            async def acked_after_kill(at: float = killed_at) -> float | None:
                return rec.first_ack_after(at)

            first = await wait_until(f"round {n}: a send acknowledged again", acked_after_kill, 30)
            outages.append(first - killed_at)
            problems = check_acks_exactly_once(acked_before, await read_all(api, new_addr))
            assert not problems, f"round {n}: new master {new_addr}: {problems[:5]}"
            # the killed broker comes back on its data and must rejoin as a slave
            await asyncio.to_thread(cluster.restart_broker, master - 1, kill=True)
            info = await runtime_info(client, addr_of(cluster, master))
            assert info["controllerIsMaster"] == "false", info
            await verify_round(client, api, cluster, dict(rec.acks))
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(producer, 30)
    await verify_round(client, api, cluster, dict(rec.acks))
    await client.close()
    print(
        f"\n{outage_summary(outages)}; {len(rec.acks)} acknowledged of {rec.tried} sends "
        f"({rec.failures} not acknowledged)"
    )
    assert len(rec.acks) > rounds * 10
    return outages


async def test_master_killed_five_times_no_acknowledged_message_lost(tmp_path: Path) -> None:
    with failover_cluster(tmp_path / "cluster") as cluster:
        outages = await run_failovers(cluster, rounds=5, seed=20261124)
    assert len(outages) == 5


@pytest.mark.slow
async def test_master_killed_twenty_times(tmp_path: Path) -> None:
    with failover_cluster(tmp_path / "cluster") as cluster:
        await run_failovers(cluster, rounds=20, seed=17)


@pytest.mark.slow
async def test_master_killed_a_hundred_times(tmp_path: Path) -> None:
    with failover_cluster(tmp_path / "cluster") as cluster:
        await run_failovers(cluster, rounds=100, seed=100)
