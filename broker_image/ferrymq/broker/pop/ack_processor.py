"""ACK_MESSAGE (200051), BATCH_ACK_MESSAGE (200151) and CHANGE_MESSAGE_INVISIBLETIME (200053)
(upstream ``AckMessageProcessor`` and ``ChangeInvisibleTimeProcessor``).

An ack names a popped message by its receipt handle (``extraInfo``: checkpoint start offset, pop
time, revive queue ...) plus the ``topic`` it was read from (the POP retry topic for a retried
message), ``queueId`` and ``offset``. A non-orderly ack is stored in the revive topic and sets its
checkpoint's bit; an orderly one (revive queue 999) commits the queue's offset up to the first
un-acked message and unblocks it. As upstream, an ack whose checkpoint is gone (already revived, or
never written) is still answered SUCCESS: the broker does not judge receipt handles (the 5.x proxy
checks expiry before it acks).

Changing the invisible time of a non-orderly message stores a new single-message checkpoint
(pop time now, the new invisible time) first and then acks the old one; the client builds the new
handle from the response's popTime / invisibleTime / reviveQid. An orderly message just gets a new
visibility deadline.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import NamedTuple

from ferrymq.broker.consumer_offsets import ConsumerOffsetManager
from ferrymq.broker.pop import extra_info as xi
from ferrymq.broker.pop.checkpoint import (
    AckRecord,
    CheckPoint,
    CheckpointError,
    parse_batch_ack_body,
)
from ferrymq.broker.pop.service import PopService
from ferrymq.broker.topic_config import TopicConfigManager
from ferrymq.remoting.channel import Channel
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.server import RemotingServer

log = logging.getLogger(__name__)

__all__ = ["AckMessageProcessor"]


class _AckHeader(NamedTuple):
    """What ACK_MESSAGE and CHANGE_MESSAGE_INVISIBLETIME both carry, parsed."""

    group: str
    topic: str
    queue_id: int
    offset: int
    invisible_time: int  # 0 for an ack, which carries none
    info: xi.ExtraInfo


class AckMessageProcessor:
    def __init__(
        self,
        service: PopService,
        topics: TopicConfigManager,
        offsets: ConsumerOffsetManager,
        *,
        is_slave: Callable[[], bool] = lambda: False,
    ) -> None:
        self.service = service
        self.store = service.store
        self.topics = topics
        self.offsets = offsets
        self.is_slave = is_slave
        self.acked = 0

    def register_to(self, server: RemotingServer) -> None:
        server.register(RequestCode.ACK_MESSAGE, self.ack)
        server.register(RequestCode.BATCH_ACK_MESSAGE, self.batch_ack)
        server.register(RequestCode.CHANGE_MESSAGE_INVISIBLETIME, self.change_invisible_time)

    # --- shared checks ------------------------------------------------------------------------
    def _checked_header(
        self, request: RemotingCommand, channel: Channel, *, need_invisible: bool = False
    ) -> _AckHeader | RemotingCommand:
        """The parsed header of an ack or change-invisible-time, or the response refusing it.

        Both name one popped message the same way (group, topic, queue, offset, receipt handle)
        and are refused for the same reasons, in the same order, as upstream.
        """
        ext = request.ext_fields
        group, topic, extra = ext.get("consumerGroup"), ext.get("topic"), ext.get("extraInfo")
        try:
            if not group or not topic or extra is None:
                raise ValueError("the custom field <consumerGroup/topic/extraInfo> is null")
            qid = request.ext_int("queueId")
            offset = request.ext_int("offset")
            invisible = request.ext_int("invisibleTime") if need_invisible else 0
            info = xi.parse_extra_info(extra)
        except ValueError as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, str(exc))
        refused = self._check_queue(request, channel, topic, qid)
        if refused is not None:
            return refused
        return _AckHeader(group, topic, qid, offset, invisible, info)

    def _check_queue(
        self, request: RemotingCommand, channel: Channel, topic: str, qid: int
    ) -> RemotingCommand | None:
        if self.is_slave() or not self.service.running:
            return request.response(
                ResponseCode.SERVICE_NOT_AVAILABLE, "the broker is not a master"
            )
        config = self.topics.get(topic)
        if config is None:
            return request.response(
                ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please!"
            )
        if qid < 0 or qid >= config.read_queue_nums:
            return request.response(
                ResponseCode.MESSAGE_ILLEGAL,
                f"queueId[{qid}] is illegal, topic:[{topic}] "
                f"topicConfig.readQueueNums:[{config.read_queue_nums}] "
                f"consumer:[{channel.remote_addr}]",
            )
        return None

    # --- ACK_MESSAGE --------------------------------------------------------------------------
    async def ack(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        checked = self._checked_header(request, channel)
        if isinstance(checked, RemotingCommand):
            return checked
        group, topic, qid, offset, _, info = checked
        lo = self.store.get_min_offset_in_queue(topic, qid)
        hi = self.store.get_max_offset_in_queue(topic, qid)
        if offset < lo or offset > hi:
            return request.response(
                ResponseCode.NO_MESSAGE,
                f"offset is illegal, key:{topic}@{qid}, commit:{offset}, store:{lo}~{hi}",
            )
        if info.is_order:
            return self._ack_orderly(request, channel, group, topic, qid, offset, info.pop_time)
        ack = AckRecord(
            topic, group, qid, info.start_offset, info.pop_time, info.broker_name, (offset,)
        )
        if not await self.service.append_ack(ack, info.revive_qid):
            return request.response(ResponseCode.SYSTEM_ERROR, "ack not stored")
        self.acked += 1
        return request.response(ResponseCode.SUCCESS)

    def _ack_orderly(
        self,
        request: RemotingCommand,
        channel: Channel,
        group: str,
        topic: str,
        qid: int,
        offset: int,
        pop_time: int,
    ) -> RemotingCommand:
        old = self.offsets.query_offset(group, topic, qid)
        if offset < old:
            return request.response(ResponseCode.SUCCESS)
        nxt = self.service.orders.commit_and_next(topic, group, qid, offset, pop_time)
        if nxt == -1:
            return request.response(
                ResponseCode.MESSAGE_ILLEGAL,
                f"offset is illegal, key:{topic}@{group}@{qid}, old:{old}, commit:{offset}, "
                f"next:{nxt}, {channel.remote_addr}",
            )
        if nxt >= 0:
            self.offsets.commit_offset(group, topic, qid, nxt)
            self.service.notify((topic,))
        self.acked += 1
        return request.response(ResponseCode.SUCCESS)

    # --- BATCH_ACK_MESSAGE --------------------------------------------------------------------
    async def batch_ack(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        try:
            broker_name, entries = parse_batch_ack_body(request.body_json())
        except (CheckpointError, ValueError) as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, str(exc))
        if not entries:
            return request.response(ResponseCode.NO_MESSAGE)
        if self.is_slave() or not self.service.running:
            return request.response(
                ResponseCode.SERVICE_NOT_AVAILABLE, "the broker is not a master"
            )
        for entry in entries:
            try:
                topic = xi.real_topic(entry.topic, entry.group, entry.retry)
            except xi.ExtraInfoError as exc:
                return request.response(ResponseCode.SYSTEM_ERROR, str(exc))
            lo = self.store.get_min_offset_in_queue(topic, entry.queue_id)
            hi = self.store.get_max_offset_in_queue(topic, entry.queue_id)
            offsets = [
                entry.start_offset + i for i in entry.bits if lo <= entry.start_offset + i <= hi
            ]
            if not offsets:
                continue
            if entry.revive_qid == xi.POP_ORDER_REVIVE_QUEUE:
                for offset in offsets:
                    self._ack_orderly(
                        request, channel, entry.group, topic, entry.queue_id, offset, entry.pop_time
                    )
                continue
            ack = AckRecord(
                topic,
                entry.group,
                entry.queue_id,
                entry.start_offset,
                entry.pop_time,
                broker_name or self.service.config.broker_name,
                tuple(offsets),
            )
            if not await self.service.append_ack(ack, entry.revive_qid):
                return request.response(ResponseCode.SYSTEM_ERROR, "ack not stored")
            self.acked += len(offsets)
        return request.response(ResponseCode.SUCCESS)

    # --- CHANGE_MESSAGE_INVISIBLETIME ---------------------------------------------------------
    async def change_invisible_time(
        self, channel: Channel, request: RemotingCommand
    ) -> RemotingCommand:
        checked = self._checked_header(request, channel, need_invisible=True)
        if isinstance(checked, RemotingCommand):
            return checked
        group, topic, qid, offset, invisible, info = checked
        lo = self.store.get_min_offset_in_queue(topic, qid)
        hi = self.store.get_max_offset_in_queue(topic, qid)
        if offset < lo or offset >= hi:
            return request.response(ResponseCode.NO_MESSAGE)
        service = self.service
        if info.is_order:
            header = {"popTime": info.pop_time, "invisibleTime": 0, "reviveQid": info.revive_qid}
            if offset >= self.offsets.query_offset(group, topic, qid):
                next_ms = service.clock_ms() + invisible
                service.orders.update_next_visible(
                    topic, group, qid, offset, info.pop_time, next_ms
                )
                header["invisibleTime"] = next_ms - info.pop_time
            return request.response(ResponseCode.SUCCESS, None, header)
        now = service.clock_ms()
        ck = CheckPoint(
            topic=topic,
            group=group,
            queue_id=qid,
            start_offset=offset,
            pop_time=now,
            invisible_time=invisible,
            diffs=[0],
            broker_name=info.broker_name,
        )
        if not await service.append_checkpoint(ck, info.revive_qid):
            return request.response(ResponseCode.SYSTEM_ERROR, "checkpoint not stored")
        old = AckRecord(
            topic, group, qid, info.start_offset, info.pop_time, info.broker_name, (offset,)
        )
        await service.append_ack(old, info.revive_qid)
        header = {"popTime": now, "invisibleTime": invisible, "reviveQid": info.revive_qid}
        return request.response(ResponseCode.SUCCESS, None, header)
