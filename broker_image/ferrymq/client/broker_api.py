"""Typed calls a client makes to a broker (the broker half of upstream MQClientAPIImpl).

Each method builds one request from a typed header, sends it over the shared RemotingClient, and
turns the reply into a result object or an exception: a transport failure becomes
:class:`BrokerUnreachableError`, a non-success code the exception of :func:`errors.for_code`.
Statuses that are results rather than failures (flush timeouts on send; not-found, retry and
offset-moved on pull) come back as enums.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TypeVar

from ferrymq.client.allocate import MessageQueue
from ferrymq.client.errors import BrokerUnreachableError, response_error
from ferrymq.message import MessageExt
from ferrymq.remoting import bodies, headers
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand, next_opaque
from ferrymq.remoting.errors import RemotingError
from ferrymq.store.record import decode_messages

DEFAULT_TIMEOUT_S = 3.0
_B = TypeVar("_B", bound=bodies.Body)


class SendStatus(enum.Enum):
    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


_SEND_STATUS: dict[int, SendStatus] = {
    ResponseCode.SUCCESS: SendStatus.SEND_OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE,
}


@dataclass(frozen=True, slots=True)
class SendResult:
    status: SendStatus
    msg_id: str
    """The client-side unique id (UNIQ_KEY); for a batch, the ids joined by commas."""
    offset_msg_id: str
    """The broker's store id (host + CommitLog offset), what VIEW_MESSAGE_BY_ID takes."""
    queue: MessageQueue
    queue_offset: int
    transaction_id: str | None = None


class PullStatus(enum.Enum):
    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"
    NO_MATCHED_MSG = "NO_MATCHED_MSG"
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"


_PULL_STATUS: dict[int, PullStatus] = {
    ResponseCode.SUCCESS: PullStatus.FOUND,
    ResponseCode.PULL_NOT_FOUND: PullStatus.NO_NEW_MSG,
    ResponseCode.PULL_RETRY_IMMEDIATELY: PullStatus.NO_MATCHED_MSG,
    ResponseCode.PULL_OFFSET_MOVED: PullStatus.OFFSET_ILLEGAL,
}


@dataclass(slots=True)
class PullResult:
    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    suggest_which_broker_id: int
    messages: list[MessageExt]


