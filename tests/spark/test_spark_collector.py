"""``ferrymq admin snapshot`` against a real NameServer and broker on 127.0.0.1, then the reports.

Known state: 40 messages over 4 queues; group ``pull-g`` committed offset 3 on every queue and
went away (so its backlog is exactly 40 - 12); group ``push-g`` has two live push consumers.
"""

from __future__ import annotations

import asyncio
import functools
from collections import Counter
from pathlib import Path

import polling
import pytest
from ferrymq.broker.app import BrokerApp
from ferrymq.broker.config import BrokerConfig
from ferrymq.client import AdminClient, Message, Producer, PullConsumer, PushConsumer
from ferrymq.client.broker_api import PullStatus
from ferrymq.namesrv.app import NamesrvApp
from ferrymq.namesrv.config import NamesrvConfig
from ferrymq.snapshot.collector import collect_to, groups_from, parse_running_info
from ferrymq.snapshot.writer import read_snapshot
from ferrymq.store.config import MessageStoreConfig

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

TOPIC = "SnapT"


# a Spark job and push-consumer rebalancing take tens of seconds on a shared machine
wait_for = functools.partial(polling.wait_for, timeout=60, every=0.05)


async def scenario(root: Path) -> tuple[Path, Counter[int], dict[str, set[int]]]:
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
    consumers: list[PushConsumer] = []
    try:
        async with AdminClient(namesrv.addr) as admin:
            await wait_for(lambda: admin.cluster_info(), what="broker registered")
            await admin.create_topic(TOPIC, read_queue_nums=4, write_queue_nums=4)

            async def routed() -> bool:
                return await admin.instance.namesrv.get_route(TOPIC) is not None

            await wait_for(routed, what="route")
        per_queue: Counter[int] = Counter()
        async with Producer("snap-pg", namesrv.addr) as producer:
            for i in range(40):
                res = await producer.send(Message(TOPIC, f"m{i}".encode()))
                per_queue[res.queue.queue_id] += 1
        async with PullConsumer("pull-g", namesrv.addr) as pull:
            for mq in await pull.fetch_subscribe_message_queues(TOPIC):
                result = await pull.pull(mq, "*", 0, 3)
                assert result.status is PullStatus.FOUND
                pull.update_consume_offset(mq, 3)
        for _ in range(2):
            c = PushConsumer("push-g", namesrv.addr)
            c.subscribe(TOPIC, "*")
            c.register_listener(lambda msgs, ctx: None)
            await c.start()
            consumers.append(c)

        def balanced() -> bool:
            owned = [{q for q in c.owned_queues() if q.topic == TOPIC} for c in consumers]
            # the group's retry topic (one queue) must have settled on exactly one owner too
            retry = [{q for q in c.owned_queues() if q.topic == "%RETRY%push-g"} for c in consumers]
            settled = sum(len(r) for r in retry) == 1
            return all(len(o) == 2 for o in owned) and not (owned[0] & owned[1]) and settled

        await wait_for(balanced, what="push consumers balanced", timeout=90)
        owned = {
            c.instance.client_id: {q.queue_id for q in c.owned_queues() if q.topic == TOPIC}
            for c in consumers
        }
        async with AdminClient(namesrv.addr) as admin:
            path, _ = await collect_to(admin, namesrv.addr, root / "snaps")
        return path, per_queue, owned
    finally:
        for c in consumers:
            await c.shutdown()
        await broker.stop()
        await namesrv.stop()


def test_collect_then_report(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path, per_queue, owned = asyncio.run(scenario(tmp_path))
    snap = read_snapshot(path)
    routes = [r for r in snap.routes if r.topic == TOPIC]
    assert [(r.brokerName, r.readQueueNums) for r in routes] == [("broker-a", 4)]
    queues = {r.queueId: r.maxOffset for r in snap.queues if r.topic == TOPIC}
    assert queues == dict(per_queue)
    pulled = {r.queueId: r for r in snap.offsets if r.group == "pull-g"}
    assert {q: r.consumerOffset for q, r in pulled.items()} == dict.fromkeys(range(4), 3)
    assert {q: r.brokerOffset for q, r in pulled.items()} == dict(per_queue)
    # exact time lag: the store time of the message at each lagging consumer offset is collected
    for r in pulled.values():
        assert r.oldestUnconsumedTimestamp is not None, snap.meta.notes
        assert r.lastTimestamp <= r.oldestUnconsumedTimestamp <= snap.meta.takenAt
    clients = [c for c in snap.clients if c.group == "push-g"]
    assert sorted(c.clientId for c in clients) == sorted(owned)
    views = [v for v in snap.views if v.group == "push-g"]
    assert [sorted(v.consumerIds) for v in views] == [sorted(owned)]
    # the broker relays GET_CONSUMER_RUNNING_INFO to each client: ownership is what they report
    assert all(c.runningInfo for c in clients), snap.meta.notes
    got: dict[str, set[int]] = {}
    for r in snap.ownership:
        if r.group == "push-g" and r.topic == TOPIC:
            got.setdefault(r.clientId, set()).add(r.queueId)
    assert got == owned

    from ferrymq_spark.jobs import backlog, rebalance_audit

    # ok_lag=0 lists every lagging queue (pull-g's lag of 7 per queue is within the default band)
    summary = backlog.run(
        spark, backlog.BacklogArgs(snapshots=path.parent, out=tmp_path / "b", ok_lag=0)
    )
    groups = {g["group"]: g for g in summary.groups}
    assert groups["pull-g"]["lag"] == 40 - 12
    sources = {q["timeLagSource"] for q in summary.laggingQueues if q["group"] == "pull-g"}
    assert sources == {"store"}
    audit = rebalance_audit.run(
        spark, rebalance_audit.AuditArgs(snapshots=path.parent, out=tmp_path / "r")
    )
    found = [(f["topic"], f["kind"], f["detail"]) for f in audit.findings if f["group"] == "push-g"]
    assert found == []


def test_parse_running_info_with_object_keys() -> None:
    from ferrymq.remoting import fastjson

    body = (
        b'{"properties":{"allocateMessageQueueStrategy":"AVG","messageModel":"CLUSTERING"},'
        b'"subscriptionSet":[{"topic":"T","subString":"a||b","expressionType":"TAG",'
        b'"subVersion":7}],"mqTable":{{"brokerName":"b","queueId":1,"topic":"T"}:'
        b'{"commitOffset":5}}}'
    )
    info = parse_running_info(fastjson.loads(body))
    assert info.strategy == "AVG" and info.owned == [("T", "b", 1)]
    assert info.subscriptions == [("T", "a||b", "TAG", 7)]
    with pytest.raises(ValueError):
        parse_running_info([])


def test_groups_from_offsets_and_retry_topics() -> None:
    assert groups_from(["T@g1", "%RETRY%g2@g2", "bad"], ["%RETRY%g3", "T"]) == {"g1", "g2", "g3"}
