"""A lost in-sync replica leaves the SyncStateSet within a bound (issue 34, item 2).

With ``allAckInSyncStateSet`` every write waits for every member. A member that stops
acknowledging (cut off by a partition; here frozen with SIGSTOP, which leaves its TCP connection
open, as a silent partition does) stalled every write until the HA link's housekeeping timeout
closed its connection: 20 s (``haHousekeepingInterval``), each send answered
FLUSH_SLAVE_TIMEOUT after 5 s meanwhile. Now the master drops a member whose acknowledgements
have not advanced for ``haMaxTimeSlaveNotCatchup`` (3 s) while it had more for it, so writes
resume within about that plus a heartbeat interval. After SIGCONT the replica catches up and
joins again; every acknowledged message is on every replica exactly once.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
import time
from pathlib import Path

import pytest
from ferrymq.client.broker_api import BrokerApi
from ferrymq.remoting.client import RemotingClient

from .failover_helpers import (
    Recorder,
    failover_cluster,
    group_state,
    produce,
    wait_healthy,
    wait_until,
)
from .test_failover_chaos import prepare, verify_round


async def test_a_frozen_member_leaves_the_sync_state_set_and_writes_resume(
    tmp_path: Path, record_property: pytest.RecordProperty
) -> None:
    with failover_cluster(tmp_path / "cluster") as cluster:
        client = RemotingClient()
        api = BrokerApi(client)
        rec = Recorder()
        stop = asyncio.Event()
        master = await prepare(client, cluster)
        lost = next(b for b in (1, 2, 3) if b != master)
        frozen = cluster.brokers[lost - 1]
        producer = asyncio.create_task(produce(cluster.namesrv_addr, rec, stop, 7))
        try:
            await wait_until("acks before the freeze", lambda: _count(rec, 50), 60)
            os.kill(frozen.pid, signal.SIGSTOP)
            frozen_at = time.monotonic()
            try:

                async def shrunk() -> bool:
                    s = await group_state(client, cluster.controller_addr)
                    return lost not in s.get("syncStateSet", [lost])

                # the HA link's housekeeping (20 s) would drop it too: the bound must be shorter
                await wait_until("the frozen replica out of the SyncStateSet", shrunk, 15)
                before = len(rec.acks)
                await wait_until("acks without it", lambda: _count(rec, before + 30), 30)
            finally:
                os.kill(frozen.pid, signal.SIGCONT)
            resumed = rec.first_ack_after(frozen_at + 0.5)
            assert resumed is not None
            # the longest gap between two acks from the freeze on: the stall writes saw
            gaps = [b - a for a, b in itertools.pairwise(rec.ack_times) if b > frozen_at]
            stall = max(gaps)
            record_property("failover_outage", f"write stall with a frozen member {stall:.2f}s")
            await wait_healthy(client, cluster, timeout=60)
            after = len(rec.acks)
            await wait_until("more acks", lambda: _count(rec, after + 30), 30)
        finally:
            stop.set()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(producer, 30)
        await verify_round(client, api, cluster, dict(rec.acks))
        log = cluster.brokers[master - 1].log_path.read_text(errors="replace")
        assert "haMaxTimeSlaveNotCatchup" in log, "the master never said why the member left"
        print(f"\nwrite stall with a frozen member: {stall:.2f} s")
        await client.close()


async def _count(rec: Recorder, n: int) -> bool:
    return len(rec.acks) >= n