class BrokerApi:
    def __init__(self, remoting: RemotingClient, timeout: float = DEFAULT_TIMEOUT_S) -> None:
        self.remoting = remoting
        self.timeout = timeout

    async def _invoke(
        self, addr: str, request: RemotingCommand, timeout: float | None = None
    ) -> RemotingCommand:
        remoting = self.remoting
        # a live channel is awaited directly: one coroutine fewer than remoting.invoke per call
        channel = remoting.open_channel(addr)
        try:
            if channel is not None:
                return await channel.invoke(request, timeout or self.timeout)
            return await remoting.invoke(addr, request, timeout or self.timeout)
        except RemotingError as exc:
            raise BrokerUnreachableError(addr, str(exc)) from exc
        except ValueError as exc:  # a malformed address
            raise BrokerUnreachableError(addr, str(exc)) from exc

    async def call(
        self,
        addr: str,
        code: int,
        header: headers.Header | None = None,
        body: bytes | None = None,
        timeout: float | None = None,
    ) -> RemotingCommand:
        """One request to ``addr``; a non-success answer raises its MQResponseError, a transport
        failure BrokerUnreachableError. The one call helper of the client (AdminClient's too)."""
        ext = header.to_ext() if header is not None else None
        response = await self._invoke(addr, RemotingCommand.request(code, ext, body), timeout)
        if response.code != ResponseCode.SUCCESS:
            raise response_error(response.code, response.remark, addr)
        return response

    async def call_body(
        self,
        model: type[_B],
        addr: str,
        code: int,
        header: headers.Header | None = None,
        body: bytes | None = None,
        timeout: float | None = None,
    ) -> _B:
        """:meth:`call`, with the reply body decoded as ``model`` (a bad body: SYSTEM_ERROR)."""
        response = await self.call(addr, code, header, body, timeout)
        try:
            return model.decode(response.body_bytes())
        except bodies.BodyError as exc:
            raise response_error(
                ResponseCode.SYSTEM_ERROR, f"bad reply body: {exc}", addr
            ) from None

    # --- send ---------------------------------------------------------------------------------
    async def send_message(
        self,
        addr: str,
        broker_name: str,
        header: headers.SendMessageRequestHeader,
        body: bytes,
        *,
        batch: bool = False,
        timeout: float | None = None,
        msg_id: str | None = None,
    ) -> SendResult:
        """``msg_id``: the client's id(s) for the result (the producer's UNIQ_KEYs); when None,
        the broker's batchUniqId or msgId."""
        mq = MessageQueue(header.topic, broker_name, header.queue_id)
        return await self.send_message_ext(
            addr, mq, v2_ext(header), body, batch=batch, timeout=timeout, msg_id=msg_id
        )

    async def send_message_ext(
        self,
        addr: str,
        mq: MessageQueue,
        ext_fields: dict[str, str],
        body: bytes,
        *,
        batch: bool = False,
        timeout: float | None = None,
        msg_id: str | None = None,
    ) -> SendResult:
        """:meth:`send_message` with the header already encoded (``v2_ext``) for queue ``mq``:
        the producer fills a per-queue template instead of building a header object."""
        response = await self._invoke(addr, send_request(ext_fields, body, batch), timeout)
        return send_result(response, addr, mq, msg_id)

    async def send_oneway(
        self,
        addr: str,
        header: headers.SendMessageRequestHeader,
        body: bytes,
        *,
        batch: bool = False,
    ) -> None:
        code = RequestCode.SEND_BATCH_MESSAGE if batch else RequestCode.SEND_MESSAGE_V2
        try:
            await self.remoting.invoke_oneway(
                addr, RemotingCommand.request(code, v2_ext(header), body, oneway=True)
            )
        except (RemotingError, ValueError) as exc:
            raise BrokerUnreachableError(addr, str(exc)) from exc

    async def consumer_send_msg_back(
        self, addr: str, msg: MessageExt, group: str, delay_level: int, max_reconsume_times: int
    ) -> None:
        header = headers.ConsumerSendMsgBackRequestHeader(
            offset=msg.commit_log_offset,
            group=group,
            delay_level=delay_level,
            origin_msg_id=msg.msg_id,
            origin_topic=msg.topic,
            max_reconsume_times=max_reconsume_times,
        )
        await self.call(addr, RequestCode.CONSUMER_SEND_MSG_BACK, header)

    # --- pull ---------------------------------------------------------------------------------
    async def pull_message(
        self,
        addr: str,
        header: headers.PullMessageRequestHeader | dict[str, str],
        timeout: float,
    ) -> PullResult:
        """``header`` may be the already-encoded ext fields (the pull service reuses one per
        queue and changes only the offsets between pulls)."""
        ext_fields = header if isinstance(header, dict) else header.to_ext()
        request = RemotingCommand.request(RequestCode.PULL_MESSAGE, ext_fields)
        response = await self._invoke(addr, request, timeout)
        status = _PULL_STATUS.get(response.code)
        if status is None:
            raise response_error(response.code, response.remark, addr)
        ext = headers.PullMessageResponseHeader.from_ext(response.ext_fields)
        messages: list[MessageExt] = []
        if status is PullStatus.FOUND and response.body is not None:
            try:
                messages = decode_messages(response.body_bytes())
            except ValueError as exc:
                raise response_error(
                    ResponseCode.SYSTEM_ERROR, f"undecodable pull body: {exc}", addr
                ) from None
        return PullResult(
            status,
            ext.next_begin_offset,
            ext.min_offset,
            ext.max_offset,
            ext.suggest_which_broker_id,
            messages,
        )

    # --- clients and offsets --------------------------------------------------------------------
    async def heartbeat(self, addr: str, data: bodies.HeartbeatData) -> None:
        await self.call(addr, RequestCode.HEART_BEAT, body=data.encode())

    async def unregister_client(
        self, addr: str, client_id: str, producer_group: str | None, consumer_group: str | None
    ) -> None:
        header = headers.UnregisterClientRequestHeader(
            client_id=client_id, producer_group=producer_group, consumer_group=consumer_group
        )
        await self.call(addr, RequestCode.UNREGISTER_CLIENT, header)

    async def get_consumer_id_list(self, addr: str, group: str) -> list[str]:
        header = headers.GetConsumerListByGroupRequestHeader(consumer_group=group)
        body = await self.call_body(
            bodies.ConsumerListBody, addr, RequestCode.GET_CONSUMER_LIST_BY_GROUP, header
        )
        return body.consumer_id_list

    async def query_consumer_offset(self, addr: str, group: str, mq: MessageQueue) -> int:
        """The committed offset; -1 when the broker has none (QUERY_NOT_FOUND)."""
        header = headers.QueryConsumerOffsetRequestHeader(
            consumer_group=group, topic=mq.topic, queue_id=mq.queue_id
        )
        request = RemotingCommand.request(RequestCode.QUERY_CONSUMER_OFFSET, header.to_ext())
        response = await self._invoke(addr, request)
        if response.code == ResponseCode.QUERY_NOT_FOUND:
            return -1
        if response.code != ResponseCode.SUCCESS:
            raise response_error(response.code, response.remark, addr)
        return headers.QueryConsumerOffsetResponseHeader.from_ext(response.ext_fields).offset

    async def update_consumer_offset(
        self, addr: str, group: str, mq: MessageQueue, offset: int
    ) -> None:
        header = headers.UpdateConsumerOffsetRequestHeader(
            consumer_group=group, topic=mq.topic, queue_id=mq.queue_id, commit_offset=offset
        )
        await self.call(addr, RequestCode.UPDATE_CONSUMER_OFFSET, header)

    async def _offset(self, addr: str, code: int, header: headers.Header) -> int:
        response = await self.call(addr, code, header)
        return headers.OffsetResponseHeader.from_ext(response.ext_fields).offset

    async def get_max_offset(self, addr: str, mq: MessageQueue) -> int:
        header = headers.GetMaxOffsetRequestHeader(topic=mq.topic, queue_id=mq.queue_id)
        return await self._offset(addr, RequestCode.GET_MAX_OFFSET, header)

    async def get_min_offset(self, addr: str, mq: MessageQueue) -> int:
        header = headers.GetMinOffsetRequestHeader(topic=mq.topic, queue_id=mq.queue_id)
        return await self._offset(addr, RequestCode.GET_MIN_OFFSET, header)

    async def search_offset(self, addr: str, mq: MessageQueue, timestamp_ms: int) -> int:
        header = headers.SearchOffsetRequestHeader(
            topic=mq.topic, queue_id=mq.queue_id, timestamp=timestamp_ms
        )
        return await self._offset(addr, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, header)

    async def get_earliest_msg_storetime(self, addr: str, mq: MessageQueue) -> int:
        header = headers.GetEarliestMsgStoretimeRequestHeader(topic=mq.topic, queue_id=mq.queue_id)
        response = await self.call(addr, RequestCode.GET_EARLIEST_MSG_STORETIME, header)
        return headers.GetEarliestMsgStoretimeResponseHeader.from_ext(response.ext_fields).timestamp

    # --- queries ------------------------------------------------------------------------------
    async def query_message(
        self, addr: str, topic: str, key: str, max_num: int, begin_ms: int, end_ms: int
    ) -> list[MessageExt]:
        """Messages of ``topic`` whose KEYS (or UNIQ_KEY) hold ``key``; empty when none."""
        header = headers.QueryMessageRequestHeader(
            topic=topic, key=key, max_num=max_num, begin_timestamp=begin_ms, end_timestamp=end_ms
        )
        request = RemotingCommand.request(RequestCode.QUERY_MESSAGE, header.to_ext())
        response = await self._invoke(addr, request)
        if response.code == ResponseCode.QUERY_NOT_FOUND:
            return []
        if response.code != ResponseCode.SUCCESS:
            raise response_error(response.code, response.remark, addr)
        return decode_messages(response.body_bytes()) if response.body else []

    async def view_message(self, addr: str, commit_log_offset: int) -> MessageExt:
        header = headers.ViewMessageRequestHeader(offset=commit_log_offset)
        response = await self.call(addr, RequestCode.VIEW_MESSAGE_BY_ID, header)
        messages = decode_messages(response.body_bytes())
        if not messages:
            raise response_error(
                ResponseCode.QUERY_NOT_FOUND, "empty VIEW_MESSAGE_BY_ID reply", addr
            )
        return messages[0]

    # --- admin --------------------------------------------------------------------------------
    async def create_topic(self, addr: str, header: headers.CreateTopicRequestHeader) -> None:
        await self.call(addr, RequestCode.UPDATE_AND_CREATE_TOPIC, header)

    async def delete_topic(self, addr: str, topic: str) -> None:
        await self.call(
            addr, RequestCode.DELETE_TOPIC_IN_BROKER, headers.DeleteTopicRequestHeader(topic=topic)
        )

    async def wipe_write_perm(self, addr: str) -> int:
        """WIPE_WRITE_PERM_OF_BROKER on the broker itself (kept across its re-registrations)."""
        response = await self.call(addr, RequestCode.WIPE_WRITE_PERM_OF_BROKER)
        return int(response.ext_fields.get("wipeTopicCount", "0") or 0)

    async def add_write_perm(self, addr: str) -> int:
        response = await self.call(addr, RequestCode.ADD_WRITE_PERM_OF_BROKER)
        return int(response.ext_fields.get("addTopicCount", "0") or 0)

    async def get_all_topic_config(self, addr: str) -> bodies.TopicConfigSerializeWrapper:
        return await self.call_body(
            bodies.TopicConfigSerializeWrapper, addr, RequestCode.GET_ALL_TOPIC_CONFIG
        )

    async def update_broker_config(self, addr: str, properties: dict[str, str]) -> None:
        # upstream sends the changed properties as a java.util.Properties text body
        text = "".join(f"{k}={v}\n" for k, v in properties.items())
        await self.call(addr, RequestCode.UPDATE_BROKER_CONFIG, body=text.encode("utf-8"))

    async def get_broker_config(self, addr: str) -> dict[str, str]:
        response = await self.call(addr, RequestCode.GET_BROKER_CONFIG)
        return parse_properties_text(response.body_bytes().decode("utf-8", "replace"))

    async def get_broker_runtime_info(self, addr: str) -> dict[str, str]:
        body = await self.call_body(bodies.KVTable, addr, RequestCode.GET_BROKER_RUNTIME_INFO)
        return body.table

    async def get_all_consumer_offset(self, addr: str) -> bodies.ConsumerOffsetSerializeWrapper:
        return await self.call_body(
            bodies.ConsumerOffsetSerializeWrapper, addr, RequestCode.GET_ALL_CONSUMER_OFFSET
        )

    async def create_subscription_group(
        self, addr: str, config: bodies.SubscriptionGroupConfig
    ) -> None:
        await self.call(addr, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=config.encode())

    async def get_all_subscription_group_config(self, addr: str) -> bodies.SubscriptionGroupWrapper:
        return await self.call_body(
            bodies.SubscriptionGroupWrapper, addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG
        )

    async def delete_subscription_group(
        self, addr: str, group: str, *, clean_offset: bool = False
    ) -> None:
        header = headers.DeleteSubscriptionGroupRequestHeader(
            group_name=group, clean_offset=clean_offset
        )
        await self.call(addr, RequestCode.DELETE_SUBSCRIPTIONGROUP, header)

    async def get_topic_stats_info(self, addr: str, topic: str) -> bodies.TopicStatsTable:
        header = headers.GetTopicStatsInfoRequestHeader(topic=topic)
        return await self.call_body(
            bodies.TopicStatsTable, addr, RequestCode.GET_TOPIC_STATS_INFO, header
        )

    async def get_consumer_connection_list(
        self, addr: str, group: str
    ) -> bodies.ConsumerConnection:
        header = headers.GetConsumerConnectionListRequestHeader(consumer_group=group)
        return await self.call_body(
            bodies.ConsumerConnection, addr, RequestCode.GET_CONSUMER_CONNECTION_LIST, header
        )

    async def get_consume_stats(
        self, addr: str, group: str, topic: str | None = None
    ) -> bodies.ConsumeStats:
        header = headers.GetConsumeStatsRequestHeader(consumer_group=group, topic=topic)
        return await self.call_body(
            bodies.ConsumeStats, addr, RequestCode.GET_CONSUME_STATS, header
        )


