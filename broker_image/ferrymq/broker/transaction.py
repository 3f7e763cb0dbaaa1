"""Transactional messages: half messages, END_TRANSACTION and check-back (upstream
``broker/transaction/`` — TransactionalMessageBridge, TransactionalMessageServiceImpl,
TransactionalMessageCheckService, EndTransactionProcessor).

Two-phase commit over an append-only log:

1. The producer sends a message with ``TRAN_MSG=true``; :func:`to_half_message` stores it in
   ``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0 with the real topic/queue in properties. No consumer
   subscribes there, so it is invisible.
2. The producer runs its local transaction and sends END_TRANSACTION (commit or rollback) naming
   the half message's commit-log and queue offsets. Commit re-puts the message into its real topic;
   both write an *op message* into ``RMQ_SYS_TRANS_OP_HALF_TOPIC`` whose body is the half message's
   queue offset, marking it decided (nothing is ever deleted).
3. Half messages older than ``transaction_timeout_ms`` without an op message are *pending*. Every
   ``check_interval_s`` the check service re-appends each pending half message with
   ``TRANSACTION_CHECK_TIMES + 1`` (so progress moves past the old copy) and sends
   CHECK_TRANSACTION_STATE for the new copy to one producer connection of the message's producer
   group; the producer answers with END_TRANSACTION. After ``transaction_check_max`` (15) checks the
   broker rolls the message back itself.

Progress (next half offset to examine, first op offset still needed) is kept in
``config/transactionCheckpoint.json``. Decisions are also remembered by transaction id (bounded),
so a late or repeated END_TRANSACTION for an older copy of the same transaction cannot commit it
twice.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import orjson

from ferrymq.broker.message_copy import restored_message, stored_body
from ferrymq.broker.schedule import to_schedule_topic
from ferrymq.broker.store_port import MessageStorePort
from ferrymq.message import (
    MessageConst,
    MessageExt,
    MessageInner,
    MessageSysFlag,
    create_message_id,
    encode_properties,
    pack_host,
    tags_string_to_tags_code,
)
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.headers import CheckTransactionStateRequestHeader, EndTransactionRequestHeader
from ferrymq.store.json_file import AtomicFileWriter
from ferrymq.store.record import (
    DecodedRecord,
    RecordKind,
    check_record,
    reencode_record,
)
from ferrymq.store.results import GetMessageStatus
from ferrymq.tasks import Periodic
from ferrymq.topic_validator import RMQ_SYS_TRANS_HALF_TOPIC as HALF_TOPIC
from ferrymq.topic_validator import RMQ_SYS_TRANS_OP_HALF_TOPIC as OP_HALF_TOPIC

log = logging.getLogger(__name__)

__all__ = [
    "HALF_TOPIC",
    "OP_HALF_TOPIC",
    "REMOVE_TAG",
    "CheckChannel",
    "EndTransactionOutcome",
    "TransactionConfig",
    "TransactionService",
    "is_transaction_prepared",
    "to_half_message",
]

TRANS_CHECK_GROUP = "CID_SYS_RMQ_TRANS"
REMOVE_TAG = "d"
_PULL_BATCH = 32
_DECIDED_IDS_KEPT = 100_000


@dataclass(frozen=True, slots=True)
class TransactionConfig:
    """Upstream BrokerConfig names: transactionCheckInterval, transactionTimeOut, transactionCheckMax."""

    check_interval_s: float = 60.0
    transaction_timeout_ms: int = 6_000
    transaction_check_max: int = 15


class CheckChannel(Protocol):
    """What the check service needs of a producer connection (a remoting Channel fits)."""

    def invoke_oneway(self, request: RemotingCommand) -> None: ...


ProducerChannels = Callable[[str], Sequence[CheckChannel]]


def is_transaction_prepared(properties: Mapping[str, str]) -> bool:
    return properties.get(MessageConst.PROPERTY_TRANSACTION_PREPARED, "").lower() == "true"


def to_half_message(msg: MessageInner) -> MessageInner:
    """The half message stored for a transactional send (real address kept in properties)."""
    props = dict(msg.properties)
    # upstream TransactionalMessageBridge.parseHalfMessageInner: the unique key as the
    # transaction id, a property every later copy (check-back, the committed message) keeps
    uniq = props.get(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
    if uniq:
        props[MessageConst.PROPERTY_TRANSACTION_ID] = uniq
    props[MessageConst.PROPERTY_REAL_TOPIC] = msg.topic
    props[MessageConst.PROPERTY_REAL_QUEUE_ID] = str(msg.queue_id)
    return dataclasses.replace(
        msg,
        topic=HALF_TOPIC,
        queue_id=0,
        sys_flag=MessageSysFlag.reset_transaction_value(
            msg.sys_flag, MessageSysFlag.TRANSACTION_NOT_TYPE
        ),
        properties=props,
        properties_string=encode_properties(props),
    )


def _final_message(
    half: MessageExt, commit_or_rollback: int, commit_log_offset: int
) -> MessageInner | None:
    props = dict(half.properties)
    real_topic = props.pop(MessageConst.PROPERTY_REAL_TOPIC, None)
    real_qid = props.pop(MessageConst.PROPERTY_REAL_QUEUE_ID, None)
    if not real_topic or real_qid is None or not real_qid.isdigit():
        return None
    # what upstream's EndTransactionProcessor stores: the half message's properties but the real
    # address; TRAN_MSG, TRANSACTION_CHECK_TIMES, __transactionId__ and WAIT stay as the half
    # (or its last check-back copy) had them (Apache 5.4.0, tests/interop transaction scenario)
    body, sys_flag = stored_body(half)
    return restored_message(
        half,
        topic=real_topic,
        queue_id=int(real_qid),
        body=body,
        properties=props,
        sys_flag=MessageSysFlag.reset_transaction_value(sys_flag, commit_or_rollback),
        prepared_transaction_offset=commit_log_offset,
    )


def _op_message(half_queue_offset: int, store_host: tuple[str, int]) -> MessageInner:
    props = {MessageConst.PROPERTY_TAGS: REMOVE_TAG}
    return MessageInner(
        topic=OP_HALF_TOPIC,
        queue_id=0,
        body=str(half_queue_offset).encode("ascii"),
        properties=props,
        properties_string=encode_properties(props),
        tags_code=tags_string_to_tags_code(REMOVE_TAG),
        born_timestamp=int(time.time() * 1000),
        born_host=store_host,
    )


def _check_body(record: DecodedRecord, view: memoryview) -> bytes:
    """The half record re-encoded with its real topic and queue (what the producer decodes)."""
    props = dict(record.properties)
    # upstream's check-back carries WAIT=false although the stored copy keeps WAIT=true
    # (renewHalfMessageInner sets it on the properties it shares with the message it sends)
    props[MessageConst.PROPERTY_WAIT_STORE_MSG_OK] = "false"
    topic = props.get(MessageConst.PROPERTY_REAL_TOPIC, HALF_TOPIC)
    qid = props.get(MessageConst.PROPERTY_REAL_QUEUE_ID, "0")
    body = bytes(view[record.body_pos : record.body_pos + record.body_len])
    topic_b = topic.encode("utf-8")
    props_b = encode_properties(props).encode("utf-8")
    return reencode_record(
        record,
        queue_id=int(qid) if qid.isdigit() else 0,
        body=body,
        topic=topic_b,
        properties=props_b,
    )


@dataclass(frozen=True, slots=True)
class EndTransactionOutcome:
    code: int
    remark: str | None = None


class TransactionService:
    def __init__(
        self,
        store: MessageStorePort,
        *,
        store_host: tuple[str, int],
        producer_channels: ProducerChannels,
        checkpoint_path: Path,
        max_delay_level: Callable[[], int],
        config: TransactionConfig | None = None,
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self.store = store
        self.store_host = store_host
        self.producer_channels = producer_channels
        self.checkpoint_path = checkpoint_path
        self._checkpoint_writer = AtomicFileWriter(checkpoint_path, keep_backup=False)
        self.max_delay_level = max_delay_level
        self.config = config or TransactionConfig()
        self._clock_ms = clock_ms
        self.half_offset = 0  # next half queue offset the check service examines
        self.op_offset = 0  # next op queue offset to read
        self._op_read_offset = 0
        self._ops: dict[
            int, int
        ] = {}  # half queue offset -> op queue offset, for offsets >= half_offset
        self._decided_ids: OrderedDict[str, int] = OrderedDict()
        self._rr = itertools.count()
        self._checks = Periodic(
            "transaction-check", self.check_once, lambda: self.config.check_interval_s
        )
        self._lock = asyncio.Lock()
        self.checks_sent = 0
        self.rolled_back_by_broker = 0

    # --- lifecycle ----------------------------------------------------------------------
    async def start(self, *, run_checks: bool = True) -> None:
        """Load progress; start the check loop (masters only: pass ``run_checks=False`` on slaves)."""
        if self.checkpoint_path.exists():
            raw = await asyncio.to_thread(self.checkpoint_path.read_bytes)
            try:
                data = orjson.loads(raw)
                self.half_offset = int(data.get("halfOffset", 0))
                self.op_offset = int(data.get("opOffset", 0))
            except (orjson.JSONDecodeError, ValueError, TypeError, AttributeError) as exc:
                raise ValueError(f"{self.checkpoint_path} is unreadable: {exc}") from exc
        self._op_read_offset = self.op_offset
        if run_checks:
            self._checks.start()

    async def shutdown(self) -> None:
        await self._checks.stop()
        await self._persist()

    async def _persist(self) -> None:
        data = orjson.dumps({"halfOffset": self.half_offset, "opOffset": self.op_offset})
        await self._checkpoint_writer.write(data)

    # --- END_TRANSACTION ------------------------------------------------------------------
    async def end_transaction(self, header: EndTransactionRequestHeader) -> EndTransactionOutcome:
        kind = header.commit_or_rollback
        if kind == MessageSysFlag.TRANSACTION_NOT_TYPE:
            # the producer does not know yet: the check service will ask again
            return EndTransactionOutcome(ResponseCode.SUCCESS)
        if kind not in (
            MessageSysFlag.TRANSACTION_COMMIT_TYPE,
            MessageSysFlag.TRANSACTION_ROLLBACK_TYPE,
        ):
            return EndTransactionOutcome(
                ResponseCode.SYSTEM_ERROR, f"commitOrRollback {kind} is not 0, 8 or 12"
            )
        async with self._lock:
            half = self.store.look_message_by_offset(header.commit_log_offset)
            if half is None or half.topic != HALF_TOPIC:
                return EndTransactionOutcome(
                    ResponseCode.SYSTEM_ERROR,
                    f"no half message at commit log offset {header.commit_log_offset}",
                )
            if half.properties.get(MessageConst.PROPERTY_PRODUCER_GROUP) != header.producer_group:
                return EndTransactionOutcome(ResponseCode.SYSTEM_ERROR, "The producer group wrong")
            if half.queue_offset != header.tran_state_table_offset:
                return EndTransactionOutcome(
                    ResponseCode.SYSTEM_ERROR, "The transaction state table offset wrong"
                )
            tx_id = self._tx_id(half.properties) or half.offset_msg_id
            if half.queue_offset in self._ops or tx_id in self._decided_ids:
                return EndTransactionOutcome(ResponseCode.SUCCESS, "already decided")
            if kind == MessageSysFlag.TRANSACTION_COMMIT_TYPE:
                final = _final_message(half, kind, header.commit_log_offset)
                if final is None:
                    return EndTransactionOutcome(
                        ResponseCode.SYSTEM_ERROR, "half message lacks REAL_TOPIC/REAL_QID"
                    )
                final = to_schedule_topic(final, self.max_delay_level())
                put = await self.store.put_message(final)
                if not put.is_ok:
                    return EndTransactionOutcome(
                        ResponseCode.SYSTEM_ERROR, f"store put failed: {put.status.name}"
                    )
            outcome = await self._write_op(half.queue_offset)
            if outcome.code == ResponseCode.SUCCESS:
                self._remember(tx_id, kind)
            return outcome

    @staticmethod
    def _tx_id(props: Mapping[str, str]) -> str | None:
        return props.get(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)

    def _remember(self, tx_id: str, kind: int) -> None:
        self._decided_ids[tx_id] = kind
        self._decided_ids.move_to_end(tx_id)
        while len(self._decided_ids) > _DECIDED_IDS_KEPT:
            self._decided_ids.popitem(last=False)

    async def _write_op(self, half_queue_offset: int) -> EndTransactionOutcome:
        put = await self.store.put_message(_op_message(half_queue_offset, self.store_host))
        if not put.is_ok:
            return EndTransactionOutcome(
                ResponseCode.SYSTEM_ERROR, f"op message put failed: {put.status.name}"
            )
        self._ops.setdefault(
            half_queue_offset, put.append_result.queue_offset if put.append_result else -1
        )
        return EndTransactionOutcome(ResponseCode.SUCCESS)

    # --- check-back ---------------------------------------------------------------------
    async def _read_ops(self) -> None:
        op_max = self.store.get_max_offset_in_queue(OP_HALF_TOPIC, 0)
        while self._op_read_offset < op_max:
            result = self.store.get_message(
                TRANS_CHECK_GROUP, OP_HALF_TOPIC, 0, self._op_read_offset, _PULL_BATCH
            )
            try:
                if result.status is not GetMessageStatus.FOUND or not result.messages:
                    if result.next_begin_offset > self._op_read_offset:
                        self._op_read_offset = result.next_begin_offset
                        continue
                    return
                for view, op_offset in zip(result.messages, result.queue_offsets, strict=False):
                    checked = check_record(view, 0, len(view), check_crc=False)
                    rec = checked.record
                    if checked.kind is RecordKind.MESSAGE and rec is not None:
                        text = bytes(view[rec.body_pos : rec.body_pos + rec.body_len])
                        if text.isdigit():
                            half_off = int(text)
                            if half_off >= self.half_offset:
                                self._ops.setdefault(half_off, op_offset)
                    self._op_read_offset = op_offset + 1
            finally:
                result.release()

    async def check_once(self) -> None:
        """One pass: learn decisions, re-check or roll back pending half messages, save progress."""
        async with self._lock:
            await self._read_ops()
            await self._scan_halves()
            self._ops = {h: o for h, o in self._ops.items() if h >= self.half_offset}
            self.op_offset = min(self._ops.values(), default=self._op_read_offset)
            self.op_offset = min(self.op_offset, self._op_read_offset)
        await self._persist()

    async def _scan_halves(self) -> None:
        half_max = self.store.get_max_offset_in_queue(HALF_TOPIC, 0)
        half_min = self.store.get_min_offset_in_queue(HALF_TOPIC, 0)
        self.half_offset = max(self.half_offset, half_min)
        end = half_max  # copies appended during this pass wait for the next one
        while self.half_offset < end:
            result = self.store.get_message(
                TRANS_CHECK_GROUP, HALF_TOPIC, 0, self.half_offset, _PULL_BATCH
            )
            try:
                if result.status is not GetMessageStatus.FOUND or not result.messages:
                    if result.next_begin_offset > self.half_offset:
                        self.half_offset = result.next_begin_offset
                        continue
                    return
                for view, queue_offset in zip(result.messages, result.queue_offsets, strict=False):
                    if queue_offset >= end:
                        return
                    if not await self._examine(view, queue_offset):
                        return
                    self.half_offset = queue_offset + 1
            finally:
                result.release()

    async def _examine(self, view: memoryview, queue_offset: int) -> bool:
        """Handle one half message; False when it is too young (stop the pass here)."""
        if queue_offset in self._ops:
            return True
        checked = check_record(view, 0, len(view), check_crc=False)
        rec = checked.record
        if checked.kind is not RecordKind.MESSAGE or rec is None:
            log.error("half message at %d is unreadable; skipped", queue_offset)
            return True
        tx_id = self._tx_id(rec.properties) or create_message_id(
            rec.store_host, rec.physical_offset
        )
        if tx_id in self._decided_ids:
            await self._write_op(queue_offset)
            return True
        if self._clock_ms() - rec.born_timestamp < self.config.transaction_timeout_ms:
            return False
        times_raw = rec.properties.get(MessageConst.PROPERTY_TRANSACTION_CHECK_TIMES, "0")
        times = int(times_raw) if times_raw.isdigit() else 0
        if times >= self.config.transaction_check_max:
            log.warning("transaction %s unresolved after %d checks; rolling back", tx_id, times)
            outcome = await self._write_op(queue_offset)
            if outcome.code == ResponseCode.SUCCESS:
                self._remember(tx_id, MessageSysFlag.TRANSACTION_ROLLBACK_TYPE)
                self.rolled_back_by_broker += 1
            return outcome.code == ResponseCode.SUCCESS
        renewed = await self._renew(rec, view, times + 1)
        if renewed is None:
            return False
        self._send_check(*renewed)
        return True

    async def _renew(
        self, rec: DecodedRecord, view: memoryview, times: int
    ) -> tuple[DecodedRecord, memoryview] | None:
        props = dict(rec.properties)
        props[MessageConst.PROPERTY_TRANSACTION_CHECK_TIMES] = str(times)
        body = bytes(view[rec.body_pos : rec.body_pos + rec.body_len])
        copy = restored_message(
            rec, topic=HALF_TOPIC, queue_id=0, body=body, properties=props, sys_flag=rec.sys_flag
        )
        put = await self.store.put_message(copy)
        if not put.is_ok or put.append_result is None:
            log.warning("cannot renew half message (%s); will retry", put.status.name)
            return None
        ar = put.append_result
        renewed = dataclasses.replace(
            rec,
            queue_offset=ar.queue_offset,
            physical_offset=ar.wrote_offset,
            properties=props,
            store_timestamp=ar.store_timestamp,
            store_ip=pack_host(self.store_host[0]),
            store_port=self.store_host[1],
        )
        return renewed, view

    def _send_check(self, rec: DecodedRecord, view: memoryview) -> None:
        group = rec.properties.get(MessageConst.PROPERTY_PRODUCER_GROUP, "")
        channels = list(self.producer_channels(group)) if group else []
        if not channels:
            log.info("no producer of group %r online to check transaction; will retry", group)
            return
        channel = channels[next(self._rr) % len(channels)]
        tx_id = self._tx_id(rec.properties)
        header = CheckTransactionStateRequestHeader(
            tran_state_table_offset=rec.queue_offset,
            commit_log_offset=rec.physical_offset,
            msg_id=tx_id,
            transaction_id=tx_id,
            offset_msg_id=create_message_id(self.store_host, rec.physical_offset),
        )
        request = RemotingCommand.request(
            RequestCode.CHECK_TRANSACTION_STATE,
            header.to_ext(),
            _check_body(rec, view),
            oneway=True,
        )
        try:
            channel.invoke_oneway(request)
            self.checks_sent += 1
        except Exception as exc:  # a dead connection: the next pass picks another
            log.info("check-back to producer group %s failed: %s", group, exc)
