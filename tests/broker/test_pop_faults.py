"""POP and timer messages under faults, with brokers as processes (``LocalCluster``):

- a consumer dies with messages in flight and the broker is ``kill -9``-ed: after the restart
  another consumer gets every message not acked before the kill, once, and none acked before it;
- timer messages survive a ``kill -9`` of the broker: all delivered once, none early;
- the revive topic (checkpoints and acks) reaches a slave by replication like any topic.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from ferrymq.broker.local_cluster import LocalCluster
from ferrymq.client.pop_api import PopApi
from ferrymq.message import MessageConst
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.headers import PULL_FLAG_SUBSCRIPTION
from ferrymq.store.record import decode_messages
from raw_remoting import create_topic, send_message

GROUP = "pop_fault_cg"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path / "c", groups=1, namesrv_port=0, broker_port=0) as c:
        yield c


async def max_offset(client: RemotingClient, addr: str, topic: str, qid: int) -> int:
    r = await client.invoke(
        addr, RemotingCommand.request(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": qid})
    )
    return int(r.ext_fields.get("offset", "0")) if r.code == ResponseCode.SUCCESS else 0


async def test_kill_9_keeps_in_flight_and_acked_state(cluster: LocalCluster) -> None:
    topic = "PopKill"
    client = RemotingClient()
    try:
        addr = cluster.broker_addrs[0]
        await create_topic(client, addr, topic)
        bodies = [f"k{i}".encode() for i in range(40)]
        for body in bodies:
            await send_message(client, addr, topic, body, check=True)
        api = PopApi(client)
        # consumer A: pops 20, acks 10 (5 one by one, 5 in a batch), then dies holding 10
        popped: list = []  # type: ignore[type-arg]
        while len(popped) < 20:
            result = await api.pop(
                addr,
                "broker-a",
                group=GROUP,
                topic=topic,
                max_msg_nums=20 - len(popped),
                invisible_time_ms=4000,
                poll_time_ms=1000,
            )
            popped.extend(result.messages)
        handles = [m.properties[MessageConst.PROPERTY_POP_CK] for m in popped]
        for handle in handles[:5]:
            assert await api.ack(addr, GROUP, topic, handle)
        assert await api.batch_ack(addr, GROUP, topic, handles[5:10])
        acked = {m.body for m in popped[:10]}
        await asyncio.to_thread(cluster.restart_broker, 0, kill=True)
        addr = cluster.broker_addrs[0]
        # consumer B: everything not acked comes, once; nothing acked comes back
        got: list = []  # type: ignore[type-arg]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        while len(got) < 30 and loop.time() < deadline:
            result = await api.pop(
                addr,
                "broker-a",
                group=GROUP,
                topic=topic,
                invisible_time_ms=60_000,
                poll_time_ms=1000,
            )
            got.extend(result.messages)
        # one more long poll: nothing else shows up
        tail = await api.pop(addr, "broker-a", group=GROUP, topic=topic, poll_time_ms=3000)
        got.extend(tail.messages)
        counts = Counter(m.body for m in got)
        assert not acked & set(counts), (
            f"acked before the kill and delivered again: {acked & set(counts)}"
        )
        assert set(counts) == set(bodies) - acked
        assert max(counts.values()) == 1, (
            f"delivered twice: {[b for b, n in counts.items() if n > 1]}"
        )
        # the ten A held came back through the retry topic, attempt 2
        held = {m.body for m in popped[10:]}
        assert {m.body for m in got if m.reconsume_times == 1} == held
    finally:
        await client.close()


async def test_timer_messages_survive_kill_9(cluster: LocalCluster) -> None:
    topic = "TimerKill"
    client = RemotingClient()
    try:
        addr = cluster.broker_addrs[0]
        await create_topic(client, addr, topic)
        count = 100
        for i in range(count):
            await send_message(
                client,
                addr,
                topic,
                f"d{i}".encode(),
                check=True,
                UNIQ_KEY=f"U{i}",
                TIMER_DELAY_MS=str(1500 + (i * 97) % 6000),
            )
        await asyncio.to_thread(cluster.restart_broker, 0, kill=True)
        addr = cluster.broker_addrs[0]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 90
        while await max_offset(client, addr, topic, 0) < count:
            assert loop.time() < deadline, "timer messages lost across the kill"
            await asyncio.sleep(0.2)
        msgs: list = []  # type: ignore[type-arg]
        while len(msgs) < count:
            header = {
                "consumerGroup": "tk",
                "topic": topic,
                "queueId": 0,
                "queueOffset": len(msgs),
                "maxMsgNums": 32,
                "sysFlag": PULL_FLAG_SUBSCRIPTION,
                "commitOffset": 0,
                "suspendTimeoutMillis": 0,
                "subscription": "*",
                "subVersion": 0,
            }
            r = await client.invoke(addr, RemotingCommand.request(RequestCode.PULL_MESSAGE, header))
            assert r.code == ResponseCode.SUCCESS, r.remark
            msgs.extend(decode_messages(r.body_bytes()))
        counts = Counter(m.body for m in msgs)
        assert set(counts) == {f"d{i}".encode() for i in range(count)}
        assert max(counts.values()) == 1
        assert all(m.store_timestamp >= int(m.properties["TIMER_OUT_MS"]) for m in msgs)
    finally:
        await client.close()


async def test_revive_topic_is_replicated_to_the_slave(tmp_path: Path) -> None:
    topic = "PopRepl"
    with LocalCluster(tmp_path / "r", groups=1, slaves=1, namesrv_port=0, broker_port=0) as c:
        client = RemotingClient()
        try:
            master, slave = c.broker_addrs
            await create_topic(client, master, topic)
            for i in range(5):
                await send_message(client, master, topic, f"s{i}".encode(), check=True)
            api = PopApi(client)
            got: list = []  # type: ignore[type-arg]
            while len(got) < 5:
                got.extend(
                    (
                        await api.pop(
                            master, "broker-a", group=GROUP, topic=topic, poll_time_ms=1000
                        )
                    ).messages
                )
            assert await api.batch_ack(
                master, GROUP, topic, [m.properties[MessageConst.PROPERTY_POP_CK] for m in got[:2]]
            )
            revive = "rmq_sys_REVIVE_LOG_DefaultCluster"
            on_master = [await max_offset(client, master, revive, q) for q in range(8)]
            assert sum(on_master) >= 2  # at least one checkpoint and one ack
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 30
            while [await max_offset(client, slave, revive, q) for q in range(8)] != on_master:
                assert loop.time() < deadline, "the revive topic did not reach the slave"
                await asyncio.sleep(0.2)
        finally:
            await client.close()
