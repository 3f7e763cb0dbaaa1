"""CONSUMER_SEND_MSG_BACK (36): a consumer returns a message it failed to consume.

Translation only: header -> :meth:`RetryService.send_back` -> response code and remark.
"""

from __future__ import annotations

from ferrymq.broker.retry import RetryService
from ferrymq.remoting.channel import Channel
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.headers import ConsumerSendMsgBackRequestHeader, HeaderError
from ferrymq.remoting.server import RemotingServer

__all__ = ["ConsumerSendBackProcessor"]


class ConsumerSendBackProcessor:
    def __init__(self, service: RetryService) -> None:
        self.service = service

    def register(self, server: RemotingServer) -> None:
        server.register(RequestCode.CONSUMER_SEND_MSG_BACK, self.handle)

    async def handle(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        try:
            header = ConsumerSendMsgBackRequestHeader.from_ext(request.ext_fields)
        except HeaderError as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, str(exc))
        outcome = await self.service.send_back(
            group=header.group,
            commit_log_offset=header.offset,
            delay_level=header.delay_level,
            max_reconsume_times=header.max_reconsume_times,
            origin_msg_id=header.origin_msg_id,
        )
        return request.response(outcome.code, outcome.remark)
