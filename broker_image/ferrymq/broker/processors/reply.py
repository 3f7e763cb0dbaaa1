"""Request-reply (upstream ``ReplyMessageProcessor``): SEND_REPLY_MESSAGE(_V2) from a responder.

The reply names its requester in ``REPLY_TO_CLIENT`` (a client id). The broker pushes it to that
client's producer connection as PUSH_REPLY_MESSAGE_TO_CLIENT, which completes the requester's
``request()``, then stores it in the reply topic (``<cluster>_REPLY_TOPIC``;
``storeReplyMessageEnable``). The answer is SUCCESS only when the push succeeded; otherwise
SYSTEM_ERROR with upstream's remark.
"""

from __future__ import annotations

import logging
import time

from ferrymq.broker.client_registry import ProducerManager, find_producer_channel
from ferrymq.broker.processors.common import BAD_INPUT, bad_input
from ferrymq.broker.processors.send import SendMessageProcessor, split_addr
from ferrymq.message import (
    MessageConst,
    MessageInner,
    decode_properties,
    encode_properties,
    tags_string_to_tags_code,
)
from ferrymq.remoting.channel import Channel
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.headers import ReplyMessageRequestHeader, SendMessageRequestHeader
from ferrymq.remoting.server import RemotingServer
from ferrymq.store.results import PutMessageResult

log = logging.getLogger(__name__)

PUSH_TIMEOUT_S = 3.0


class ReplyMessageProcessor:
    def __init__(
        self,
        send: SendMessageProcessor,
        producers: ProducerManager,
        *,
        store_host: str,
        store_reply_message_enable: bool = True,
    ) -> None:
        self.send = send
        self.producers = producers
        self.store_host = store_host
        self.store_reply_message_enable = store_reply_message_enable

    def register_to(self, server: RemotingServer) -> None:
        for code in (RequestCode.SEND_REPLY_MESSAGE, RequestCode.SEND_REPLY_MESSAGE_V2):
            server.register(code, self.handle)

    async def handle(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        try:
            return await self._handle(channel, request)
        except BAD_INPUT as exc:
            return bad_input(channel, request, exc)

    async def _handle(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        header = SendMessageRequestHeader.from_ext(request.ext_fields)
        added = self.send.broker_added
        region = {
            MessageConst.PROPERTY_MSG_REGION: added[MessageConst.PROPERTY_MSG_REGION],
            MessageConst.PROPERTY_TRACE_SWITCH: added[MessageConst.PROPERTY_TRACE_SWITCH],
        }
        config = self.send.check(request, header, channel.remote_addr)
        if isinstance(config, RemotingCommand):
            return config
        body = request.body_bytes()
        queue_id = header.queue_id
        if queue_id < 0:
            queue_id = int(time.monotonic_ns()) % max(1, config.write_queue_nums)
        # upstream's send hook context adds MSG_REGION and TRACE_ON to the header's properties
        # before the reply is pushed and stored (not CLUSTER: that is the send path's)
        properties = {**decode_properties(header.properties or ""), **region}
        pushed, remark = await self._push(channel, header, properties, body)
        if not pushed:
            return request.response(ResponseCode.SYSTEM_ERROR, remark, ext_fields=region)
        fields: dict[str, object] = {"msgId": "0", "queueId": queue_id, "queueOffset": 0, **region}
        if self.store_reply_message_enable:
            tags = properties.get(MessageConst.PROPERTY_TAGS)
            inner = MessageInner(
                topic=header.topic,
                queue_id=queue_id,
                body=body,
                flag=header.flag,
                properties=properties,
                properties_string=encode_properties(properties),
                tags_code=tags_string_to_tags_code(tags) if tags else 0,
                sys_flag=header.sys_flag,
                born_timestamp=header.born_timestamp,
                born_host=split_addr(channel.remote_addr),
                reconsume_times=header.reconsume_times or 0,
            )
            put = self.send.store.put_message_nowait(inner)
            result = put if isinstance(put, PutMessageResult) else await put
            append = result.append_result
            if result.is_ok and append is not None:
                fields["msgId"] = append.msg_id
                fields["queueOffset"] = append.queue_offset
        return request.response(ResponseCode.SUCCESS, None, ext_fields=fields)

    async def _push(
        self,
        channel: Channel,
        header: SendMessageRequestHeader,
        properties: dict[str, str],
        body: bytes,
    ) -> tuple[bool, str]:
        """Push the reply to its requester: (ok, upstream's remark when not)."""
        sender = properties.get(MessageConst.PROPERTY_MESSAGE_REPLY_TO_CLIENT)
        if sender is None:
            key = MessageConst.PROPERTY_MESSAGE_REPLY_TO_CLIENT
            return False, f"reply message properties[{key}] is null"
        target = find_producer_channel(self.producers, sender)
        if target is None:
            return False, f"push reply message fail, channel of <{sender}> not found."
        pushed = dict(properties)
        pushed[MessageConst.PROPERTY_PUSH_REPLY_TIME] = str(int(time.time() * 1000))
        push_header = ReplyMessageRequestHeader(
            producer_group=header.producer_group,
            topic=header.topic,
            default_topic=header.default_topic,
            default_topic_queue_nums=header.default_topic_queue_nums,
            queue_id=header.queue_id,
            sys_flag=header.sys_flag,
            born_timestamp=header.born_timestamp,
            flag=header.flag,
            born_host=channel.remote_addr,
            store_host=self.store_host,
            store_timestamp=int(time.time() * 1000),
            properties=encode_properties(pushed),
            reconsume_times=header.reconsume_times,
            unit_mode=header.unit_mode,
        )
        push = RemotingCommand.request(
            RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT, push_header.to_ext(), body
        )
        try:
            answer = await target.invoke(push, PUSH_TIMEOUT_S)
        except Exception as exc:  # a dead or slow requester: upstream answers the same remark
            log.warning("push reply message to <%s> failed: %s", sender, exc)
            return False, f"push reply message to {sender}fail."
        if answer.code != ResponseCode.SUCCESS:
            log.warning("push reply message to <%s> refused: %s", sender, answer.remark)
            return False, f"push reply message to {sender}fail."
        return True, ""
