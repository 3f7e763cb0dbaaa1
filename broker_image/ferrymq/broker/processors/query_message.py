"""QUERY_MESSAGE (12, by key through the IndexFile) and VIEW_MESSAGE_BY_ID (33, by CommitLog offset)
(upstream QueryMessageProcessor). Bodies are stored records back to back, as in a pull."""

from __future__ import annotations

from ferrymq.broker.processors.common import encode_message_ext, guarded
from ferrymq.broker.store_port import MessageStorePort
from ferrymq.remoting.channel import Channel
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.headers import (
    QueryMessageRequestHeader,
    QueryMessageResponseHeader,
    ViewMessageRequestHeader,
)
from ferrymq.remoting.server import RemotingServer

# upstream defaultQueryMaxNum
MAX_QUERY_NUM = 32


class QueryMessageProcessor:
    def __init__(self, store: MessageStorePort) -> None:
        self.store = store

    def register_to(self, server: RemotingServer) -> None:
        server.register(RequestCode.QUERY_MESSAGE, guarded(self.query_message))
        server.register(RequestCode.VIEW_MESSAGE_BY_ID, guarded(self.view_message))

    def query_message(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        h = QueryMessageRequestHeader.from_ext(request.ext_fields)
        max_num = min(max(1, h.max_num), MAX_QUERY_NUM)
        # "_UNIQUE_KEY_QUERY" asks for one exact message (query by client msgId)
        if request.ext_fields.get("_UNIQUE_KEY_QUERY") == "true":
            max_num = 1
        result = self.store.query_message(
            h.topic, h.key, max_num, h.begin_timestamp, h.end_timestamp
        )
        records = [encode_message_ext(msg) for msg in result.messages[:max_num]]
        header = QueryMessageResponseHeader(
            index_last_update_timestamp=result.index_last_update_timestamp,
            index_last_update_phyoffset=result.index_last_update_phyoffset,
        ).to_ext()
        if not records:
            return request.response(
                ResponseCode.QUERY_NOT_FOUND,
                f"can not find message, maybe time range not correct: topic {h.topic} key {h.key}",
                header,
            )
        return request.response(ResponseCode.SUCCESS, None, header, b"".join(records))

    def view_message(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        h = ViewMessageRequestHeader.from_ext(request.ext_fields)
        msg = self.store.look_message_by_offset(h.offset)
        if msg is None:
            return request.response(
                ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {h.offset}"
            )
        return request.response(ResponseCode.SUCCESS, None, None, encode_message_ext(msg))
