"""RetryService and TransactionService over a real MessageStore (the cluster tests drive them
through the broker; these pin the storage effects)."""

from __future__ import annotations

import time
import zlib
from pathlib import Path

from ferrymq.broker.retry import RetryService
from ferrymq.broker.schedule import SCHEDULE_TOPIC
from ferrymq.broker.transaction import (
    HALF_TOPIC,
    OP_HALF_TOPIC,
    TransactionConfig,
    TransactionService,
    to_half_message,
)
from ferrymq.message import MessageConst, MessageSysFlag
from ferrymq.remoting.bodies import PERM_READ, PERM_WRITE, SubscriptionGroupConfig
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.headers import CheckTransactionStateRequestHeader, EndTransactionRequestHeader
from ferrymq.store.record import decode_messages
from polling import wait_for

from semantics.store_fixtures import inner, read_all, started_store


async def test_send_back_counts_reconsumes_and_dead_letters_after_16(tmp_path: Path) -> None:
    store = await started_store(tmp_path / "s", " ".join(["1s"] * 18))
    created: dict[str, int] = {}

    def create_topic(topic: str, queue_nums: int, perm: int) -> bool:
        created[topic] = perm
        return True

    service = RetryService(
        store,
        find_group=lambda g: SubscriptionGroupConfig(group_name=g) if g == "G" else None,
        create_topic=create_topic,
        max_delay_level=lambda: 18,
    )
    try:
        body = b"payload " * 1000  # compressed on the wire: must stay byte-identical after inflate
        packed = zlib.compress(body, 5)
        msg = inner("Orders", packed, {"TAGS": "a", "UNIQ_KEY": "U1"})
        msg.sys_flag = MessageSysFlag.COMPRESSED_FLAG
        put = await store.put_message(msg)
        assert put.append_result is not None
        offset = put.append_result.wrote_offset

        missing = await service.send_back(
            group="nope", commit_log_offset=offset, delay_level=0, max_reconsume_times=None
        )
        assert missing.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
        bad = await service.send_back(
            group="G", commit_log_offset=offset + 7, delay_level=0, max_reconsume_times=None
        )
        assert bad.code == ResponseCode.SYSTEM_ERROR and bad.remark

        for attempt in range(16):
            outcome = await service.send_back(
                group="G", commit_log_offset=offset, delay_level=0, max_reconsume_times=16
            )
            assert outcome.code == ResponseCode.SUCCESS and outcome.decision is not None
            assert outcome.decision.topic == "%RETRY%G"
            level = min(3 + attempt, 18)
            await wait_for(
                lambda lv=level, a=attempt: (
                    store.get_max_offset_in_queue(SCHEDULE_TOPIC, lv - 1)
                    >= 1 + (1 if lv == 18 and a > 15 else 0)
                ),
                5,
            )
            copies = read_all(store, SCHEDULE_TOPIC, level - 1)
            copy = copies[-1]
            assert copy.reconsume_times == attempt + 1
            assert copy.properties[MessageConst.PROPERTY_REAL_TOPIC] == "%RETRY%G"
            assert copy.properties[MessageConst.PROPERTY_RETRY_TOPIC] == "Orders"
            assert copy.properties[MessageConst.PROPERTY_DELAY_TIME_LEVEL] == str(level)
            assert copy.body == body and copy.sys_flag & MessageSysFlag.COMPRESSED_FLAG
            offset = copy.commit_log_offset  # the consumer fails the redelivered copy again

        final = await service.send_back(
            group="G", commit_log_offset=offset, delay_level=0, max_reconsume_times=16
        )
        assert final.code == ResponseCode.SUCCESS and final.decision is not None
        assert final.decision.to_dlq and created["%DLQ%G"] == PERM_WRITE | PERM_READ
        await wait_for(lambda: store.get_max_offset_in_queue("%DLQ%G", 0) == 1, 5)
        (dead,) = read_all(store, "%DLQ%G")
        assert dead.body == body and dead.reconsume_times == 17
        assert dead.properties[MessageConst.PROPERTY_RETRY_TOPIC] == "Orders"
        # as upstream (Apache 5.4.0 in tests/interop): the DLQ copy carries DELAY=0 and the failed
        # message's offset msgId as ORIGIN_MESSAGE_ID
        assert dead.properties[MessageConst.PROPERTY_DELAY_TIME_LEVEL] == "0"
        assert dead.properties[MessageConst.PROPERTY_ORIGIN_MESSAGE_ID] != "U1"
    finally:
        await store.shutdown()


class RecordingChannel:
    """Test double for a producer connection: records the oneway check requests it is given."""

    def __init__(self) -> None:
        self.requests: list[RemotingCommand] = []

    def invoke_oneway(self, request: RemotingCommand) -> None:
        self.requests.append(request)


async def _half(store, tx: str, topic: str = "Pay"):  # type: ignore[no-untyped-def]
    msg = inner(
        topic,
        f"body-{tx}".encode(),
        {"TRAN_MSG": "true", "PGROUP": "PG", "UNIQ_KEY": tx, "WAIT": "true"},
    )
    msg.sys_flag = MessageSysFlag.TRANSACTION_PREPARED_TYPE
    put = await store.put_message(to_half_message(msg))
    assert put.is_ok and put.append_result is not None
    return put.append_result


def _end(ar, kind: int, group: str = "PG") -> EndTransactionRequestHeader:  # type: ignore[no-untyped-def]
    return EndTransactionRequestHeader(
        producer_group=group,
        tran_state_table_offset=ar.queue_offset,
        commit_log_offset=ar.wrote_offset,
        commit_or_rollback=kind,
        msg_id=ar.msg_id,
    )


