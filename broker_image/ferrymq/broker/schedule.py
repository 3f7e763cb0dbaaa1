"""Delay levels and the schedule service (upstream ``ScheduleMessageService``).

A message sent with ``DELAY=n`` (n > 0) is not stored in its topic: :func:`to_schedule_topic`
moves it to ``SCHEDULE_TOPIC_XXXX``, queue ``n - 1``, keeping the real topic and queue in the
``REAL_TOPIC`` / ``REAL_QID`` properties. Levels above the configured count are clamped to the last
level. Every queue of the schedule topic holds messages of one delay, so store order is due order:
the service walks each queue from its progress offset, re-puts each due message into its real
topic (without ``DELAY``), and stops at the first one not yet due.

Progress per level is kept in ``config/delayOffset.json`` (``{"offsetTable": {level: offset}}``),
written every ``flush_interval_s`` and at shutdown (temp file, fsync, rename, in a thread), so a
restart resumes where delivery stopped; a message delivered after the last flush may be delivered
again after a crash, as upstream (at-least-once).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import orjson

from ferrymq.broker.message_copy import restored_message
from ferrymq.broker.store_port import MessageStorePort
from ferrymq.message import MessageConst, MessageInner, MessageSysFlag
from ferrymq.store.dispatch import RoundRecords
from ferrymq.store.json_file import AtomicFileWriter
from ferrymq.store.record import DecodedRecord, RecordKind, check_record
from ferrymq.store.results import GetMessageStatus
from ferrymq.tasks import Periodic, cancel_and_wait, wait_event
from ferrymq.topic_validator import SCHEDULE_TOPIC

log = logging.getLogger(__name__)

__all__ = [
    "SCHEDULE_CONSUMER_GROUP",
    "SCHEDULE_TOPIC",
    "DelayOffsetTable",
    "ScheduleMessageService",
    "delay_level_to_queue_id",
    "load_delay_offsets",
    "message_from_schedule",
    "queue_id_to_delay_level",
    "to_schedule_topic",
]

SCHEDULE_CONSUMER_GROUP = "SCHEDULE_CONSUMER"
DEFAULT_FLUSH_DELAY_OFFSET_INTERVAL_S = 10.0
_PULL_BATCH = 32
_RETRY_AFTER_FAILURE_S = 1.0
_IDLE_RECHECK_S = 1.0

DelayOffsetTable = dict[int, int]


def delay_level_to_queue_id(level: int) -> int:
    return level - 1


def queue_id_to_delay_level(queue_id: int) -> int:
    return queue_id + 1


def to_schedule_topic(msg: MessageInner, max_level: int) -> MessageInner:
    """``msg`` re-addressed to the schedule topic when it asks for a delay, else ``msg`` itself.

    Transaction half messages and rollbacks are never delayed (upstream applies the delay only to
    non-transactional and committed messages).
    """
    raw = msg.properties.get(MessageConst.PROPERTY_DELAY_TIME_LEVEL)
    try:
        level = int(raw) if raw else 0
    except ValueError:
        return msg
    tran_type = MessageSysFlag.get_transaction_value(msg.sys_flag)
    if level <= 0 or tran_type not in (
        MessageSysFlag.TRANSACTION_NOT_TYPE,
        MessageSysFlag.TRANSACTION_COMMIT_TYPE,
    ):
        return msg
    level = min(level, max_level)
    props = dict(msg.properties)
    props[MessageConst.PROPERTY_DELAY_TIME_LEVEL] = str(level)
    props[MessageConst.PROPERTY_REAL_TOPIC] = msg.topic
    props[MessageConst.PROPERTY_REAL_QUEUE_ID] = str(msg.queue_id)
    return dataclasses.replace(
        msg,
        topic=SCHEDULE_TOPIC,
        queue_id=delay_level_to_queue_id(level),
        properties=props,
        properties_string=_encode(props),
    )


def _encode(props: Mapping[str, str]) -> str:
    from ferrymq.message import encode_properties

    return encode_properties(props)


def message_from_schedule(record: DecodedRecord, buf: memoryview) -> MessageInner | None:
    """The message to put into its real topic once due; None when the record lacks its address."""
    props = dict(record.properties)
    real_topic = props.get(MessageConst.PROPERTY_REAL_TOPIC)
    real_qid = props.get(MessageConst.PROPERTY_REAL_QUEUE_ID)
    if not real_topic or real_qid is None or not real_qid.lstrip("-").isdigit():
        return None
    # DELAY stays: Apache RocketMQ 5.4.0 delivers the message with it (tests/interop)
    body = bytes(buf[record.body_pos : record.body_pos + record.body_len])
    return restored_message(
        record,
        topic=real_topic,
        queue_id=int(real_qid),
        body=body,
        properties=props,
        sys_flag=record.sys_flag,
        prepared_transaction_offset=record.prepared_transaction_offset,
    )


def load_delay_offsets(path: Path) -> DelayOffsetTable:
    """Read delayOffset.json (missing file: empty table); a corrupt file raises ValueError."""
    for candidate in (path, path.with_name(path.name + ".bak")):
        if not candidate.exists():
            continue
        try:
            raw = orjson.loads(candidate.read_bytes())
            table = raw.get("offsetTable", {}) if isinstance(raw, dict) else None
            if not isinstance(table, dict):
                raise ValueError("offsetTable is not an object")
            return {int(k): int(v) for k, v in table.items()}
        except (orjson.JSONDecodeError, ValueError, TypeError) as exc:
            log.error("delay offset file %s is unreadable: %s", candidate, exc)
            continue
    if path.exists():
        raise ValueError(f"{path} and its backup are unreadable; refusing to redeliver from 0")
    return {}


class ScheduleMessageService:
    """Delivers due delayed messages; one task for all levels, woken by the dispatcher."""

    def __init__(
        self,
        store: MessageStorePort,
        levels_ms: list[int],
        offsets_path: Path,
        *,
        flush_interval_s: float = DEFAULT_FLUSH_DELAY_OFFSET_INTERVAL_S,
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        if not levels_ms:
            raise ValueError("at least one delay level is required")
        self.store = store
        self.levels_ms = list(levels_ms)
        self.offsets_path = offsets_path
        self._offsets_writer = AtomicFileWriter(offsets_path)  # keeps delayOffset.json.bak
        self.flush_interval_s = flush_interval_s
        self._clock_ms = clock_ms
        self.offsets: DelayOffsetTable = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._flusher = Periodic(
            "schedule-flush", self._flush_if_dirty, lambda: self.flush_interval_s
        )
        self._dirty = False
        self.delivered = 0

    @property
    def max_level(self) -> int:
        return len(self.levels_ms)

    async def start(self) -> None:
        self.offsets = await asyncio.to_thread(load_delay_offsets, self.offsets_path)
        self.store.add_dispatch_round_listener(self._on_dispatch_round)
        self._task = asyncio.create_task(self._run(), name="schedule-service")
        self._flusher.start()

    async def shutdown(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)
        await self._flusher.stop()
        await self.persist()

    async def persist(self) -> None:
        data = orjson.dumps(
            {"offsetTable": {str(k): v for k, v in sorted(self.offsets.items())}},
            option=orjson.OPT_INDENT_2,
        )
        self._dirty = False
        await self._offsets_writer.write(data)

    def encode_offsets(self) -> bytes:
        """GET_ALL_DELAY_OFFSET body: the delayOffset.json content."""
        return orjson.dumps({"offsetTable": {str(k): v for k, v in self.offsets.items()}})

    def _on_dispatch_round(self, arrived: RoundRecords) -> None:
        """Store dispatch round listener: a delayed message arrived, so look at its level now."""
        if SCHEDULE_TOPIC in arrived.topics():
            self._wake.set()

    async def _flush_if_dirty(self) -> None:
        if self._dirty:
            try:
                await self.persist()
            except OSError as exc:
                self._dirty = True
                log.error("cannot write %s: %s", self.offsets_path, exc)

    async def _run(self) -> None:
        while True:
            self._wake.clear()
            wait_s = _IDLE_RECHECK_S
            for level in range(1, self.max_level + 1):
                try:
                    next_due_ms = await self.deliver_level(level)
                except Exception:  # one bad level must not stop the others
                    log.exception("delay level %d: delivery failed; retrying", level)
                    next_due_ms = int(_RETRY_AFTER_FAILURE_S * 1000)
                if next_due_ms is not None:
                    wait_s = min(wait_s, max(next_due_ms, 1) / 1000)
            await wait_event(self._wake, wait_s)

    async def deliver_level(self, level: int) -> int | None:
        """Deliver every due message of ``level``; ms until the next one is due, None when idle."""
        queue_id = delay_level_to_queue_id(level)
        delay_ms = self.levels_ms[level - 1]
        offset = self.offsets.get(level, 0)
        min_offset = self.store.get_min_offset_in_queue(SCHEDULE_TOPIC, queue_id)
        if offset < min_offset:
            log.warning(
                "delay level %d: offset %d was cleaned up; skip to %d", level, offset, min_offset
            )
            offset = min_offset
            self._set_offset(level, offset)
        while offset < self.store.get_max_offset_in_queue(SCHEDULE_TOPIC, queue_id):
            result = self.store.get_message(
                SCHEDULE_CONSUMER_GROUP, SCHEDULE_TOPIC, queue_id, offset, _PULL_BATCH
            )
            try:
                if result.status is not GetMessageStatus.FOUND or not result.messages:
                    if result.next_begin_offset > offset:
                        self._set_offset(level, result.next_begin_offset)
                        offset = result.next_begin_offset
                        continue
                    return int(_RETRY_AFTER_FAILURE_S * 1000)
                for view, queue_offset in zip(result.messages, result.queue_offsets, strict=False):
                    checked = check_record(view, 0, len(view), check_crc=False)
                    record = checked.record
                    if checked.kind is not RecordKind.MESSAGE or record is None:
                        log.error(
                            "delay level %d: unreadable record at %d; skipped", level, queue_offset
                        )
                        offset = queue_offset + 1
                        self._set_offset(level, offset)
                        continue
                    due_ms = record.store_timestamp + delay_ms
                    now = self._clock_ms()
                    if due_ms > now:
                        return due_ms - now
                    msg = message_from_schedule(record, view)
                    if msg is None:
                        log.error(
                            "delay level %d: message at %d has no REAL_TOPIC/REAL_QID; dropped",
                            level,
                            queue_offset,
                        )
                    else:
                        put = await self.store.put_message(msg)
                        if not put.is_ok:
                            log.warning(
                                "delay level %d: re-put to %s failed (%s); retrying",
                                level,
                                msg.topic,
                                put.status.name,
                            )
                            return int(_RETRY_AFTER_FAILURE_S * 1000)
                        self.delivered += 1
                    offset = queue_offset + 1
                    self._set_offset(level, offset)
            finally:
                result.release()
        return None

    def _set_offset(self, level: int, offset: int) -> None:
        self.offsets[level] = offset
        self._dirty = True
