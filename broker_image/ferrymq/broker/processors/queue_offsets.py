"""GET_MAX_OFFSET (30), GET_MIN_OFFSET (31), SEARCH_OFFSET_BY_TIMESTAMP (29),
GET_EARLIEST_MSG_STORETIME (32): queue positions answered from the store."""

from __future__ import annotations

from ferrymq.broker.processors.common import guarded
from ferrymq.broker.store_port import MessageStorePort
from ferrymq.remoting.channel import Channel
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.headers import (
    GetEarliestMsgStoretimeRequestHeader,
    GetEarliestMsgStoretimeResponseHeader,
    GetMaxOffsetRequestHeader,
    GetMinOffsetRequestHeader,
    OffsetResponseHeader,
    SearchOffsetRequestHeader,
)
from ferrymq.remoting.server import RemotingServer


def reported_min_offset(store_min: int) -> int:
    """The min offset a client sees: upstream's findConsumeQueue creates a missing queue on demand,
    so an empty or never-seen queue answers 0, never the store's -1 "no such queue"."""
    return max(0, store_min)


class QueueOffsetProcessor:
    def __init__(self, store: MessageStorePort) -> None:
        self.store = store

    def register_to(self, server: RemotingServer) -> None:
        server.register(RequestCode.GET_MAX_OFFSET, guarded(self.max_offset))
        server.register(RequestCode.GET_MIN_OFFSET, guarded(self.min_offset))
        server.register(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, guarded(self.search_offset))
        server.register(RequestCode.GET_EARLIEST_MSG_STORETIME, guarded(self.earliest_time))

    def max_offset(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        h = GetMaxOffsetRequestHeader.from_ext(request.ext_fields)
        offset = self.store.get_max_offset_in_queue(h.topic, h.queue_id)
        return request.response(ResponseCode.SUCCESS, None, OffsetResponseHeader(offset).to_ext())

    def min_offset(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        h = GetMinOffsetRequestHeader.from_ext(request.ext_fields)
        offset = reported_min_offset(self.store.get_min_offset_in_queue(h.topic, h.queue_id))
        return request.response(ResponseCode.SUCCESS, None, OffsetResponseHeader(offset).to_ext())

    def search_offset(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        h = SearchOffsetRequestHeader.from_ext(request.ext_fields)
        offset = self.store.get_offset_in_queue_by_time(h.topic, h.queue_id, h.timestamp)
        return request.response(ResponseCode.SUCCESS, None, OffsetResponseHeader(offset).to_ext())

    def earliest_time(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        h = GetEarliestMsgStoretimeRequestHeader.from_ext(request.ext_fields)
        ts = self.store.get_earliest_message_time(h.topic, h.queue_id)
        if ts < 0:
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                f"no message in queue {h.topic}:{h.queue_id}",
            )
        return request.response(
            ResponseCode.SUCCESS, None, GetEarliestMsgStoretimeResponseHeader(ts).to_ext()
        )
