"""``ferrymq admin reset-offset | consumer-status | topic-stats | lag`` as a user runs them: real
subprocesses against a real NameServer and broker on 127.0.0.1."""

from __future__ import annotations

import asyncio
import os
import sys

import pytest
from ferrymq.client import Producer
from ferrymq.client.admin import AdminClient

from .obs_helpers import Consumer, ObsCluster, produce, wait_for

pytestmark = pytest.mark.timeout(180)


async def ferrymq(*args: str, timeout: float = 60.0) -> tuple[int, str, str]:
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "ferrymq.cli.main",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        out, err = await proc.communicate()
        raise AssertionError(f"ferrymq {args} timed out: {out.decode()} {err.decode()}") from None
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def committed(admin: AdminClient, group: str, topic: str) -> int:
    stats = await admin.consume_stats(group, topic)
    return sum(w.consumer_offset for w in stats.offset_table.values())


async def test_admin_cli_offsets_status_stats_and_lag(obs_cluster: ObsCluster) -> None:
    ns = obs_cluster.namesrv_addr
    topic, group = "CliLagT", "cli-lag-g"
    await obs_cluster.create_topic(topic, queues=2)
    async with Producer("cli-p", ns) as producer:
        await produce(producer, topic, 30)
    consumer = Consumer(obs_cluster, group, topic)
    await consumer.start()
    try:
        await wait_for(lambda: consumer.count >= 30, what="consumed")
        async with AdminClient(ns) as admin:

            async def all_committed() -> bool:
                return await committed(admin, group, topic) == 30

            await wait_for(all_committed, what="committed")

            rc, out, err = await ferrymq("admin", "topic-stats", "-n", ns, "-t", topic)
            assert rc == 0, err
            assert "messages stored: 30" in out

            rc, out, err = await ferrymq(
                "admin", "consumer-status", "-n", ns, "-g", group, "-t", topic
            )
            assert rc == 0, err
            assert consumer.instance.client_id in out

            rc, out, err = await ferrymq(
                "admin", "lag", "-n", ns, "-g", group, "--interval", "0.3", "--window", "5"
            )
            assert rc == 0, err
            row = next(line for line in out.splitlines() if topic in line)
            assert " OK " in row and " 0 " in row

            # back to the start: the live consumer reads all 30 again
            rc, out, err = await ferrymq(
                "admin", "reset-offset", "-n", ns, "-g", group, "-t", topic, "--offset", "0"
            )
            assert rc == 0, err
            await wait_for(lambda: consumer.count >= 60, what="consumed again after the reset")
    finally:
        await consumer.stop()

    # nobody consumes now: lag of 10 after new sends, ETA not clearing, status over --watch
    async with Producer("cli-p2", ns) as producer:
        await produce(producer, topic, 10)
    rc, out, err = await ferrymq(
        "admin",
        "lag",
        "-n",
        ns,
        "-g",
        group,
        "--watch",
        "--count",
        "4",
        "--interval",
        "0.3",
        "--window",
        "5",
    )
    assert rc == 0, err
    row = [line for line in out.splitlines() if topic in line][-1]
    assert " 10 " in row and "not clearing" in row and " no" in row


async def test_admin_cli_bad_input(obs_cluster: ObsCluster) -> None:
    ns = obs_cluster.namesrv_addr
    rc, _, err = await ferrymq(
        "admin", "reset-offset", "-n", ns, "-g", "g", "-t", "NoSuchTopic", "--timestamp", "now"
    )
    assert rc == 1 and "TOPIC_NOT_EXIST" in err
    rc, _, err = await ferrymq("admin", "reset-offset", "-n", ns, "-g", "g", "-t", "T")
    assert rc == 2 and "exactly one of --timestamp and --offset" in err
    rc, _, err = await ferrymq(
        "admin", "reset-offset", "-n", ns, "-g", "g", "-t", "T", "--timestamp", "yesterday"
    )
    assert rc == 2 and "not epoch ms" in err
    rc, _, err = await ferrymq("admin", "consumer-status", "-n", ns, "-g", "g", "-t", "NoSuchTopic")
    assert rc == 1 and "TOPIC_NOT_EXIST" in err
