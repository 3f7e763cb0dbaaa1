"""Fencing and the controller's own failures, with real processes.

- A master frozen with SIGSTOP for longer than the heartbeat timeout is replaced; after SIGCONT
  it acknowledges nothing it stored after the new master's epoch began, every acknowledged
  message survives exactly once, and it rejoins as a slave.
- With the controller down nobody is elected (the master's death changes nothing); restarted,
  the controller has lost no state and only then elects the successor.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from pathlib import Path

from ferrymq.client.broker_api import BrokerApi
from ferrymq.client.producer import Producer
from ferrymq.message import Message
from ferrymq.remoting.client import RemotingClient

from .failover_helpers import (
    KEEP_FROZEN_MEMBERS,
    TOPIC,
    Recorder,
    addr_of,
    failover_cluster,
    group_state,
    parse_epochs,
    produce,
    runtime_info,
    wait_healthy,
    wait_until,
)
from .test_failover_chaos import prepare, verify_round


async def test_frozen_master_never_acknowledges_after_a_new_master_exists(tmp_path: Path) -> None:
    with failover_cluster(tmp_path / "cluster") as cluster:
        client = RemotingClient()
        api = BrokerApi(client)
        rec = Recorder()
        stop = asyncio.Event()
        master = await prepare(client, cluster)
        state = await wait_healthy(client, cluster)
        epoch = int(state["masterEpoch"])
        frozen = cluster.brokers[master - 1]
        frozen_addr = addr_of(cluster, master)
        producer = asyncio.create_task(produce(cluster.namesrv_addr, rec, stop, 5))
        try:
            await wait_until("acks before the freeze", lambda: _count(rec, 50), 60)
            os.kill(frozen.pid, signal.SIGSTOP)
            try:

                async def elected() -> dict[str, object] | None:
                    s = await group_state(client, cluster.controller_addr)
                    new = s.get("masterBrokerId")
                    return s if new not in (None, master) else None

                new_state = await wait_until("a new master", elected, 30)
                assert int(new_state["masterEpoch"]) == epoch + 1
                before = len(rec.acks)
                await wait_until("acks on the new master", lambda: _count(rec, before + 30), 30)
            finally:
                os.kill(frozen.pid, signal.SIGCONT)
            resumed_at = time.monotonic()

            async def rejoined() -> bool:
                info = await runtime_info(client, frozen_addr)
                epochs = parse_epochs(info.get("epochFile", ""))
                return info["controllerIsMaster"] == "false" and epochs[-1][0] == epoch + 1

            await wait_until("the frozen master rejoined as a slave", rejoined, 60)
            after = len(rec.acks)
            await wait_until("more acks", lambda: _count(rec, after + 30), 30)
        finally:
            stop.set()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(producer, 30)
        await verify_round(client, api, cluster, dict(rec.acks))
        final = await wait_healthy(client, cluster)
        epochs = parse_epochs(
            (await runtime_info(client, addr_of(cluster, int(final["masterBrokerId"]))))[
                "epochFile"
            ]
        )
        new_epoch_start = dict(epochs)[epoch + 1]
        late = [
            (t, offset)
            for t, writer, offset in rec.writers
            if writer == frozen_addr and t >= resumed_at and offset >= new_epoch_start
        ]
        assert not late, f"the frozen master acknowledged writes of the new epoch: {late[:5]}"
        log = frozen.log_path.read_text(errors="replace")
        assert "superseded" in log, "the resumed master never noticed it was superseded"
        how = "re-executed to cut its tail" if "re-executing" in log else "demoted in place"
        print(f"\nresumed master {how}; epoch {epoch + 1} starts at {new_epoch_start}")
        await client.close()


async def burst(namesrv: str, *, count: int, size: int) -> int:
    """``count`` concurrent sends of incompressible ``size``-byte bodies; how many were acked."""
    producer = Producer(
        "failover_burst", namesrv, send_msg_timeout=3.0, retry_times_when_send_failed=0
    )
    await producer.start()
    try:
        results = await asyncio.gather(
            *(producer.send(Message(TOPIC, os.urandom(size))) for _ in range(count)),
            return_exceptions=True,
        )
    finally:
        await producer.shutdown()
    return sum(1 for r in results if not isinstance(r, BaseException))


async def _count(rec: Recorder, n: int) -> bool:
    return len(rec.acks) >= n


async def test_controller_down_elects_nobody_and_restarts_with_its_state(tmp_path: Path) -> None:
    with failover_cluster(tmp_path / "cluster") as cluster:
        client = RemotingClient()
        master = await prepare(client, cluster)
        before = await wait_healthy(client, cluster)
        assert cluster.controller is not None
        cluster.controller.proc.kill()
        cluster.controller.proc.wait(30)
        # the master dies while the controller is down
        cluster.brokers[master - 1].proc.kill()
        cluster.brokers[master - 1].proc.wait(30)
        others = [b for b in (1, 2, 3) if b != master]

        async def all_fenced_slaves() -> bool:
            infos = [await runtime_info(client, addr_of(cluster, b)) for b in others]
            return all(i["controllerIsMaster"] == "false" for i in infos)

        # two heartbeat timeouts: with a controller, an election would have happened by now
        deadline = time.monotonic() + 6.0
        while time.monotonic() < deadline:
            assert await all_fenced_slaves(), "a replica became master without a controller"
            await asyncio.sleep(0.2)
        await asyncio.to_thread(cluster.restart_controller, kill=False)
        restored = await group_state(client, cluster.controller_addr)
        for key in ("masterBrokerId", "masterEpoch", "syncStateSet", "replicas"):
            assert restored[key] == before[key], (key, restored[key], before[key])

        async def successor() -> dict[str, object] | None:
            s = await group_state(client, cluster.controller_addr)
            return s if s.get("masterBrokerId") in others else None

        after = await wait_until("an election after the restart", successor, 30)
        assert int(after["masterEpoch"]) == int(before["masterEpoch"]) + 1
        await client.close()


async def test_demoted_master_with_a_divergent_tail_cuts_it_and_rejoins(tmp_path: Path) -> None:
    """Both slaves frozen: the master stores sends it cannot get acknowledged (a tail nobody else
    has). Then the master freezes and the slaves resume: one is elected without that tail. The
    old master, resumed, must cut the tail (re-executing itself to do it with its store closed)
    and serve exactly the new master's queues."""
    with failover_cluster(
        tmp_path / "cluster", file_size=32 * 1024 * 1024, extra_conf=KEEP_FROZEN_MEMBERS
    ) as cluster:
        client = RemotingClient()
        api = BrokerApi(client)
        rec = Recorder()
        stop = asyncio.Event()
        master = await prepare(client, cluster)
        epoch = int((await wait_healthy(client, cluster))["masterEpoch"])
        slaves = [cluster.brokers[b - 1] for b in (1, 2, 3) if b != master]
        old = cluster.brokers[master - 1]
        producer = asyncio.create_task(produce(cluster.namesrv_addr, rec, stop, 11))
        try:
            await wait_until("acks", lambda: _count(rec, 50), 60)
            for s in slaves:
                os.kill(s.pid, signal.SIGSTOP)
            try:
                # more than the frozen slaves' sockets can buffer (a few MiB each): a tail
                # that stays on the master alone; none of it can be acknowledged
                stored = await burst(cluster.namesrv_addr, count=24, size=1024 * 1024)
                assert stored == 0, f"{stored} sends acknowledged with every replica frozen"
                os.kill(old.pid, signal.SIGSTOP)
            finally:
                for s in slaves:
                    os.kill(s.pid, signal.SIGCONT)
            try:

                async def elected() -> dict[str, object] | None:
                    st = await group_state(client, cluster.controller_addr)
                    return st if st.get("masterBrokerId") not in (None, master) else None

                await wait_until("a new master", elected, 30)
                after = len(rec.acks)
                await wait_until("acks on the new master", lambda: _count(rec, after + 20), 30)
            finally:
                os.kill(old.pid, signal.SIGCONT)

            async def rejoined() -> bool:
                info = await runtime_info(client, addr_of(cluster, master))
                epochs = parse_epochs(info.get("epochFile", ""))
                return info["controllerIsMaster"] == "false" and epochs[-1][0] == epoch + 1

            await wait_until("the old master rejoined as a slave", rejoined, 60)
        finally:
            stop.set()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(producer, 30)
        assert old.alive(), "re-execution keeps the process (same PID)"
        log = old.log_path.read_text(errors="replace")
        assert "re-executing (pid" in log, log[-3000:]
        assert "started again by re-execution" in log, log[-3000:]
        assert "CommitLog cut at offset" in log, log[-3000:]
        await verify_round(client, api, cluster, dict(rec.acks))
        await client.close()