def send_request(ext_fields: dict[str, str], body: bytes, batch: bool) -> RemotingCommand:
    """SEND_MESSAGE_V2 (or SEND_BATCH_MESSAGE) with a ``v2_ext`` header, a fresh opaque."""
    code = RequestCode.SEND_BATCH_MESSAGE if batch else RequestCode.SEND_MESSAGE_V2
    return RemotingCommand(code, ext_fields, body, next_opaque())


def send_result(
    response: RemotingCommand, addr: str, mq: MessageQueue, msg_id: str | None
) -> SendResult:
    """A send's reply as a result (flush/slave timeouts are statuses), or the code's exception.

    ``msg_id``: the client's id(s) for the result (the producer's UNIQ_KEYs); when None, the
    broker's batchUniqId or msgId."""
    status = _SEND_STATUS.get(response.code)
    if status is None:
        raise response_error(response.code, response.remark, addr)
    get = response.ext_fields.get
    offset_msg_id = get("msgId", "")
    queue_id = get("queueId")
    if queue_id and queue_id != str(mq.queue_id):
        mq = MessageQueue(mq.topic, mq.broker_name, int(queue_id))
    return SendResult(
        status,
        msg_id if msg_id is not None else (get("batchUniqId") or offset_msg_id),
        offset_msg_id,
        mq,
        int(get("queueOffset") or -1),
        get("transactionId"),
    )


def v2_ext(h: headers.SendMessageRequestHeader) -> dict[str, str]:
    """``h.to_ext_v2()`` written out field by field: the same strings, without the generic
    reflection, because every send pays for it."""
    ext = {
        "a": h.producer_group,
        "b": h.topic,
        "c": h.default_topic,
        "d": str(h.default_topic_queue_nums),
        "e": str(h.queue_id),
        "f": str(h.sys_flag),
        "g": str(h.born_timestamp),
        "h": str(h.flag),
        "k": "true" if h.unit_mode else "false",
        "m": "true" if h.batch else "false",
    }
    if h.properties is not None:
        ext["i"] = h.properties
    if h.reconsume_times is not None:
        ext["j"] = str(h.reconsume_times)
    if h.max_reconsume_times is not None:
        ext["l"] = str(h.max_reconsume_times)
    return ext


def parse_properties_text(text: str) -> dict[str, str]:
    """A Java properties text (GET_BROKER_CONFIG body) as a dict, with Java escapes honoured."""
    import javaproperties

    return dict(javaproperties.loads(text))
