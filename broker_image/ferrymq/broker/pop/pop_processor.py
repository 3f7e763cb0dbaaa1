"""POP_MESSAGE (200050) (upstream ``PopMessageProcessor`` + ``PopLongPollingService``).

A pop reads up to ``maxMsgNums`` (<= 32) messages of one queue (``queueId`` >= 0) or of all the
topic's queues (``queueId`` -1) from the group's pop offset, and with a ``popFromRetryProbability``
chance (or when the batch is not full) from the group's POP retry topic. For each queue read it
stores a checkpoint (``PopService.append_checkpoint``) and moves the group's offset past the batch
before answering. An orderly pop (``order=true``) writes no checkpoint: the queue blocks while its
batch is invisible (``OrderInfoManager``). Nothing found: the request waits up to ``pollTime`` for a
message to arrive, then answers POLLING_TIMEOUT.

The response body is the stored records; a message from the retry topic is re-encoded with the
original topic and its ``POP_CK`` (as upstream without popResponseReturnActualRetryTopic). The
header carries popTime, invisibleTime, reviveQid, restNum and the startOffsetInfo / msgOffsetInfo
/ orderCountInfo strings the client rebuilds receipt handles from (``extra_info``).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ferrymq.broker.config import BrokerConfig
from ferrymq.broker.consumer_offsets import ConsumerOffsetManager
from ferrymq.broker.pop import extra_info as xi
from ferrymq.broker.pop.checkpoint import CheckPoint
from ferrymq.broker.pop.service import PopService
from ferrymq.broker.store_port import MessageStorePort
from ferrymq.broker.subscription_groups import Refusal, SubscriptionGroupManager
from ferrymq.broker.topic_config import TopicConfigManager
from ferrymq.filter import FilterCompileError, FilterNotSupportedError, build_message_filter
from ferrymq.filter.message_filter import TagMessageFilter
from ferrymq.message import MessageConst, encode_properties
from ferrymq.remoting.bodies import PERM_READ
from ferrymq.remoting.channel import Channel
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.server import RemotingServer
from ferrymq.store import record as rec
from ferrymq.store.record import RecordKind, check_record
from ferrymq.store.results import GetMessageStatus
from ferrymq.topic_validator import RETRY_GROUP_TOPIC_PREFIX

log = logging.getLogger(__name__)

__all__ = ["PopMessageProcessor", "PopRequest"]

MAX_POP_NUMS = 32
INIT_MODE_MIN = 0  # upstream ConsumeInitMode.MIN (MAX = 1)
_RESET_STATUSES = (
    GetMessageStatus.OFFSET_TOO_SMALL,
    GetMessageStatus.OFFSET_OVERFLOW_BADLY,
    GetMessageStatus.OFFSET_FOUND_NULL,
)
_SKIP_STATUSES = (
    GetMessageStatus.NO_MATCHED_MESSAGE,
    GetMessageStatus.OFFSET_FOUND_NULL,
    GetMessageStatus.MESSAGE_WAS_REMOVING,
    GetMessageStatus.NO_MATCHED_LOGIC_QUEUE,
)


@dataclass(frozen=True, slots=True)
class PopRequest:
    """PopMessageRequestHeader."""

    consumer_group: str
    topic: str
    queue_id: int
    max_msg_nums: int
    invisible_time: int
    poll_time: int
    born_time: int
    init_mode: int
    exp_type: str | None
    exp: str | None
    order: bool
    attempt_id: str | None

    @classmethod
    def from_command(cls, request: RemotingCommand, now_ms: int) -> PopRequest:
        ext = request.ext_fields
        group = ext.get("consumerGroup")
        topic = ext.get("topic")
        if not group or not topic:
            raise ValueError("the custom field <consumerGroup/topic> is null")
        born = request.ext_int("bornTime", 0)
        qid = request.ext_int("queueId")
        return cls(
            consumer_group=group,
            topic=topic,
            queue_id=-1 if qid < 0 else qid,
            max_msg_nums=request.ext_int("maxMsgNums"),
            invisible_time=request.ext_int("invisibleTime"),
            poll_time=request.ext_int("pollTime", 0),
            born_time=born if born > 0 else now_ms,
            init_mode=request.ext_int("initMode", INIT_MODE_MIN),
            exp_type=ext.get("expType") or None,
            exp=ext.get("exp") or None,
            order=request.ext_bool("order"),
            attempt_id=ext.get("attemptId") or None,
        )


@dataclass(slots=True)
class _Batch:
    """What one pop collects across queues."""

    pop_time: int
    revive_qid: int
    records: list[bytes] = field(default_factory=list)
    start_infos: list[tuple[str, int, int]] = field(default_factory=list)
    msg_infos: list[tuple[str, int, list[int]]] = field(default_factory=list)
    order_counts: list[tuple[str, int, int, int]] = field(default_factory=list)
    rest: int = 0


def initial_pop_offset(
    store: MessageStorePort, topic: str, qid: int, *, from_min: bool, check_in_mem: bool
) -> int:
    """Where a group's first pop of a queue begins (upstream ``PopMessageProcessor.getInitOffset``):
    the queue's start for CONSUME_FROM_MIN and retry topics; else 0 while the queue still begins at
    0 and message 0 is in memory, so a consumer started right after its producer misses nothing;
    else the last message."""
    if from_min:
        return store.get_min_offset_in_queue(topic, qid)
    if (
        check_in_mem
        and store.get_min_offset_in_queue(topic, qid) <= 0
        and store.check_in_mem_by_consume_offset(topic, qid, 0)
    ):
        return 0
    return max(0, store.get_max_offset_in_queue(topic, qid) - 1)


class PopMessageProcessor:
    def __init__(
        self,
        config: BrokerConfig,
        service: PopService,
        topics: TopicConfigManager,
        groups: SubscriptionGroupManager,
        offsets: ConsumerOffsetManager,
        *,
        is_slave: Callable[[], bool] = lambda: False,
        rng: random.Random | None = None,
    ) -> None:
        self.config = config
        self.service = service
        self.store = service.store
        self.topics = topics
        self.groups = groups
        self.offsets = offsets
        self.is_slave = is_slave
        self._rng = rng or random.Random()
        self._locks: set[tuple[str, str, int]] = set()
        self.popped = 0

    def register_to(self, server: RemotingServer) -> None:
        server.register(RequestCode.POP_MESSAGE, self.process)

    # --- request ------------------------------------------------------------------------------
    def _refuse(
        self, request: RemotingCommand, code: int, remark: str, pop_time: int = 0
    ) -> RemotingCommand:
        # the response header's @CFNotNull fields always present: the Java client decodes them
        header = {"popTime": pop_time, "invisibleTime": 0, "reviveQid": 0, "restNum": 0}
        return request.response(code, remark, header)

    async def process(self, channel: Channel, request: RemotingCommand) -> RemotingCommand | None:
        now = self.service.clock_ms()
        try:
            h = PopRequest.from_command(request, now)
        except ValueError as exc:
            return self._refuse(request, ResponseCode.SYSTEM_ERROR, str(exc))
        ip = self.config.broker_ip1
        if now - h.born_time - h.poll_time > 500:
            return self._refuse(
                request,
                ResponseCode.POLLING_TIMEOUT,
                f"the broker[{ip}] pop message is timeout too much",
            )
        if not self.config.broker_permission & PERM_READ:
            return self._refuse(
                request, ResponseCode.NO_PERMISSION, f"the broker[{ip}] pop message is forbidden"
            )
        if h.max_msg_nums > MAX_POP_NUMS:
            return self._refuse(
                request,
                ResponseCode.INVALID_PARAMETER,
                f"the broker[{ip}] pop message's num is greater than 32",
            )
        if self.is_slave() or not self.service.running:
            # a pop writes its checkpoint: only a master can serve it
            return self._refuse(
                request, ResponseCode.SERVICE_NOT_AVAILABLE, f"the broker[{ip}] is not a master"
            )
        topic_config = self.topics.get(h.topic)
        if topic_config is None:
            return self._refuse(
                request,
                ResponseCode.TOPIC_NOT_EXIST,
                f"topic[{h.topic}] not exist, apply first please!",
            )
        if not topic_config.perm & PERM_READ:
            return self._refuse(
                request,
                ResponseCode.NO_PERMISSION,
                f"the topic[{h.topic}] peeking message is forbidden",
            )
        if h.queue_id >= topic_config.read_queue_nums:
            return self._refuse(
                request,
                ResponseCode.INVALID_PARAMETER,
                f"queueId[{h.queue_id}] is illegal, topic:[{h.topic}] "
                f"topicConfig.readQueueNums:[{topic_config.read_queue_nums}] "
                f"consumer:[{channel.remote_addr}]",
            )
        group_config = self.groups.consumable(h.consumer_group)
        if isinstance(group_config, Refusal):
            return self._refuse(request, group_config.code, group_config.remark)
        try:
            message_filter = self._filter(h)
        except (FilterCompileError, FilterNotSupportedError):
            return self._refuse(
                request,
                ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                "parse the consumer's subscription failed",
            )

        retry_topic = xi.pop_retry_topic(
            h.topic, h.consumer_group, v2=self.service.config.enable_retry_topic_v2
        )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0, h.poll_time) / 1000
        while True:
            batch = await self._pop(h, topic_config.read_queue_nums, retry_topic, message_filter)
            remaining = deadline - loop.time()
            if batch.records or remaining <= 0 or not self.service.running:
                break
            await self.service.wait_arrival((h.topic, retry_topic), min(remaining, 1.0))
        return self._respond(request, h, batch)

    def _filter(self, h: PopRequest) -> Any:
        if not h.exp:
            return None
        built: Any = build_message_filter(
            h.exp_type, h.exp, enable_property_filter=self.config.enable_property_filter
        )
        if isinstance(built, TagMessageFilter) and built.subscription.is_all:
            return None
        return built

    def _respond(self, request: RemotingCommand, h: PopRequest, batch: _Batch) -> RemotingCommand:
        header: dict[str, object] = {
            "popTime": batch.pop_time,
            "invisibleTime": h.invisible_time,
            "reviveQid": batch.revive_qid,
            "restNum": batch.rest,
            "startOffsetInfo": xi.start_offset_info(batch.start_infos),
            "msgOffsetInfo": xi.msg_offset_info(batch.msg_infos),
        }
        if h.order and batch.order_counts:
            header["orderCountInfo"] = xi.order_count_info(batch.order_counts)
        if not batch.records:
            return request.response(ResponseCode.POLLING_TIMEOUT, "NO_MESSAGE_IN_QUEUE", header)
        self.popped += len(batch.records)
        return request.response(ResponseCode.SUCCESS, "FOUND", header, b"".join(batch.records))

    # --- popping ------------------------------------------------------------------------------
    async def _pop(
        self, h: PopRequest, queue_nums: int, retry_topic: str, message_filter: Any
    ) -> _Batch:
        service = self.service
        batch = _Batch(
            pop_time=service.clock_ms(),
            revive_qid=xi.POP_ORDER_REVIVE_QUEUE if h.order else service.next_revive_qid(),
        )
        retry_first = (
            not h.order and self._rng.randrange(100) < service.config.pop_from_retry_probability
        )
        if retry_first:
            await self._pop_topic(h, retry_topic, True, batch, None)
        if h.queue_id < 0:
            start = self._rng.randrange(queue_nums) if queue_nums else 0
            for i in range(queue_nums):
                await self._pop_queue(
                    h, h.topic, (start + i) % queue_nums, False, batch, message_filter
                )
        else:
            await self._pop_queue(h, h.topic, h.queue_id, False, batch, message_filter)
        if not retry_first and not h.order and len(batch.records) < h.max_msg_nums:
            await self._pop_topic(h, retry_topic, True, batch, None)
        return batch

    async def _pop_topic(
        self, h: PopRequest, topic: str, is_retry: bool, batch: _Batch, message_filter: Any
    ) -> None:
        config = self.topics.get(topic)
        if config is None:
            return
        for qid in range(config.read_queue_nums):
            await self._pop_queue(h, topic, qid, is_retry, batch, message_filter)

    def _pop_offset(self, h: PopRequest, topic: str, qid: int) -> int:
        offset = self.offsets.query_offset(h.consumer_group, topic, qid)
        if offset >= 0:
            return offset
        offset = initial_pop_offset(
            self.store,
            topic,
            qid,
            from_min=h.init_mode == INIT_MODE_MIN or topic.startswith(RETRY_GROUP_TOPIC_PREFIX),
            check_in_mem=self.service.config.init_pop_offset_by_check_msg_in_mem,
        )
        self.offsets.commit_offset(h.consumer_group, topic, qid, offset)
        return offset

    async def _pop_queue(
        self,
        h: PopRequest,
        topic: str,
        qid: int,
        is_retry: bool,
        batch: _Batch,
        message_filter: Any,
    ) -> None:
        want = h.max_msg_nums - len(batch.records)
        lock_key = (topic, h.consumer_group, qid)
        if lock_key in self._locks:  # another pop of this queue is writing its checkpoint
            return
        offset = self._pop_offset(h, topic, qid)
        if want <= 0:
            batch.rest += max(0, self.store.get_max_offset_in_queue(topic, qid) - offset)
            return
        now = self.service.clock_ms()
        if h.order and self.service.orders.check_block(
            h.attempt_id, topic, h.consumer_group, qid, now
        ):
            return
        self._locks.add(lock_key)
        try:
            await self._read_queue(h, topic, qid, is_retry, batch, message_filter, offset, want)
        finally:
            self._locks.discard(lock_key)

    async def _read_queue(
        self,
        h: PopRequest,
        topic: str,
        qid: int,
        is_retry: bool,
        batch: _Batch,
        message_filter: Any,
        offset: int,
        want: int,
    ) -> None:
        group = h.consumer_group
        result = self.store.get_message(group, topic, qid, offset, want, message_filter)
        if result.status in _RESET_STATUSES:
            # the stored offset is not valid any more: restart from where the store says
            result.release()
            offset = result.next_begin_offset
            self.offsets.commit_offset(group, topic, qid, offset)
            result = self.store.get_message(group, topic, qid, offset, want, message_filter)
        try:
            views = [bytes(v) for v in result.messages]
            queue_offsets = list(result.queue_offsets)
            status, next_begin, max_offset = (
                result.status,
                result.next_begin_offset,
                result.max_offset,
            )
        finally:
            result.release()
        if not views:
            if status in _SKIP_STATUSES and next_begin > offset:
                self.offsets.commit_offset(group, topic, qid, next_begin)
            return
        if h.order:
            counts = self.service.orders.update(
                h.attempt_id, topic, group, qid, batch.pop_time, h.invisible_time, queue_offsets
            )
            self.offsets.commit_offset(group, topic, qid, offset)
            batch.order_counts.extend((topic, qid, o, counts[o]) for o in queue_offsets)
        else:
            ck = CheckPoint(
                topic=topic,
                group=group,
                queue_id=qid,
                start_offset=offset,
                pop_time=batch.pop_time,
                invisible_time=h.invisible_time,
                diffs=[o - offset for o in queue_offsets],
                broker_name=self.service.config.broker_name,
            )
            if not await self.service.append_checkpoint(ck, batch.revive_qid):
                batch.rest += len(views)
                return
            if self.offsets.query_offset(group, topic, qid) < next_begin:
                self.offsets.commit_offset(group, topic, qid, next_begin)
        batch.rest += max(0, max_offset - next_begin)
        batch.start_infos.append((topic, qid, offset))
        batch.msg_infos.append((topic, qid, queue_offsets))
        if is_retry:
            views = [self._as_original(view, h, batch, offset) for view in views]
        batch.records.extend(views)

    def _as_original(self, view: bytes, h: PopRequest, batch: _Batch, start: int) -> bytes:
        """A retry-topic record re-encoded under the original topic with its POP_CK."""
        checked = check_record(view, 0, len(view), check_crc=False)
        r = checked.record
        if checked.kind is not RecordKind.MESSAGE or r is None:
            return view
        props = dict(r.properties)
        props.setdefault(
            MessageConst.PROPERTY_POP_CK,
            xi.build_extra_info(
                start,
                batch.pop_time,
                h.invisible_time,
                batch.revive_qid,
                r.topic,
                self.service.config.broker_name,
                r.queue_id,
                r.queue_offset,
            ),
        )
        return rec.reencode_record(
            r,
            queue_id=r.queue_id,
            body=view[r.body_pos : r.body_pos + r.body_len],
            topic=h.topic.encode(),
            properties=encode_properties(props).encode(),
        )
