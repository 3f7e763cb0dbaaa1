"""Transactional messages end to end: ferrymq's transactional producer against a real broker."""

from __future__ import annotations

from pathlib import Path

import pytest
from ferrymq.broker.semantics_config import SemanticsConfig
from ferrymq.client import Message, MessageExt, Producer, PushConsumer
from ferrymq.client.broker_api import SendStatus
from ferrymq.client.transaction_producer import LocalTransactionState, TransactionProducer
from polling import wait_for

from semantics.cluster import SemanticsCluster, semantics_cluster

pytestmark = pytest.mark.timeout(120)

FAST_CHECKS = SemanticsConfig(
    transaction_check_interval=300, transaction_time_out=200, transaction_check_max=3
)


async def _consumer(cluster: SemanticsCluster, got: list[MessageExt]) -> PushConsumer:
    consumer = PushConsumer("tx-cg", instance=cluster.instance())
    consumer.subscribe("Pay")
    consumer.register_listener(lambda msgs, ctx: got.extend(msgs))
    await consumer.start()
    return consumer


async def test_commit_rollback_and_unknown_checked_back(tmp_path: Path) -> None:
    async with semantics_cluster(tmp_path, semantics=FAST_CHECKS) as cluster:
        await cluster.create_topic("Pay", queues=2)
        got: list[MessageExt] = []
        consumer = await _consumer(cluster, got)
        checked: list[MessageExt] = []

        def checker(msg: MessageExt) -> LocalTransactionState:
            checked.append(msg)
            # the local transaction of "later" finished after all: commit it
            return LocalTransactionState.COMMIT_MESSAGE

        producer = TransactionProducer("tx-pg", cluster.namesrv_addr, checker=checker)
        await producer.start()
        try:
            states = {
                b"commit": LocalTransactionState.COMMIT_MESSAGE,
                b"rollback": LocalTransactionState.ROLLBACK_MESSAGE,
                b"later": LocalTransactionState.UNKNOW,
            }
            local_calls: list[bytes] = []

            def local(msg: Message, arg: object) -> LocalTransactionState:
                local_calls.append(msg.body)
                assert arg == "ctx" and msg.transaction_id
                return states[msg.body]

            results = {}
            for body in states:
                results[body] = await producer.send_message_in_transaction(
                    Message("Pay", body), local, "ctx"
                )

            def boom(msg: Message, arg: object) -> LocalTransactionState:
                raise RuntimeError("database down")

            failed = await producer.send_message_in_transaction(Message("Pay", b"boom"), boom)
            assert failed.local_state is LocalTransactionState.UNKNOW
            assert local_calls == [b"commit", b"rollback", b"later"]
            assert all(r.send_result.status is SendStatus.SEND_OK for r in results.values())
            await wait_for(lambda: {m.body for m in got} >= {b"commit", b"later", b"boom"}, 20)
        finally:
            await producer.shutdown()
            await consumer.shutdown()
        bodies = sorted(m.body for m in got)
        assert bodies == [b"boom", b"commit", b"later"]  # the rolled-back one never appears
        assert {m.body for m in checked} == {b"later", b"boom"}
        for m in checked:
            assert m.topic == "Pay" and m.transaction_id
        assert producer.checks_answered >= 2
        for m in got:
            # as Apache stores a committed message: TRAN_MSG and __transactionId__ kept
            assert m.properties["TRAN_MSG"] == "true" and "REAL_TOPIC" not in m.properties
            assert m.properties["__transactionId__"] == m.properties["UNIQ_KEY"]


async def test_transaction_left_unknown_is_rolled_back_after_max_checks(tmp_path: Path) -> None:
    async with semantics_cluster(tmp_path, semantics=FAST_CHECKS) as cluster:
        await cluster.create_topic("Pay", queues=1)
        got: list[MessageExt] = []
        consumer = await _consumer(cluster, got)
        asked: list[str] = []

        def undecided(msg: MessageExt) -> LocalTransactionState:
            asked.append(msg.transaction_id or "")
            return LocalTransactionState.UNKNOW

        producer = TransactionProducer("tx-pg2", cluster.namesrv_addr, checker=undecided)
        await producer.start()
        semantics = cluster.broker.semantics
        assert semantics is not None
        try:
            result = await producer.send_message_in_transaction(
                Message("Pay", b"limbo"), lambda m, a: LocalTransactionState.UNKNOW
            )
            await wait_for(
                lambda: semantics.transactions.rolled_back_by_broker == 1, 20, "broker rollback"
            )
            # a plain message after it proves the consumer is live and the half never leaked
            async with Producer("plain-p", cluster.namesrv_addr) as plain:
                await plain.send(Message("Pay", b"plain"))
            await wait_for(lambda: any(m.body == b"plain" for m in got), 20)
        finally:
            await producer.shutdown()
            await consumer.shutdown()
        assert [m.body for m in got] == [b"plain"]
        # at most transactionCheckMax (3) checks, then the broker's own rollback; a check made
        # before the producer's first heartbeat reached the broker counts without reaching it
        assert 1 <= len(asked) <= 3 and set(asked) == {result.transaction_id}
