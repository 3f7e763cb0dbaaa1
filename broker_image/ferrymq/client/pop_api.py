"""POP calls a client makes to a broker over remoting (upstream ``MQClientAPIImpl.popMessageAsync``,
``ackMessageAsync``, ``batchAckMessageAsync``, ``changeInvisibleTimeAsync``, ``queryAssignment``,
``setMessageRequestMode``, ``recallMessage``), the same requests Java 5.x sends.

:func:`pop_result` turns a POP_MESSAGE response into messages whose ``POP_CK`` property is the
receipt handle, built exactly as ``MQClientAPIImpl.processPopResponse`` does from the response
header's startOffsetInfo / msgOffsetInfo / orderCountInfo (so a proxy built on this gets the same
handles as upstream's proxy over Apache's broker, without the 9th commitLogOffset field, which the
proxy appends itself).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from ferrymq.broker.pop import extra_info as xi
from ferrymq.broker.pop.checkpoint import bitset_encode
from ferrymq.client.errors import BrokerUnreachableError, response_error
from ferrymq.message import MessageConst, MessageExt
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.errors import RemotingError
from ferrymq.store.record import decode_messages

__all__ = [
    "PopApi",
    "PopResult",
    "PopStatus",
    "pop_result",
]


class PopStatus(enum.Enum):
    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"
    POLLING_FULL = "POLLING_FULL"
    POLLING_NOT_FOUND = "POLLING_NOT_FOUND"


_POP_STATUS: dict[int, PopStatus] = {
    ResponseCode.SUCCESS: PopStatus.FOUND,
    ResponseCode.POLLING_FULL: PopStatus.POLLING_FULL,
    ResponseCode.POLLING_TIMEOUT: PopStatus.POLLING_NOT_FOUND,
    ResponseCode.PULL_NOT_FOUND: PopStatus.POLLING_NOT_FOUND,
}


@dataclass(slots=True)
class PopResult:
    status: PopStatus
    messages: list[MessageExt] = field(default_factory=list)
    pop_time: int = 0
    invisible_time: int = 0
    rest_num: int = 0


def _split_info(text: str | None) -> dict[str, list[str]]:
    """``"a b c;d e f"`` -> ``{"a@b": [c...]}`` (upstream parseStartOffsetInfo & co.)."""
    out: dict[str, list[str]] = {}
    if not text:
        return out
    for one in text.split(";"):
        parts = one.split(" ")
        if len(parts) != 3:
            raise ValueError(f"parse offset info error, {text}")
        out[f"{parts[0]}@{parts[1]}"] = parts[2].split(",")
    return out


def pop_result(
    response: RemotingCommand, broker_name: str, topic: str, *, order: bool = False
) -> PopResult:
    """The PopResult of a POP_MESSAGE response; raises the response-code exception otherwise."""
    status = _POP_STATUS.get(response.code)
    if status is None:
        raise response_error(response.code, response.remark)
    ext = response.ext_fields
    result = PopResult(
        status,
        pop_time=int(ext.get("popTime") or 0),
        invisible_time=int(ext.get("invisibleTime") or 0),
        rest_num=int(ext.get("restNum") or 0),
    )
    if status is not PopStatus.FOUND:
        return result
    revive_qid = int(ext.get("reviveQid") or 0)
    starts = _split_info(ext.get("startOffsetInfo"))
    offsets = _split_info(ext.get("msgOffsetInfo"))
    counts = _split_info(ext.get("orderCountInfo"))
    messages = decode_messages(response.body_bytes())
    for msg in messages:
        props = msg.properties
        if MessageConst.PROPERTY_POP_CK not in props:
            key = f"{xi.retry_type(msg.topic)}@{msg.queue_id}"
            start = starts.get(key)
            if start is None or str(msg.queue_offset) not in offsets.get(key, ()):
                raise ValueError(f"no offset info for {key} offset {msg.queue_offset}")
            props[MessageConst.PROPERTY_POP_CK] = xi.build_extra_info(
                int(start[0]),
                result.pop_time,
                result.invisible_time,
                revive_qid,
                msg.topic,
                broker_name,
                msg.queue_id,
                msg.queue_offset,
            )
            if order:
                count = counts.get(
                    f"{xi.retry_type(msg.topic)}@qo{msg.queue_id}%{msg.queue_offset}"
                )
                if count is None:
                    count = counts.get(key)
                if count is not None and int(count[0]) > 0:
                    msg.reconsume_times = int(count[0])
        props.setdefault(MessageConst.PROPERTY_FIRST_POP_TIME, str(result.pop_time))
        msg.topic = topic
    result.messages = messages
    return result


class PopApi:
    def __init__(self, remoting: RemotingClient, timeout: float = 3.0) -> None:
        self.remoting = remoting
        self.timeout = timeout

    async def _invoke(
        self, addr: str, request: RemotingCommand, timeout: float | None = None
    ) -> RemotingCommand:
        try:
            return await self.remoting.invoke(addr, request, timeout or self.timeout)
        except RemotingError as exc:
            raise BrokerUnreachableError(addr, str(exc)) from exc

    async def _call(
        self,
        addr: str,
        code: int,
        header: dict[str, Any] | None = None,
        body: bytes | None = None,
    ) -> RemotingCommand:
        """One request whose only good answer is SUCCESS; any other code raises its error."""
        response = await self._invoke(addr, RemotingCommand.request(code, header, body))
        if response.code != ResponseCode.SUCCESS:
            raise response_error(response.code, response.remark, addr)
        return response

    async def pop(
        self,
        addr: str,
        broker_name: str,
        *,
        group: str,
        topic: str,
        queue_id: int = -1,
        max_msg_nums: int = 32,
        invisible_time_ms: int = 60_000,
        poll_time_ms: int = 0,
        born_time_ms: int = 0,
        init_mode: int = 0,
        exp_type: str | None = None,
        exp: str | None = None,
        order: bool = False,
        attempt_id: str | None = None,
    ) -> PopResult:
        header: dict[str, Any] = {
            "consumerGroup": group,
            "topic": topic,
            "queueId": queue_id,
            "maxMsgNums": max_msg_nums,
            "invisibleTime": invisible_time_ms,
            "pollTime": poll_time_ms,
            "bornTime": born_time_ms,
            "initMode": init_mode,
            "order": order,
        }
        if exp_type is not None:
            header["expType"] = exp_type
        if exp is not None:
            header["exp"] = exp
        if attempt_id is not None:
            header["attemptId"] = attempt_id
        request = RemotingCommand.request(RequestCode.POP_MESSAGE, header)
        response = await self._invoke(addr, request, self.timeout + poll_time_ms / 1000)
        return pop_result(response, broker_name, topic, order=order)

    async def ack(self, addr: str, group: str, topic: str, handle: str) -> bool:
        """Ack by receipt handle; ``topic`` is the consumer's topic (the retry topic is derived
        from the handle, as the Java client does). True on SUCCESS (upstream AckStatus.OK)."""
        info = xi.parse_extra_info(handle)
        header = {
            "consumerGroup": group,
            "topic": xi.real_topic(topic, group, info.topic_type),
            "queueId": info.queue_id,
            "extraInfo": handle,
            "offset": info.queue_offset,
        }
        response = await self._invoke(
            addr, RemotingCommand.request(RequestCode.ACK_MESSAGE, header)
        )
        return response.code == ResponseCode.SUCCESS

    async def batch_ack(self, addr: str, group: str, topic: str, handles: Sequence[str]) -> bool:
        """BATCH_ACK_MESSAGE merged per (retry, queue, start offset, pop time), as the Java client."""
        merged: dict[str, dict[str, Any]] = {}
        bits: dict[str, list[int]] = {}
        broker_name: str | None = None
        for handle in handles:
            info = xi.parse_extra_info(handle)
            broker_name = broker_name or info.broker_name
            key = f"{info.topic_type}@{info.queue_id}@{info.start_offset}@{info.pop_time}"
            if key not in merged:
                merged[key] = {
                    "c": group,
                    "t": topic,
                    "r": info.topic_type,
                    "so": info.start_offset,
                    "q": info.queue_id,
                    "rq": info.revive_qid,
                    "pt": info.pop_time,
                    "it": info.invisible_time,
                }
                bits[key] = []
            bits[key].append(info.queue_offset - info.start_offset)
        acks = [{**entry, "b": bitset_encode(bits[key])} for key, entry in merged.items()]
        body = orjson.dumps({"brokerName": broker_name, "acks": acks})
        request = RemotingCommand.request(RequestCode.BATCH_ACK_MESSAGE, None, body)
        response = await self._invoke(addr, request)
        return response.code == ResponseCode.SUCCESS

    async def change_invisible_time(
        self, addr: str, group: str, topic: str, handle: str, invisible_time_ms: int
    ) -> str:
        """The new receipt handle (built as the Java client builds it); raises on failure."""
        info = xi.parse_extra_info(handle)
        real = xi.real_topic(topic, group, info.topic_type)
        header = {
            "consumerGroup": group,
            "topic": real,
            "queueId": info.queue_id,
            "extraInfo": handle,
            "offset": info.queue_offset,
            "invisibleTime": invisible_time_ms,
        }
        response = await self._call(addr, RequestCode.CHANGE_MESSAGE_INVISIBLETIME, header)
        ext = response.ext_fields
        return (
            xi.build_extra_info(
                info.queue_offset,
                int(ext["popTime"]),
                int(ext["invisibleTime"]),
                int(ext["reviveQid"]),
                real,
                info.broker_name,
                info.queue_id,
            )
            + f" {info.queue_offset}"
        )

    async def query_assignment(
        self,
        addr: str,
        *,
        topic: str,
        group: str,
        client_id: str,
        strategy: str = "AVG",
        message_model: str = "CLUSTERING",
    ) -> list[dict[str, Any]] | None:
        body = orjson.dumps(
            {
                "topic": topic,
                "consumerGroup": group,
                "clientId": client_id,
                "strategyName": strategy,
                "messageModel": message_model,
            }
        )
        response = await self._call(addr, RequestCode.QUERY_ASSIGNMENT, None, body)
        parsed = orjson.loads(response.body_bytes())
        assignments = parsed.get("messageQueueAssignments")
        return list(assignments) if assignments is not None else None

    async def set_message_request_mode(
        self, addr: str, *, topic: str, group: str, mode: str, pop_share_queue_num: int = 0
    ) -> None:
        body = orjson.dumps(
            {
                "topic": topic,
                "consumerGroup": group,
                "mode": mode,
                "popShareQueueNum": pop_share_queue_num,
            }
        )
        await self._call(addr, RequestCode.SET_MESSAGE_REQUEST_MODE, None, body)

    async def recall(
        self, addr: str, *, topic: str, recall_handle: str, producer_group: str | None = None
    ) -> str:
        """RECALL_MESSAGE; the recalled message's id. Raises on a non-success code."""
        header: dict[str, Any] = {"topic": topic, "recallHandle": recall_handle}
        if producer_group is not None:
            header["producerGroup"] = producer_group
        response = await self._call(addr, RequestCode.RECALL_MESSAGE, header)
        return response.ext_fields.get("msgId", "")
