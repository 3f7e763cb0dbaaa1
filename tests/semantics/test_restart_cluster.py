"""Delayed messages and pending transactions survive a broker restart."""

from __future__ import annotations

import time
from pathlib import Path

import orjson
import pytest
from ferrymq.broker.semantics_config import SemanticsConfig
from ferrymq.client import Message, MessageExt, Producer, PushConsumer
from ferrymq.client.transaction_producer import LocalTransactionState, TransactionProducer
from polling import wait_for

from semantics.cluster import semantics_cluster

pytestmark = pytest.mark.timeout(120)


async def test_delayed_messages_are_delivered_once_after_a_broker_restart(tmp_path: Path) -> None:
    async with semantics_cluster(tmp_path, delay_levels="1s 4s") as cluster:
        await cluster.create_topic("Later", queues=1)
        async with Producer("later-p", cluster.namesrv_addr) as producer:
            early = Message("Later", b"early")
            early.delay_time_level = 1
            await producer.send(early)
            for i in range(3):
                late = Message("Later", f"late-{i}".encode())
                late.delay_time_level = 2
                await producer.send(late)
        store = cluster.broker.store
        assert store is not None
        await wait_for(lambda: store.get_max_offset_in_queue("Later", 0) == 1, 10, "early one")
        sent_at = time.time()
        await cluster.restart_broker()  # the 4 s messages are not due yet
        saved = orjson.loads((tmp_path / "broker-s" / "config" / "delayOffset.json").read_bytes())
        assert saved["offsetTable"]["1"] == 1  # level 1 progress was saved at shutdown
        got: list[MessageExt] = []
        consumer = PushConsumer("later-g", instance=cluster.instance())
        consumer.subscribe("Later")
        consumer.register_listener(lambda msgs, ctx: got.extend(msgs))
        from ferrymq.client import ConsumeFromWhere

        consumer.consume_from_where = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
        await consumer.start()
        try:
            await wait_for(lambda: len(got) >= 4, 20, "all four after the restart")
            restarted = cluster.broker.store
            assert restarted is not None
            await wait_for(lambda: len(got) == restarted.get_max_offset_in_queue("Later", 0), 5)
        finally:
            await consumer.shutdown()
        assert sorted(m.body for m in got) == [b"early", b"late-0", b"late-1", b"late-2"]
        assert time.time() - sent_at < 15


async def test_pending_transaction_is_checked_back_after_a_broker_restart(tmp_path: Path) -> None:
    config = SemanticsConfig(
        transaction_check_interval=300, transaction_time_out=200, transaction_check_max=15
    )
    async with semantics_cluster(tmp_path, semantics=config) as cluster:
        await cluster.create_topic("Pay", queues=1)
        decided = {"ready": False}

        def checker(msg: MessageExt) -> LocalTransactionState:
            # unknown until the broker has restarted, then the local transaction is known done
            if decided["ready"]:
                return LocalTransactionState.COMMIT_MESSAGE
            return LocalTransactionState.UNKNOW

        # the restarted broker learns of the producer from its next heartbeat (every 30 s by
        # default; 0.5 s here), and only then can it check back
        producer = TransactionProducer(
            "tx-restart-p", checker=checker, instance=cluster.instance(heartbeat_interval=0.5)
        )
        await producer.start()
        got: list[MessageExt] = []
        consumer = PushConsumer("tx-restart-g", instance=cluster.instance())
        consumer.subscribe("Pay")
        consumer.register_listener(lambda msgs, ctx: got.extend(msgs))
        try:
            await producer.send_message_in_transaction(
                Message("Pay", b"across-restart"), lambda m, a: LocalTransactionState.UNKNOW
            )
            await cluster.restart_broker()
            await consumer.start()
            decided["ready"] = True
            await wait_for(lambda: [m.body for m in got] == [b"across-restart"], 30, "commit")
        finally:
            await consumer.shutdown()
            await producer.shutdown()
        assert producer.checks_answered >= 1
