"""Helpers shared by the processors: bad input -> response with a remark, and MessageExt -> record."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from ferrymq.message import MessageExt, encode_properties, pack_host
from ferrymq.remoting.bodies import BodyError
from ferrymq.remoting.channel import Channel
from ferrymq.remoting.codes import ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.headers import HeaderError
from ferrymq.store import record as rec

log = logging.getLogger(__name__)

Response = RemotingCommand | None
SyncHandler = Callable[[Channel, RemotingCommand], Response]
AsyncHandler = Callable[[Channel, RemotingCommand], Coroutine[Any, Any, Response]]

# errors a client caused: answered with a remark, logged without a traceback
BAD_INPUT = (HeaderError, BodyError)


def bad_input(channel: Channel, request: RemotingCommand, exc: Exception) -> RemotingCommand:
    log.warning("bad request code %d from %s: %s", request.code, channel.remote_addr, exc)
    return request.response(ResponseCode.SYSTEM_ERROR, str(exc))


def guarded(sync_handler: SyncHandler) -> SyncHandler:
    """Wrap a handler so a bad header/body becomes SYSTEM_ERROR with the reason as remark."""

    @functools.wraps(sync_handler)
    def run(channel: Channel, request: RemotingCommand) -> Response:
        try:
            return sync_handler(channel, request)
        except BAD_INPUT as exc:
            return bad_input(channel, request, exc)

    return run


def guarded_async(async_handler: AsyncHandler) -> AsyncHandler:
    """``guarded`` for coroutine handlers (long polls, store writes)."""

    @functools.wraps(async_handler)
    async def run(channel: Channel, request: RemotingCommand) -> Response:
        try:
            return await async_handler(channel, request)
        except BAD_INPUT as exc:
            return bad_input(channel, request, exc)

    return run


def encode_message_ext(msg: MessageExt) -> bytes:
    """The CommitLog record of a stored message (for QUERY_MESSAGE / VIEW_MESSAGE_BY_ID bodies)."""
    topic = msg.topic.encode()
    props = encode_properties(msg.properties).encode()
    return rec.encode_record(
        queue_id=msg.queue_id,
        flag=msg.flag,
        queue_offset=msg.queue_offset,
        physical_offset=msg.commit_log_offset,
        sys_flag=msg.sys_flag,
        born_timestamp=msg.born_timestamp,
        born_ip=pack_host(msg.born_host[0]),
        born_port=msg.born_host[1],
        store_timestamp=msg.store_timestamp,
        store_ip=pack_host(msg.store_host[0]),
        store_port=msg.store_host[1],
        reconsume_times=msg.reconsume_times,
        prepared_transaction_offset=msg.prepared_transaction_offset,
        body=msg.body,
        topic=topic,
        properties=props,
        crc=msg.body_crc or None,
    )