async def test_commit_rollback_and_check_back(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = await started_store(root)
    channel = RecordingChannel()
    now = [int(time.time() * 1000)]
    service = TransactionService(
        store,
        store_host=("127.0.0.1", 10911),
        producer_channels=lambda g: [channel] if g == "PG" else [],
        checkpoint_path=root / "config" / "transactionCheckpoint.json",
        max_delay_level=lambda: 3,
        config=TransactionConfig(check_interval_s=3600, transaction_check_max=15),
        clock_ms=lambda: now[0],
    )
    await service.start()
    try:
        committed = await _half(store, "TX-C")
        rolled = await _half(store, "TX-R")
        pending = await _half(store, "TX-P")
        assert (await service.end_transaction(_end(committed, 4, "wrong"))).code == 1
        wrong_group = await service.end_transaction(_end(committed, 8, "other"))
        assert wrong_group.remark == "The producer group wrong"
        assert (await service.end_transaction(_end(committed, 8))).code == ResponseCode.SUCCESS
        again = await service.end_transaction(_end(committed, 8))
        assert again.code == ResponseCode.SUCCESS and again.remark == "already decided"
        assert (await service.end_transaction(_end(rolled, 12))).code == ResponseCode.SUCCESS
        await wait_for(lambda: store.get_max_offset_in_queue("Pay", 0) == 1, 5)
        (visible,) = read_all(store, "Pay")
        assert visible.body == b"body-TX-C"
        assert MessageSysFlag.get_transaction_value(visible.sys_flag) == 8
        # as Apache stores it: the real address replaces REAL_*, the transaction properties stay
        assert "REAL_TOPIC" not in visible.properties and "REAL_QID" not in visible.properties
        assert visible.properties["TRAN_MSG"] == "true"
        assert visible.properties["__transactionId__"] == "TX-C"
        await wait_for(lambda: store.get_max_offset_in_queue(OP_HALF_TOPIC, 0) == 2, 5)

        # young pending transactions are left alone
        await service.check_once()
        assert channel.requests == []
        now[0] += 7_000
        await service.check_once()
        (check,) = channel.requests
        assert check.code == RequestCode.CHECK_TRANSACTION_STATE and check.is_oneway
        header = CheckTransactionStateRequestHeader.from_ext(check.ext_fields)
        (as_sent,) = decode_messages(check.body_bytes())
        assert as_sent.topic == "Pay" and as_sent.body == b"body-TX-P"
        assert as_sent.properties["UNIQ_KEY"] == "TX-P" == header.transaction_id
        assert as_sent.properties["TRANSACTION_CHECK_TIMES"] == "1"
        assert as_sent.properties["WAIT"] == "false"  # as upstream's check-back (its copy: true)
        assert header.tran_state_table_offset > pending.queue_offset  # the renewed copy
        assert service.half_offset == header.tran_state_table_offset
        # the producer answers commit for the renewed copy
        answer = EndTransactionRequestHeader(
            producer_group="PG",
            tran_state_table_offset=header.tran_state_table_offset,
            commit_log_offset=header.commit_log_offset,
            commit_or_rollback=8,
            msg_id="TX-P",
            from_transaction_check=True,
        )
        assert (await service.end_transaction(answer)).code == ResponseCode.SUCCESS
        await wait_for(lambda: store.get_max_offset_in_queue("Pay", 0) == 2, 5)
        checked_back = read_all(store, "Pay")[1]
        assert checked_back.properties["TRANSACTION_CHECK_TIMES"] == "1"
        assert checked_back.properties["WAIT"] == "true"
        await service.check_once()
        assert len(channel.requests) == 1  # decided: no more checks
    finally:
        await service.shutdown()
        await store.shutdown()


async def test_unknown_transaction_is_rolled_back_after_max_checks(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = await started_store(root)
    channel = RecordingChannel()
    now = [int(time.time() * 1000) + 10_000]
    service = TransactionService(
        store,
        store_host=("127.0.0.1", 10911),
        producer_channels=lambda g: [channel],
        checkpoint_path=root / "config" / "transactionCheckpoint.json",
        max_delay_level=lambda: 3,
        config=TransactionConfig(check_interval_s=3600, transaction_check_max=3),
        clock_ms=lambda: now[0],
    )
    await service.start()
    try:
        await _half(store, "TX-U")
        await wait_for(lambda: store.get_max_offset_in_queue(HALF_TOPIC, 0) == 1, 5)
        for expected in (1, 2, 3):
            await service.check_once()
            assert len(channel.requests) == expected
            await wait_for(
                lambda e=expected: store.get_max_offset_in_queue(HALF_TOPIC, 0) == e + 1, 5
            )
        await service.check_once()
        assert len(channel.requests) == 3 and service.rolled_back_by_broker == 1
        await wait_for(lambda: store.get_max_offset_in_queue(OP_HALF_TOPIC, 0) == 1, 5)
        assert read_all(store, "Pay") == []
        await service.check_once()
        assert len(channel.requests) == 3
    finally:
        await service.shutdown()
        await store.shutdown()
    # progress survives: a restarted service does not check the rolled-back transaction again
    store = await started_store(root)
    service = TransactionService(
        store,
        store_host=("127.0.0.1", 10911),
        producer_channels=lambda g: [channel],
        checkpoint_path=root / "config" / "transactionCheckpoint.json",
        max_delay_level=lambda: 3,
        config=TransactionConfig(check_interval_s=3600, transaction_check_max=3),
        clock_ms=lambda: now[0],
    )
    await service.start()
    try:
        await service.check_once()
        assert len(channel.requests) == 3
    finally:
        await service.shutdown()
        await store.shutdown()
