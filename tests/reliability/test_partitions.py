"""Network partitions of a controller-mode group of 3, with real processes (issue 34, item 4).

Each process runs in a network namespace of its own (``netns.py``); ``iptables``/``tc`` inside
those namespaces cut, heal and slow links while a producer (one send at a time, no retries) and
a PushConsumer run throughout, from a namespace of their own. Scenarios:

- ``master``: the master cut off from the controller and both slaves (not from clients and the
  NameServer): it fences itself, a slave is elected, after the heal it rejoins as a slave;
- ``slave``: one slave cut off from everyone: it leaves the SyncStateSet (writes stall about
  haMaxTimeSlaveNotCatchup) and joins again after the heal;
- ``controller``: the controller cut off: no election, masters fence themselves when their lease
  ends; after the heal the brokers reconnect at once (no stalled connection reused);
- ``flapping``: the master's links to the controller and slaves cut and healed every 2 s, for
  20 s (a minute in the slow variant);
- ``slow``: 200 ms added to everything the master sends to its slaves (a relay in each broker's
  namespace in front of its HA port: this kernel has no ``netem`` qdisc).

After the rounds: every acknowledged message is readable exactly once, in queue order, on the
master and on both replicas; no two brokers wrote in one epoch (each ack's storing broker comes
from its offset message id, each record's from its storeHost); the consumer received every
acknowledged message; the write outage of each round is reported (p50, max) with how long after
the heal writes resumed, and how many NameServer route polls (0.2 s apart), from then on, did
not name the current master. Settings: heartbeat timeout 3 s, interval 300 ms, scan 200 ms.

Default run: 2 rounds of each scenario; ``-m slow``: 20 rounds (``FERRYMQ_PARTITION_ROUNDS`` for
another count, e.g. 100).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from controller.failover_helpers import (
    GROUP,
    TOPIC,
    Recorder,
    check_acks_exactly_once,
    check_one_writer_per_epoch,
    create_topic,
    group_state,
    has_topic,
    parse_epochs,
    produce,
    read_all,
    runtime_info,
    wait_until,
)
from ferrymq.client.broker_api import BrokerApi
from ferrymq.client.namesrv_api import NamesrvApi
from ferrymq.client.push_consumer import PushConsumer
from ferrymq.remoting.client import RemotingClient
from netns import HA_PORT, HA_PROXY_PORT, DelayProxy, NetnsCluster, Network, network

SCENARIOS = ["master", "slave", "controller", "flapping", "slow"]
HOLD_S = 8.0  # how long a cut lasts
FLAP_S = 20.0  # how long a link flaps (cut 2 s, healed 2 s); the slow variant: a minute
SOAK_FLAP_S = 60.0
SLOW_ROUNDS = int(os.environ.get("FERRYMQ_PARTITION_ROUNDS", "20"))


@dataclass
class RoundResult:
    outage: float  # longest time without an ack from the fault's start to recovery
    resumed_after_heal: float  # from the heal to the first ack after it (0: never stopped)
    route_misses: int  # route polls after the heal not naming the current master
    route_polls: int


@dataclass
class Run:
    rec: Recorder = field(default_factory=Recorder)
    delivered: set[bytes] = field(default_factory=set)
    # (time, brokerId 0's address in the route or "") every 0.2 s
    routes: list[tuple[float, str]] = field(default_factory=list)
    results: list[RoundResult] = field(default_factory=list)


@pytest.fixture
def net() -> Iterator[Network]:
    with network(f"fmq{os.getpid() % 100000}-") as n:
        yield n


def _cluster(net: Network, data_dir: Path) -> NetnsCluster:
    return NetnsCluster(
        net,
        data_dir,
        flush_disk_type="SYNC_FLUSH",
        mapped_file_size_commit_log=4 * 1024 * 1024,
        extra_conf={"haSlaveSyncInterval": "1000"},
        all_ack_in_sync_state_set=True,
        heartbeat_timeout_ms=3000,
        heartbeat_interval_ms=300,
        scan_interval_ms=200,
    )


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.timeout(900)
async def test_partition(
    scenario: str, net: Network, tmp_path: Path, record_property: pytest.RecordProperty
) -> None:
    await _partition_rounds(scenario, 2, net, tmp_path, record_property, FLAP_S)


@pytest.mark.slow
@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.timeout(7200)
async def test_partition_soak(
    scenario: str, net: Network, tmp_path: Path, record_property: pytest.RecordProperty
) -> None:
    await _partition_rounds(scenario, SLOW_ROUNDS, net, tmp_path, record_property, SOAK_FLAP_S)


async def _partition_rounds(
    scenario: str,
    rounds: int,
    net: Network,
    tmp_path: Path,
    prop: pytest.RecordProperty,
    flap_s: float,
) -> None:
    cluster = _cluster(net, tmp_path / "cluster")
    proxies: dict[int, DelayProxy] = {}
    if scenario == "slow":
        # every replica's HA port behind a relay whose delay the round sets (no netem here)
        for bid in (1, 2, 3):
            node = f"b{bid}"
            net.redirect(node, HA_PORT, HA_PROXY_PORT)
            proxies[bid] = DelayProxy(net, node, HA_PROXY_PORT, (net.ip(node), HA_PORT))
            proxies[bid].start()
    cluster.start()  # on the loop's thread: children die with the thread that started them
    try:
        run = await asyncio.to_thread(
            net.run_in, "cli", lambda: _drive(scenario, rounds, cluster, net, proxies, flap_s)
        )
    finally:
        cluster.stop()
        for proxy in proxies.values():
            proxy.stop()
    outages = [r.outage for r in run.results]
    resumed = [r.resumed_after_heal for r in run.results]
    misses = sum(r.route_misses for r in run.results)
    polls = sum(r.route_polls for r in run.results)
    summary = (
        f"{scenario}: {rounds} rounds, outage p50 {statistics.median(outages):.2f}s "
        f"max {max(outages):.2f}s; writes resumed after heal p50 "
        f"{statistics.median(resumed):.2f}s max {max(resumed):.2f}s; route without the "
        f"current master in {misses}/{polls} polls after heals; {len(run.rec.acks)} acks"
    )
    prop("failover_outage", summary)
    print("\n" + summary)


async def _drive(
    scenario: str,
    rounds: int,
    cluster: NetnsCluster,
    net: Network,
    proxies: dict[int, DelayProxy],
    flap_s: float,
) -> Run:
    """Runs in the client's namespace: the workload, the faults, the checks."""
    client = RemotingClient()
    api = BrokerApi(client)
    run = Run()
    stop = asyncio.Event()
    tasks: list[asyncio.Task[Any]] = []
    consumer = PushConsumer("partition_consumer", cluster.namesrv_addr)
    try:
        state = await _healthy(client, cluster)
        master = int(state["masterBrokerId"])
        await create_topic(client, cluster.broker_addr(master))
        for bid in (1, 2, 3):
            addr = cluster.broker_addr(bid)
            await wait_until(f"topic on {addr}", lambda a=addr: has_topic(client, a), 60)
        consumer.register_listener(lambda msgs, ctx: run.delivered.update(m.body for m in msgs))
        consumer.subscribe(TOPIC)
        await consumer.start()
        tasks.append(asyncio.create_task(produce(cluster.namesrv_addr, run.rec, stop, 11)))
        tasks.append(asyncio.create_task(_poll_route(cluster, run, stop)))
        for n in range(rounds):
            result = await _one_round(scenario, n, client, cluster, net, run, proxies, flap_s)
            run.results.append(result)
    finally:
        stop.set()
        for task in tasks:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(task, 30)
    try:
        await _check_end(client, api, cluster, run)
    finally:
        await consumer.shutdown()
        await client.close()
    return run


