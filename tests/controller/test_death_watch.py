"""The chaos tests' DeathWatch: a process the test did not end fails the next wait at once, with
how it ended and the end of its log; one the test killed itself does not."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from ferrymq.broker.local_cluster import LocalCluster

from .failover_helpers import GUARD, DeathWatch, wait_until


async def test_an_unexpected_death_fails_the_wait_with_its_signal_and_log(tmp_path: Path) -> None:
    with LocalCluster(
        tmp_path / "cluster",
        groups=1,
        slaves=1,
        namesrv_port=0,
        broker_port=0,
        mapped_file_size_commit_log=1024 * 1024,
    ) as cluster:
        watch = DeathWatch(cluster)
        token = GUARD.set(watch.check)
        try:
            master, slave = cluster.brokers
            watch.expect(master)
            master.proc.kill()  # the test's own kill: expected
            master.proc.wait(timeout=30)
            watch.check()
            slave.proc.send_signal(signal.SIGBUS)  # nobody asked for this one
            slave.proc.wait(timeout=30)

            async def never() -> bool:
                return False

            with pytest.raises(AssertionError) as failure:
                await wait_until("something", never, 30)
        finally:
            GUARD.reset(token)
        text = str(failure.value)
        assert "a process died on its own" in text
        assert f"broker-a-1 pid {slave.pid}: killed by SIGBUS" in text, text
        assert "Fatal Python error: Bus error" in text, text
        assert f"broker-a-0 pid {master.pid}: killed by SIGKILL (by the test)" in watch.report()
