"""Delivery of timer messages (the role of upstream ``TimerMessageStore``; not its file layout).

Timer messages wait in ``rmq_sys_wheel_timer`` queue 0 (see ``timer_message``): in the CommitLog,
so durable and replicated like any message. The service follows that queue (woken by dispatch),
keeps the pending ones in a heap ordered by ``TIMER_OUT_MS`` and puts each into its ``REAL_TOPIC``
/ ``REAL_QID`` when due, to the millisecond (upstream's wheel has 1 s slots). A recall (a timer
message with ``TIMER_DEL_UNIQKEY``) drops the pending message of that topic and UNIQ_KEY.

Progress and restarts: the offset of group ``CID_RMQ_SYS_TIMER`` on the timer topic (saved with
the consumer offsets) is the lowest queue offset not yet handled; every message after it that was
delivered is named in a *done* record (tag ``timer_done``, body the JSON list of queue offsets),
written to the timer topic in batches right after the deliveries. A restart replays the queue from
the progress offset, skips what the done records name, and delivers the rest; a message is
delivered twice only when the broker dies between its delivery and its done record.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import orjson

from ferrymq.broker.consumer_offsets import ConsumerOffsetManager
from ferrymq.broker.message_copy import restored_message
from ferrymq.broker.store_port import MessageStorePort
from ferrymq.broker.timer.timer_message import TIMER_TOPIC, build_delete_key
from ferrymq.message import MessageConst, MessageInner
from ferrymq.store.dispatch import RoundRecords
from ferrymq.store.record import DecodedRecord, RecordKind, check_record
from ferrymq.store.results import GetMessageStatus
from ferrymq.tasks import cancel_and_wait, wait_event

log = logging.getLogger(__name__)

__all__ = ["TIMER_GROUP", "LatenessLog", "TimerService"]

TIMER_GROUP = "CID_RMQ_SYS_TIMER"
DONE_TAG = "timer_done"
_READ_BATCH = 64
_DONE_BATCH = 256
_RETRY_S = 1.0
_IDLE_S = 1.0


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(slots=True)
class LatenessLog:
    """How late each delivery was (ms past TIMER_OUT_MS), bounded: for figures and tests."""

    limit: int = 100_000
    values: list[int] = field(default_factory=list)

    def add(self, value: int) -> None:
        if len(self.values) < self.limit:
            self.values.append(value)


class TimerService:
    def __init__(
        self,
        store: MessageStorePort,
        offsets: ConsumerOffsetManager,
        *,
        store_host: tuple[str, int],
        clock_ms: Callable[[], int] = _now_ms,
    ) -> None:
        self.store = store
        self.offsets = offsets
        self.store_host = store_host
        self.clock_ms = clock_ms
        self._heap: list[tuple[int, int]] = []  # (due ms, queue offset)
        self._pending: set[int] = set()
        self._deleted: dict[str, int] = {}  # delete key -> due ms of the recall
        self._done_buffer: list[int] = []
        self._read_offset = 0
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.delivered = 0
        self.recalled = 0
        self._listening = False
        self.lateness = LatenessLog()

    # --- lifecycle ----------------------------------------------------------------------------
    async def start(self) -> None:
        """Replay the timer queue from the saved progress and deliver from then on; called again
        after a promotion (the state is rebuilt from the replicated log)."""
        self._heap, self._pending, self._deleted, self._done_buffer = [], set(), {}, []
        start = max(
            self.offsets.query_offset(TIMER_GROUP, TIMER_TOPIC, 0),
            self.store.get_min_offset_in_queue(TIMER_TOPIC, 0),
        )
        self._read_offset = start
        self._read_new(replay=True)
        if not self._listening:
            self.store.add_dispatch_round_listener(self._on_dispatch_round)
            self._listening = True
        self._task = asyncio.create_task(self._run(), name="timer-service")

    async def shutdown(self) -> None:
        # the shared stop: a cancel of shutdown's own caller is not swallowed with the task's
        await cancel_and_wait(self._task)
        self._task = None
        with contextlib.suppress(Exception):
            await self._flush_done()
        self._commit_progress()

    @property
    def pending(self) -> int:
        return len(self._pending)

    def _on_dispatch_round(self, arrived: RoundRecords) -> None:
        if TIMER_TOPIC in arrived.topics():
            self._wake.set()

    # --- reading the timer queue --------------------------------------------------------------
    def _read_new(self, *, replay: bool = False) -> None:
        """Take in every record of the timer queue past the read offset."""
        done: set[int] = set()
        seen: list[tuple[int, int]] = []
        end = self.store.get_max_offset_in_queue(TIMER_TOPIC, 0)
        offset = self._read_offset
        while offset < end:
            result = self.store.get_message(TIMER_GROUP, TIMER_TOPIC, 0, offset, _READ_BATCH)
            try:
                if result.status is not GetMessageStatus.FOUND or not result.messages:
                    if result.next_begin_offset <= offset:
                        break
                    offset = result.next_begin_offset
                    continue
                for view, queue_offset in zip(result.messages, result.queue_offsets, strict=False):
                    offset = queue_offset + 1
                    checked = check_record(view, 0, len(view), check_crc=False)
                    record = checked.record
                    if checked.kind is not RecordKind.MESSAGE or record is None:
                        log.error("timer: unreadable record at %d; skipped", queue_offset)
                        continue
                    if record.tags == DONE_TAG:
                        body = bytes(view[record.body_pos : record.body_pos + record.body_len])
                        with contextlib.suppress(orjson.JSONDecodeError, TypeError):
                            done.update(int(o) for o in orjson.loads(body))
                        continue
                    due = self._due_of(record)
                    if due is None:
                        log.error("timer: message at %d has no TIMER_OUT_MS; skipped", queue_offset)
                        continue
                    delete_key = record.properties.get(MessageConst.PROPERTY_TIMER_DEL_UNIQKEY)
                    if delete_key:
                        self._deleted[delete_key] = due
                    seen.append((due, queue_offset))
            finally:
                result.release()
        self._read_offset = offset
        for due, queue_offset in seen:
            if queue_offset in done:
                continue
            self._pending.add(queue_offset)
            heapq.heappush(self._heap, (due, queue_offset))
        if replay and seen:
            log.info("timer: %d pending timer messages after replay", len(self._pending))

    @staticmethod
    def _due_of(record: DecodedRecord) -> int | None:
        raw = record.properties.get(MessageConst.PROPERTY_TIMER_OUT_MS)
        try:
            return int(raw) if raw is not None else None
        except ValueError:
            return None

    # --- delivery -----------------------------------------------------------------------------
    async def _run(self) -> None:
        while True:
            self._wake.clear()
            self._read_new()
            wait_s = _IDLE_S
            try:
                wait_s = await self.deliver_due()
            except Exception:  # a bad message must not stop delivery of the others
                log.exception("timer delivery failed; retrying")
                wait_s = _RETRY_S
            await wait_event(self._wake, wait_s)

    async def deliver_due(self) -> float:
        """Deliver every due message; seconds until the next one is due (at most the idle time)."""
        heap = self._heap
        while heap:
            due, queue_offset = heap[0]
            now = self.clock_ms()
            if due > now:
                # record what was delivered before waiting: a done marker held back until the
                # next message is due leaves a kill -9 in between to deliver those again
                await self._flush_done()
                return min(_IDLE_S, (due - now) / 1000)
            heapq.heappop(heap)
            if queue_offset not in self._pending:
                continue
            if not await self._deliver(queue_offset, due):
                heapq.heappush(heap, (due, queue_offset))
                return _RETRY_S
            self._pending.discard(queue_offset)
            self._done_buffer.append(queue_offset)
            if len(self._done_buffer) >= _DONE_BATCH:
                await self._flush_done()
        await self._flush_done()
        return _IDLE_S

    async def _deliver(self, queue_offset: int, due: int) -> bool:
        result = self.store.get_message(TIMER_GROUP, TIMER_TOPIC, 0, queue_offset, 1)
        try:
            if result.status is not GetMessageStatus.FOUND or not result.messages:
                log.warning("timer: message at %d is gone (%s)", queue_offset, result.status.name)
                return True
            view = result.messages[0]
            checked = check_record(view, 0, len(view), check_crc=False)
            record = checked.record
            if checked.kind is not RecordKind.MESSAGE or record is None:
                return True
            props = dict(record.properties)
            if MessageConst.PROPERTY_TIMER_DEL_UNIQKEY in props:
                # a recall marker: its own time has come, the message it deleted is past
                self._deleted.pop(props[MessageConst.PROPERTY_TIMER_DEL_UNIQKEY], None)
                return True
            msg = self._to_real_topic(
                record, props, bytes(view[record.body_pos : record.body_pos + record.body_len])
            )
        finally:
            result.release()
        if msg is None:
            return True
        uniq = msg.properties.get(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
        if uniq and build_delete_key(msg.topic, uniq) in self._deleted:
            self.recalled += 1
            return True
        put = await self.store.put_message(msg)
        if not put.is_ok:
            log.warning("timer: put to %s failed (%s); retrying", msg.topic, put.status.name)
            return False
        self.delivered += 1
        self.lateness.add(self.clock_ms() - due)
        return True

    def _to_real_topic(
        self, record: DecodedRecord, props: dict[str, str], body: bytes
    ) -> MessageInner | None:
        topic = props.pop(MessageConst.PROPERTY_REAL_TOPIC, None)
        qid = props.pop(MessageConst.PROPERTY_REAL_QUEUE_ID, None)
        if not topic or qid is None or not qid.lstrip("-").isdigit():
            log.error("timer: message without REAL_TOPIC/REAL_QID dropped")
            return None
        props[MessageConst.PROPERTY_TIMER_ENQUEUE_MS] = str(record.store_timestamp)
        props[MessageConst.PROPERTY_TIMER_DEQUEUE_MS] = str(self.clock_ms())
        return restored_message(
            record,
            topic=topic,
            queue_id=int(qid),
            body=body,
            properties=props,
            sys_flag=record.sys_flag,
        )

    async def _flush_done(self) -> None:
        if not self._done_buffer:
            self._commit_progress()
            return
        batch, self._done_buffer = self._done_buffer, []
        marker = MessageInner.create(
            TIMER_TOPIC,
            0,
            orjson.dumps(batch),
            {MessageConst.PROPERTY_TAGS: DONE_TAG},
            born_timestamp=self.clock_ms(),
            born_host=self.store_host,
        )
        result = await self.store.put_message(marker)
        if not result.is_ok:
            # the deliveries stand; a restart before the next marker may deliver these again
            log.warning("timer: done record not stored (%s)", result.status.name)
        self._commit_progress()

    def _commit_progress(self) -> None:
        progress = min(self._pending) if self._pending else self._read_offset
        if progress > self.offsets.query_offset(TIMER_GROUP, TIMER_TOPIC, 0):
            self.offsets.commit_offset(TIMER_GROUP, TIMER_TOPIC, 0, progress)