async def _one_round(
    scenario: str,
    n: int,
    client: RemotingClient,
    cluster: NetnsCluster,
    net: Network,
    run: Run,
    proxies: dict[int, DelayProxy],
    flap_s: float,
) -> RoundResult:
    state = await _healthy(client, cluster)
    master = int(state["masterBrokerId"])
    m, slaves = f"b{master}", [f"b{b}" for b in (1, 2, 3) if b != master]
    before = len(run.rec.acks)
    await wait_until(f"round {n}: acks before the fault", lambda: _acks(run, before + 20), 60)
    start = time.monotonic()
    # the fault's duration is the scenario (not a wait for state)
    if scenario == "master":
        net.cut(m, ["ctl", *slaves])
        await asyncio.sleep(HOLD_S)
        net.heal(m)
    elif scenario == "slave":
        net.cut(slaves[0])
        await asyncio.sleep(HOLD_S)
        net.heal(slaves[0])
    elif scenario == "controller":
        net.cut("ctl")
        await asyncio.sleep(HOLD_S)
        net.heal("ctl")
    elif scenario == "flapping":
        until = start + flap_s
        while time.monotonic() < until:
            net.cut(m, ["ctl", *slaves])
            await asyncio.sleep(2.0)
            net.heal(m)
            await asyncio.sleep(2.0)
    elif scenario == "slow":
        proxies[master].delay_s = 0.2  # what the master sends its slaves arrives 200 ms later
        await asyncio.sleep(HOLD_S)
        proxies[master].delay_s = 0.0
    else:
        raise AssertionError(scenario)
    healed = time.monotonic()
    after = len(run.rec.acks)
    await _healthy(client, cluster)
    await wait_until(f"round {n}: acks after the heal", lambda: _acks(run, after + 20), 60)
    done = time.monotonic()
    times = [t for t in run.rec.ack_times if start - 5 <= t <= done]
    gaps = [b - a for a, b in itertools.pairwise(times) if b > start]
    outage = max(gaps, default=0.0)
    first = run.rec.first_ack_after(healed)
    last_before = max((t for t in run.rec.ack_times if t <= healed), default=start)
    stopped = healed - last_before > 1.0  # writes were stopped at the heal
    resumed = (first - healed) if (first is not None and stopped) else 0.0
    final = await group_state(client, cluster.controller_addr)
    current = cluster.broker_addr(int(final["masterBrokerId"]))
    # from when writes went on after the heal (before, during an election, there is no master
    # to name): every poll must name the master the controller names
    serving = healed + resumed
    polls = [(t, a) for t, a in run.routes if serving <= t <= done]
    misses = sum(1 for _, a in polls if a != current)
    return RoundResult(outage, resumed, misses, len(polls))


