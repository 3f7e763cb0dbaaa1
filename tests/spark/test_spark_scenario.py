"""Issue 20's SRE scenario at reduced scale: a real NameServer and broker on 127.0.0.1, a producer,
four consumer groups, several snapshots taken with the real collector, then both reports.

* ``healthy`` consumes everything (push consumer);
* ``slow`` consumes one message per pull with a pause between pulls, so it advances while its lag
  grows;
* ``stopped`` consumed the first round, then shut down before the first snapshot;
* ``split`` has two consumers subscribed with different tag expressions (``A`` and ``B``).

Expected: backlog healthy OK, slow WARN, stopped ERR; the rebalance audit reports split's
SUBSCRIPTION_MISMATCH naming both clients.
"""

from __future__ import annotations

import asyncio
import functools
import json
from pathlib import Path

import polling
import pytest
from ferrymq.broker.app import BrokerApp
from ferrymq.broker.config import BrokerConfig
from ferrymq.client import AdminClient, Message, Producer, PushConsumer
from ferrymq.message import MessageExt
from ferrymq.namesrv.app import NamesrvApp
from ferrymq.namesrv.config import NamesrvConfig
from ferrymq.snapshot.collector import collect_to
from ferrymq.store.config import MessageStoreConfig

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

TOPIC = "ScenarioT"
QUEUES = 4
ROUND = 120  # messages per production round, tags A and B alternating
SNAPSHOTS = 5


# a Spark job and push-consumer rebalancing take tens of seconds on a shared machine
wait_for = functools.partial(polling.wait_for, timeout=60, every=0.05)


class Counting:
    """A listener that counts what it was handed."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, msgs: list[MessageExt], ctx: object) -> None:
        self.count += len(msgs)


async def consumer(
    group: str, addr: str, expression: str, listener: Counting, **kw: float
) -> PushConsumer:
    c = PushConsumer(group, addr, **kw)  # type: ignore[arg-type]
    c.subscribe(TOPIC, expression)
    c.register_listener(listener)
    await c.start()
    return c


async def scenario(root: Path) -> tuple[Path, dict[str, str]]:
    """Run the cluster and the groups; returns the snapshot directory and split's client ids by
    expression."""
    namesrv = NamesrvApp(
        NamesrvConfig(listen_port=0, bind_address="127.0.0.1", rocketmq_home=root / "namesrv")
    )
    await namesrv.start()
    broker = BrokerApp(
        BrokerConfig(
            broker_cluster_name="C",
            broker_name="broker-a",
            broker_ip1="127.0.0.1",
            bind_address="127.0.0.1",
            listen_port=0,
            namesrv_addr=namesrv.addr,
        ),
        MessageStoreConfig(
            store_path_root_dir=root / "broker-a", mapped_file_size_commit_log=4 * 1024 * 1024
        ),
    )
    await broker.start()
    running: list[PushConsumer] = []
    try:
        async with AdminClient(namesrv.addr) as admin:

            async def registered() -> bool:
                return bool((await admin.cluster_info()).broker_addr_table)

            await wait_for(registered, what="broker registered")
            await admin.create_topic(TOPIC, read_queue_nums=QUEUES, write_queue_nums=QUEUES)

            async def routed() -> bool:
                return await admin.instance.namesrv.get_route(TOPIC) is not None

            await wait_for(routed, what="route")

        produced = 0
        async with Producer("scenario-pg", namesrv.addr) as producer:

            async def produce_round() -> None:
                nonlocal produced
                for i in range(ROUND):
                    msg = Message(TOPIC, b"x")
                    msg.tags = "A" if i % 2 else "B"
                    await producer.send(msg)
                produced += ROUND

            healthy, slow, stopped = Counting(), Counting(), Counting()
            running.append(await consumer("healthy", namesrv.addr, "*", healthy))
            # one message per pull and a pause between pulls: advancing, but slower than produced
            running.append(
                await consumer(
                    "slow", namesrv.addr, "*", slow, pull_batch_size=1, pull_interval=0.5
                )
            )
            gone = await consumer("stopped", namesrv.addr, "*", stopped)
            split_ids = {}
            for expression in ("A", "B"):
                c = await consumer("split", namesrv.addr, expression, Counting())
                running.append(c)
                split_ids[expression] = c.instance.client_id

            await produce_round()
            await wait_for(lambda: stopped.count >= ROUND, what="the stopped group's first round")
            await gone.shutdown()  # persists its offsets: it consumed a bit, then stopped

            async with AdminClient(namesrv.addr) as admin:
                for _ in range(SNAPSHOTS):
                    await produce_round()
                    await wait_for(lambda: healthy.count >= produced, what="healthy caught up")
                    await wait_for(lambda: slow.count > 0, what="slow consuming")
                    path, _ = await collect_to(admin, namesrv.addr, root / "snaps")
        return path.parent, split_ids
    finally:
        for c in running:
            await c.shutdown()
        await broker.stop()
        await namesrv.stop()


def test_sre_scenario_reports(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from ferrymq_spark.jobs import backlog, rebalance_audit

    snaps, split_ids = asyncio.run(scenario(tmp_path))
    assert len(list(snaps.iterdir())) == SNAPSHOTS

    summary = backlog.run(spark, backlog.BacklogArgs(snapshots=snaps, out=tmp_path / "backlog"))
    status = {g["group"]: g["status"] for g in summary.groups}
    lag = {g["group"]: g["lag"] for g in summary.groups}
    assert status["healthy"] == "OK", summary.groups
    assert status["slow"] == "WARN", summary.groups
    assert status["stopped"] == "ERR", summary.groups
    assert lag["slow"] > 100 and lag["stopped"] == SNAPSHOTS * ROUND
    stopped_queues = {q["status"] for q in summary.laggingQueues if q["group"] == "stopped"}
    assert stopped_queues == {"STOP"}
    saved = json.loads((tmp_path / "backlog" / "summary.json").read_text())
    assert {g["group"]: g["status"] for g in saved["groups"]} == status

    audit = rebalance_audit.run(
        spark, rebalance_audit.AuditArgs(snapshots=snaps, out=tmp_path / "rebalance")
    )
    # a group-level finding (no topic): every client named, with its expression
    mismatches = [
        f for f in audit.findings if f["group"] == "split" and f["kind"] == "SUBSCRIPTION_MISMATCH"
    ]
    assert mismatches, audit.findings
    latest = mismatches[-1]
    assert latest["severity"] == "ERROR"
    assert sorted(latest["clients"]) == sorted(split_ids.values())
    for expression, client_id in split_ids.items():
        assert client_id in latest["detail"], latest["detail"]
        assert f"{TOPIC}={expression}" in latest["detail"], latest["detail"]
    # the groups that subscribe alike are not flagged
    assert not [
        f for f in audit.findings if f["kind"] == "SUBSCRIPTION_MISMATCH" and f["group"] != "split"
    ]
    html = (tmp_path / "rebalance" / "report.html").read_text()
    assert "SUBSCRIPTION_MISMATCH" in html and split_ids["A"] in html and split_ids["B"] in html
