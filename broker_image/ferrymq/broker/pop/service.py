"""POP bookkeeping of a broker: checkpoint and ack records in the revive topic, the in-flight
table, revive (redelivery through the POP retry topic), replay at start, and long-poll wake-ups.

Design (decided here; upstream's shape with one simplification):
- Checkpoints and acks are messages of ``rmq_sys_REVIVE_LOG_<cluster>`` (``reviveQueueNum``
  queues), JSON with upstream's field names and tags ``ck``/``ack``/``bAck``. They are therefore
  in the CommitLog: as durable as any message under the broker's flushDiskType, and replicated to
  slaves by HA with everything else. A pop answers only after its CK is stored; an ack answers
  only after its ack record is stored.
- Unlike upstream they are *not* timer messages: the revive side keeps the pending CKs in memory
  (:class:`InflightTable`), ordered by revive time, and redelivers exactly when a CK's
  ``popTime + invisibleTime`` passes (upstream: 1 s slots plus the revive scan, ~5 s late).
- The revive progress of each revive queue is the consumer offset of ``CID_RMQ_SYS_REVIVE_GROUP``
  (in consumerOffset.json with the other offsets, so saved atomically with the pop offsets it
  must agree with). At start the broker replays each revive queue from there: pending CKs come
  back with their acks, and each popped queue's consumer offset is moved past its CKs, so a
  ``kill -9`` loses no in-flight message and does not hand out again one acked before it.
- A revived CK gets a batch ack of the offsets it re-put, so a replay does not re-put them again.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from ferrymq.broker.consumer_offsets import ConsumerOffsetManager
from ferrymq.broker.message_copy import restored_message
from ferrymq.broker.pop.checkpoint import (
    ACK_TAG,
    BATCH_ACK_TAG,
    CK_TAG,
    REVIVE_GROUP,
    AckRecord,
    CheckPoint,
    CheckpointError,
    revive_topic,
)
from ferrymq.broker.pop.extra_info import pop_retry_topic
from ferrymq.broker.pop.inflight import InflightTable
from ferrymq.broker.pop.order_info import OrderInfoManager
from ferrymq.broker.store_port import MessageStorePort
from ferrymq.broker.topic_config import TopicConfigManager
from ferrymq.message import MessageConst, MessageInner
from ferrymq.remoting.bodies import PERM_READ, PERM_WRITE, TopicConfig
from ferrymq.store.dispatch import RoundRecords
from ferrymq.store.json_file import AtomicFileWriter
from ferrymq.store.record import RecordKind, check_record
from ferrymq.store.results import GetMessageStatus
from ferrymq.tasks import cancel_and_wait, wait_event
from ferrymq.topic_validator import RETRY_GROUP_TOPIC_PREFIX

log = logging.getLogger(__name__)

__all__ = ["PopConfig", "PopService"]

_REPLAY_BATCH = 32
_REVIVE_RETRY_MS = 10_000  # a failed revive is tried again this much later (upstream: 10 s first)
_IDLE_S = 1.0
_ORDER_SAVE_S = 5.0  # as flushConsumerOffsetInterval


@dataclass(frozen=True, slots=True)
class PopConfig:
    broker_name: str
    cluster_name: str
    store_host: tuple[str, int]
    revive_queue_num: int = 8  # upstream reviveQueueNum
    enable_retry_topic_v2: bool = False  # upstream enableRetryTopicV2
    pop_from_retry_probability: int = 20  # upstream popFromRetryProbability (percent)
    init_pop_offset_by_check_msg_in_mem: bool = True  # upstream initPopOffsetByCheckMsgInMem

    @property
    def revive_topic(self) -> str:
        return revive_topic(self.cluster_name)


def _now_ms() -> int:
    return int(time.time() * 1000)


class PopService:
    def __init__(
        self,
        config: PopConfig,
        store: MessageStorePort,
        offsets: ConsumerOffsetManager,
        topics: TopicConfigManager,
        *,
        clock_ms: Callable[[], int] = _now_ms,
        on_topic_created: Callable[[str], None] = lambda topic: None,
        order_info_path: Path | None = None,
    ) -> None:
        self.config = config
        self.store = store
        self.offsets = offsets
        self.topics = topics
        self.clock_ms = clock_ms
        self.on_topic_created = on_topic_created
        self.inflight = InflightTable()
        self.orders = OrderInfoManager()
        self._revive_counter = itertools.count()
        self._wake_revive = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._waiters: dict[str, set[asyncio.Future[None]]] = {}
        self.revived = 0
        self.running = False
        self._listening = False
        # orderly pop state, saved every few seconds and at shutdown (upstream consumerOrderInfo)
        self.order_info_path = order_info_path
        self._order_writer = AtomicFileWriter(order_info_path) if order_info_path else None
        self._order_saved_at = 0.0

    # --- lifecycle ----------------------------------------------------------------------------
    def ensure_revive_topic(self) -> None:
        topic = self.config.revive_topic
        if self.topics.get(topic) is None:
            n = self.config.revive_queue_num
            self.topics.update(
                TopicConfig(
                    topic_name=topic,
                    read_queue_nums=n,
                    write_queue_nums=n,
                    perm=PERM_READ | PERM_WRITE,
                )
            )
            self.on_topic_created(topic)

    async def start(self, *, revive: bool = True) -> None:
        """Replay the revive topic (pending CKs, acks, pop offsets); then, on a master, revive.
        Called again after a promotion: the state is rebuilt from the (replicated) log."""
        if not self._listening:
            self.store.add_dispatch_round_listener(self._on_dispatch_round)
            self._listening = True
        self.inflight = InflightTable()
        self.orders = OrderInfoManager()
        if self.order_info_path is not None and self.order_info_path.exists():
            data = await asyncio.to_thread(self.order_info_path.read_bytes)
            try:
                self.orders.restore(data)
            except ValueError as exc:  # orderly batches are handed out again: no message lost
                log.error("%s: %s; starting with no orderly state", self.order_info_path, exc)
        self.ensure_revive_topic()
        self.replay()
        if revive:
            self.running = True
            self._task = asyncio.create_task(self._revive_loop(), name="pop-revive")

    async def shutdown(self) -> None:
        self.running = False
        # the shared stop: a cancel of shutdown's own caller is not swallowed with the task's
        await cancel_and_wait(self._task)
        self._task = None
        self.commit_progress()
        await self.save_order_info()
        for futures in self._waiters.values():
            for fut in futures:
                if not fut.done():
                    fut.set_result(None)

    async def save_order_info(self) -> None:
        if self._order_writer is None or not self.orders.dirty:
            return
        self.orders.dirty = False
        try:
            await self._order_writer.write(self.orders.snapshot())
        except OSError as exc:
            self.orders.dirty = True
            log.error("cannot write %s: %s", self.order_info_path, exc)

    # --- records ------------------------------------------------------------------------------
    def next_revive_qid(self) -> int:
        return next(self._revive_counter) % self.config.revive_queue_num

    def _record(self, revive_qid: int, tag: str, body: bytes, uniq: str) -> MessageInner:
        now = self.clock_ms()
        return MessageInner.create(
            self.config.revive_topic,
            revive_qid,
            body,
            {
                MessageConst.PROPERTY_TAGS: tag,
                MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX: uniq,
            },
            born_timestamp=now,
            born_host=self.config.store_host,
        )

    async def append_checkpoint(self, ck: CheckPoint, revive_qid: int) -> bool:
        """Store ``ck`` in revive queue ``revive_qid`` and track it; False when the put failed."""
        ck.revive_qid = revive_qid
        uniq = f"{ck.topic}@{ck.queue_id}@{ck.start_offset}@{ck.group}@{ck.pop_time}@{ck.broker_name}@ck"
        inflight = self.inflight
        inflight.begin_write(revive_qid)
        offset: int | None = None
        try:
            result = await self.store.put_message(
                self._record(revive_qid, CK_TAG, ck.encode(), uniq)
            )
            if not result.is_ok or result.append_result is None:
                log.error("pop checkpoint not stored: %s %s", result.status.name, result.remark)
                return False
            offset = result.append_result.queue_offset
        finally:
            inflight.end_write(revive_qid, offset)
        ck.revive_offset = offset
        inflight.add(ck)
        self._wake_revive.set()
        return True

    async def append_ack(self, ack: AckRecord, revive_qid: int) -> bool:
        """Store the ack and apply it; False when the put failed. An ack whose CK is not pending
        here (already revived, acked, or never seen) is stored all the same, as upstream does."""
        uniq = f"{ack.topic}@{ack.queue_id}@{ack.offsets[0]}@{ack.group}@{ack.pop_time}@{ack.broker_name}@{ack.tag}"
        result = await self.store.put_message(self._record(revive_qid, ack.tag, ack.encode(), uniq))
        if not result.is_ok:
            log.error("pop ack not stored: %s %s", result.status.name, result.remark)
            return False
        if result.append_result is not None:
            self.inflight.note_offset(revive_qid, result.append_result.queue_offset)
        self.inflight.apply_ack(ack)
        return True

    # --- replay -------------------------------------------------------------------------------
    def replay(self) -> int:
        """Rebuild pending CKs from every revive queue's progress on; returns the CKs replayed."""
        topic = self.config.revive_topic
        replayed = 0
        for qid in range(self.config.revive_queue_num):
            offset = self.offsets.query_offset(REVIVE_GROUP, topic, qid)
            offset = max(offset, self.store.get_min_offset_in_queue(topic, qid))
            end = self.store.get_max_offset_in_queue(topic, qid)
            while offset < end:
                result = self.store.get_message(REVIVE_GROUP, topic, qid, offset, _REPLAY_BATCH)
                try:
                    if result.status is not GetMessageStatus.FOUND or not result.messages:
                        if result.next_begin_offset <= offset:
                            break
                        offset = result.next_begin_offset
                        continue
                    for view, queue_offset in zip(
                        result.messages, result.queue_offsets, strict=False
                    ):
                        replayed += self._replay_record(qid, queue_offset, view)
                        offset = queue_offset + 1
                finally:
                    result.release()
        if replayed:
            log.info("pop: %d in-flight checkpoints replayed from %s", replayed, topic)
        return replayed

    def _replay_record(self, qid: int, queue_offset: int, view: memoryview) -> int:
        checked = check_record(view, 0, len(view), check_crc=False)
        record = checked.record
        if checked.kind is not RecordKind.MESSAGE or record is None:
            log.error("pop replay: unreadable revive record %d@%d; skipped", queue_offset, qid)
            return 0
        body = bytes(view[record.body_pos : record.body_pos + record.body_len])
        tag = record.tags
        try:
            if tag == CK_TAG:
                ck = CheckPoint.decode(body)
                ck.revive_qid = qid
                ck.revive_offset = queue_offset
                self.inflight.add(ck)
                # the pop offset moved past this CK before the pop answered; the saved offset
                # may be older than that (saved every few seconds)
                end = ck.start_offset + (max(ck.diffs) if ck.diffs else 0) + 1
                if self.offsets.query_offset(ck.group, ck.topic, ck.queue_id) < end:
                    self.offsets.commit_offset(ck.group, ck.topic, ck.queue_id, end)
                return 1
            if tag in (ACK_TAG, BATCH_ACK_TAG):
                self.inflight.note_offset(qid, queue_offset)
                self.inflight.apply_ack(AckRecord.decode(body))
        except CheckpointError as exc:
            log.error("pop replay: revive record %d@%d: %s; skipped", queue_offset, qid, exc)
        return 0

    def commit_progress(self) -> None:
        topic = self.config.revive_topic
        for qid in self.inflight.revive_queues():
            progress = self.inflight.progress(qid)
            if progress is not None and progress > self.offsets.query_offset(
                REVIVE_GROUP, topic, qid
            ):
                self.offsets.commit_offset(REVIVE_GROUP, topic, qid, progress)

    # --- revive -------------------------------------------------------------------------------
    async def _revive_loop(self) -> None:
        while True:
            self._wake_revive.clear()
            now = self.clock_ms()
            for ck in self.inflight.pop_due(now):
                try:
                    done = await self.revive(ck)
                except Exception:  # one bad CK must not stop redelivery of the others
                    log.exception("pop revive of %s failed", ck.key)
                    done = False
                if not done:
                    self.inflight.retry_later(ck, self.clock_ms() + _REVIVE_RETRY_MS)
            self.commit_progress()
            if time.monotonic() - self._order_saved_at >= _ORDER_SAVE_S:
                self._order_saved_at = time.monotonic()
                await self.save_order_info()
            due = self.inflight.next_due()
            wait_s = _IDLE_S if due is None else max(0.0, (due - self.clock_ms()) / 1000)
            await wait_event(self._wake_revive, min(wait_s, _IDLE_S))

    async def revive(self, ck: CheckPoint) -> bool:
        """Re-put each unacked message of ``ck`` to the POP retry topic with reconsumeTimes + 1
        (upstream PopReviveService.reviveRetry), then resolve it."""
        unacked = ck.unacked_offsets()
        if ck.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            target = ck.topic
        else:
            target = pop_retry_topic(ck.topic, ck.group, v2=self.config.enable_retry_topic_v2)
        if unacked and self.topics.get(target) is None:
            self.topics.create_in_send_back(target, 1, PERM_READ | PERM_WRITE)
            self.on_topic_created(target)
        for offset in unacked:
            msg = self._retry_message(ck, offset, target)
            if msg is None:
                continue
            result = await self.store.put_message(msg)
            if not result.is_ok:
                log.warning("pop revive: put to %s failed: %s", target, result.status.name)
                return False
            self.revived += 1
        if unacked:
            # marks the re-put offsets handled, so a replay after a crash does not re-put them
            marker = AckRecord(
                ck.topic,
                ck.group,
                ck.queue_id,
                ck.start_offset,
                ck.pop_time,
                ck.broker_name,
                tuple(unacked) if len(unacked) > 1 else (unacked[0],),
            )
            await self.append_ack(marker, ck.revive_qid)
        self.inflight.resolve(ck.key)
        return True

    def _retry_message(self, ck: CheckPoint, offset: int, target: str) -> MessageInner | None:
        result = self.store.get_message(ck.group, ck.topic, ck.queue_id, offset, 1)
        try:
            if result.status is not GetMessageStatus.FOUND or not result.messages:
                log.warning(
                    "pop revive: %s@%d offset %d is gone (%s); not redelivered",
                    ck.topic,
                    ck.queue_id,
                    offset,
                    result.status.name,
                )
                return None
            view = result.messages[0]
            checked = check_record(view, 0, len(view), check_crc=False)
            record = checked.record
            if checked.kind is not RecordKind.MESSAGE or record is None:
                return None
            props = dict(record.properties)
            if record.reconsume_times == 0 or MessageConst.PROPERTY_FIRST_POP_TIME not in props:
                props[MessageConst.PROPERTY_FIRST_POP_TIME] = str(ck.pop_time)
            msg = restored_message(
                record,
                topic=target,
                queue_id=0,
                body=bytes(view[record.body_pos : record.body_pos + record.body_len]),
                properties=props,
                sys_flag=record.sys_flag,
                reconsume_times=record.reconsume_times + 1,
            )
            msg.born_host = self.config.store_host
            return msg
        finally:
            result.release()

    # --- long-poll wake-ups -------------------------------------------------------------------
    def _on_dispatch_round(self, arrived: RoundRecords) -> None:
        if self._waiters:
            self.notify(arrived.topics())

    def notify(self, topics: Iterable[str]) -> None:
        for topic in topics:
            for fut in self._waiters.pop(topic, ()):
                if not fut.done():
                    fut.set_result(None)

    async def wait_arrival(self, topics: Iterable[str], timeout_s: float) -> None:
        """Until a message reaches one of ``topics`` (or an orderly queue unblocks), at most
        ``timeout_s``."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        names = list(topics)
        for topic in names:
            self._waiters.setdefault(topic, set()).add(fut)
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(fut), timeout_s)
        finally:
            for topic in names:
                waiters = self._waiters.get(topic)
                if waiters is not None:
                    waiters.discard(fut)
                    if not waiters:
                        del self._waiters[topic]
