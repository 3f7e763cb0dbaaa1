"""GET_CONSUMER_LIST_BY_GROUP (38), QUERY_CONSUMER_OFFSET (14), UPDATE_CONSUMER_OFFSET (15)
(upstream ConsumerManageProcessor)."""

from __future__ import annotations

from ferrymq.broker.client_registry import ConsumerManager
from ferrymq.broker.consumer_offsets import ConsumerOffsetManager
from ferrymq.broker.processors.common import guarded
from ferrymq.broker.store_port import MessageStorePort
from ferrymq.remoting.bodies import ConsumerListBody
from ferrymq.remoting.channel import Channel
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.headers import (
    GetConsumerListByGroupRequestHeader,
    QueryConsumerOffsetRequestHeader,
    QueryConsumerOffsetResponseHeader,
    UpdateConsumerOffsetRequestHeader,
)
from ferrymq.remoting.server import RemotingServer


class ConsumerManageProcessor:
    def __init__(
        self,
        consumers: ConsumerManager,
        offsets: ConsumerOffsetManager,
        store: MessageStorePort,
    ) -> None:
        self.consumers = consumers
        self.offsets = offsets
        self.store = store

    def register_to(self, server: RemotingServer) -> None:
        server.register(RequestCode.GET_CONSUMER_LIST_BY_GROUP, guarded(self.consumer_list))
        server.register(RequestCode.QUERY_CONSUMER_OFFSET, guarded(self.query_offset))
        server.register(RequestCode.UPDATE_CONSUMER_OFFSET, guarded(self.update_offset))

    def consumer_list(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        header = GetConsumerListByGroupRequestHeader.from_ext(request.ext_fields)
        info = self.consumers.get(header.consumer_group)
        ids = info.client_ids() if info is not None else []
        if not ids:
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                f"no consumer for this group, {header.consumer_group}",
            )
        return request.response(
            ResponseCode.SUCCESS, None, None, ConsumerListBody(consumer_id_list=ids).encode()
        )

    def query_offset(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        h = QueryConsumerOffsetRequestHeader.from_ext(request.ext_fields)
        offset = self.offsets.query_offset(h.consumer_group, h.topic, h.queue_id)
        if offset >= 0:
            return request.response(
                ResponseCode.SUCCESS, None, QueryConsumerOffsetResponseHeader(offset).to_ext()
            )
        # a group that never committed: if the queue still starts at 0 and holds its first
        # message, the whole backlog is there, so answer 0 (upstream: minOffset <= 0 and the
        # message at offset 0 readable); else, an empty queue too, the client applies its
        # ConsumeFromWhere (and upstream clients then commit nothing for an empty queue)
        if (
            self.store.get_min_offset_in_queue(h.topic, h.queue_id) <= 0
            and self.store.get_max_offset_in_queue(h.topic, h.queue_id) > 0
        ):
            return request.response(
                ResponseCode.SUCCESS, None, QueryConsumerOffsetResponseHeader(0).to_ext()
            )
        return request.response(
            ResponseCode.QUERY_NOT_FOUND,
            "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first",
        )

    def update_offset(self, channel: Channel, request: RemotingCommand) -> RemotingCommand | None:
        h = UpdateConsumerOffsetRequestHeader.from_ext(request.ext_fields)
        self.offsets.commit_offset(h.consumer_group, h.topic, h.queue_id, h.commit_offset)
        return request.response(ResponseCode.SUCCESS)