async def _check_end(
    client: RemotingClient, api: BrokerApi, cluster: NetnsCluster, run: Run
) -> None:
    state = await _healthy(client, cluster)
    master_addr = cluster.broker_addr(int(state["masterBrokerId"]))
    acks = dict(run.rec.acks)
    assert not run.rec.clashes, f"two acks for one queue offset: {run.rec.clashes[:3]}"
    epochs = parse_epochs((await runtime_info(client, master_addr))["epochFile"])
    problems: list[str] = []
    for bid in (1, 2, 3):
        addr = cluster.broker_addr(bid)

        async def caught_up(a: str = addr) -> bool:
            queues = await read_all(api, a)
            return not check_acks_exactly_once(acks, queues)

        with contextlib.suppress(AssertionError):
            await wait_until(f"every ack on {addr}", caught_up, 60)
        queues = await read_all(api, addr)
        problems += [f"{addr}: {p}" for p in check_acks_exactly_once(acks, queues)]
        problems += [f"{addr}: {p}" for p in check_one_writer_per_epoch(epochs, queues)]
    assert not problems, "\n".join(problems[:20])
    bodies = set(acks.values())

    async def all_delivered() -> bool:
        return bodies <= run.delivered

    await wait_until("the consumer received every acknowledged message", all_delivered, 120)


async def _healthy(client: RemotingClient, cluster: NetnsCluster) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        state = await group_state(client, cluster.controller_addr)
        ok = (
            state.get("masterBrokerId") is not None
            and sorted(state.get("syncStateSet", [])) == [1, 2, 3]
            and len(state.get("alive", [])) == 3
        )
        return state if ok else None

    result: dict[str, Any] = await wait_until("the group healthy (3 in sync)", check, 120)
    return result


async def _poll_route(cluster: NetnsCluster, run: Run, stop: asyncio.Event) -> None:
    client = RemotingClient()
    names = NamesrvApi(client, [cluster.namesrv_addr], 1.0)
    try:
        while not stop.is_set():
            addr = ""
            with contextlib.suppress(Exception):
                route = await names.get_route(TOPIC)
                for bd in route.broker_datas if route is not None else []:
                    if bd.broker_name == GROUP:
                        addr = bd.broker_addrs.get(0, "")
            run.routes.append((time.monotonic(), addr))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.2)  # the poll cadence
    finally:
        await client.close()


async def _acks(run: Run, n: int) -> bool:
    return len(run.rec.acks) >= n
