"""SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320) (upstream SendMessageProcessor).

Checks (broker writable, topic name, topic exists or is auto-created through TBW102 / as a retry
topic, queue id in range, size), builds a MessageInner, awaits the store (which covers SYNC_FLUSH and
replication waits) and maps the put status to a response code with ``send_response_code``.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from ferrymq.broker.config import BrokerConfig
from ferrymq.broker.processors.common import BAD_INPUT, bad_input
from ferrymq.broker.store_port import MessagePuts
from ferrymq.broker.subscription_groups import SubscriptionGroupManager
from ferrymq.broker.topic_config import (
    DLQ_GROUP_TOPIC_PREFIX,
    RETRY_GROUP_TOPIC_PREFIX,
    TopicConfigManager,
    check_topic_name,
    dlq_topic,
)
from ferrymq.message import (
    PROPERTY_SEPARATOR,
    MessageConst,
    MessageInner,
    MessageSysFlag,
    decode_properties,
    encode_properties,
    tags_string_to_tags_code,
)
from ferrymq.mixall import DEFAULT_MAX_RECONSUME_TIMES
from ferrymq.remoting.bodies import PERM_INHERIT, PERM_READ, PERM_WRITE, TopicConfig
from ferrymq.remoting.channel import Channel
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RESPONSE_FLAG, RemotingCommand
from ferrymq.remoting.headers import SendMessageRequestHeader
from ferrymq.remoting.processor import run_eagerly
from ferrymq.remoting.server import RemotingServer
from ferrymq.store.results import PutMessageResult, PutMessageStatus

log = logging.getLogger(__name__)

_PUT_OK = PutMessageStatus.PUT_OK
_SUCCESS = int(ResponseCode.SUCCESS)
# topic names already found legal and not reserved (bounded: names come from clients)
_NAME_CACHE_MAX = 8192

# store status -> (response code, remark when not OK); FLUSH_*/SLAVE_* still carry the msgId
_PUT_STATUS: dict[PutMessageStatus, tuple[ResponseCode, str | None]] = {
    PutMessageStatus.PUT_OK: (ResponseCode.SUCCESS, None),
    PutMessageStatus.FLUSH_DISK_TIMEOUT: (ResponseCode.FLUSH_DISK_TIMEOUT, "flush disk timeout"),
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT: (ResponseCode.FLUSH_SLAVE_TIMEOUT, "flush slave timeout"),
    PutMessageStatus.SLAVE_NOT_AVAILABLE: (ResponseCode.SLAVE_NOT_AVAILABLE, "slave not available"),
    PutMessageStatus.SERVICE_NOT_AVAILABLE: (
        ResponseCode.SERVICE_NOT_AVAILABLE,
        "service not available now: the store refuses writes (slave, shutting down or disk full)",
    ),
    PutMessageStatus.CREATE_MAPPED_FILE_FAILED: (
        ResponseCode.SYSTEM_ERROR,
        "create mapped file failed: disk full or no permission",
    ),
    PutMessageStatus.MESSAGE_ILLEGAL: (ResponseCode.MESSAGE_ILLEGAL, "the message is illegal"),
    PutMessageStatus.PROPERTIES_SIZE_EXCEEDED: (
        ResponseCode.MESSAGE_ILLEGAL,
        "the message properties exceed 32767 bytes",
    ),
    PutMessageStatus.OS_PAGECACHE_BUSY: (ResponseCode.SYSTEM_BUSY, "[PC_SYNCHRONIZED] broker busy"),
    PutMessageStatus.UNKNOWN_ERROR: (ResponseCode.SYSTEM_ERROR, "unknown store error"),
    PutMessageStatus.WHEEL_TIMER_MSG_ILLEGAL: (ResponseCode.MESSAGE_ILLEGAL, None),
    PutMessageStatus.WHEEL_TIMER_NOT_ENABLE: (ResponseCode.SYSTEM_ERROR, None),
}


def send_response_code(result: PutMessageResult) -> tuple[ResponseCode, str | None]:
    """Pure: a put result -> (response code, remark)."""
    if result.status is _PUT_OK:
        return ResponseCode.SUCCESS, None
    code, remark = _PUT_STATUS.get(result.status, (ResponseCode.SYSTEM_ERROR, "unknown error"))
    if result.remark and code != ResponseCode.SUCCESS:
        remark = f"{remark}: {result.remark}" if remark else result.remark
    return code, remark


@dataclass(slots=True)
class SendStats:
    """Counters the metrics endpoint and GET_BROKER_RUNTIME_INFO read."""

    put_messages: int = 0
    put_bytes: int = 0
    put_failures: int = 0
    # successful send requests; and per topic [messages, stored bytes, requests]: upstream's
    # TOPIC_PUT_NUMS / TOPIC_PUT_SIZE stats items, whose avgpt is value per request
    put_requests: int = 0
    topics: dict[str, list[int]] = field(default_factory=dict)


def split_addr(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    try:
        return (host or "0.0.0.0", int(port))
    except ValueError:
        return ("0.0.0.0", 0)


class SendMessageProcessor:
    def __init__(
        self,
        config: BrokerConfig,
        store: MessagePuts,
        topics: TopicConfigManager,
        groups: SubscriptionGroupManager,
        *,
        max_message_size: int,
        on_topic_created: Callable[[str], None] = lambda topic: None,
        is_slave: Callable[[], bool] = lambda: False,
    ) -> None:
        self.config = config
        self.store = store
        self.topics = topics
        self.groups = groups
        self.max_message_size = max_message_size
        self.on_topic_created = on_topic_created
        self.is_slave = is_slave
        self.stats = SendStats()
        self._legal_names: set[str] = set()
        self.broker_added = broker_added_properties(config)
        self._added_text = encode_properties(self.broker_added)
        self._response_added = send_response_fields(config)

    def register_to(self, server: RemotingServer) -> None:
        for code in (
            RequestCode.SEND_MESSAGE,
            RequestCode.SEND_MESSAGE_V2,
            RequestCode.SEND_BATCH_MESSAGE,
        ):
            server.register(code, self.handle)

    async def process(self, channel: Channel, request: RemotingCommand) -> RemotingCommand | None:
        """The response to a send request (``handle`` run to completion)."""
        response = self.handle(channel, request)
        if isinstance(response, RemotingCommand):
            return response
        return await response

    def handle(
        self, channel: Channel, request: RemotingCommand
    ) -> RemotingCommand | Awaitable[RemotingCommand]:
        """The request handler: the response itself when the store needs no durability wait
        (ASYNC_FLUSH, the common case: no coroutine is made), else an awaitable of it whose
        first step (the append) has already run, as ``eager`` handlers do."""
        try:
            return self._handle(channel, request)
        except BAD_INPUT as exc:
            return bad_input(channel, request, exc)

    def _handle(
        self, channel: Channel, request: RemotingCommand
    ) -> RemotingCommand | Awaitable[RemotingCommand]:
        header = SendMessageRequestHeader.from_ext(request.ext_fields)
        batch = request.code == RequestCode.SEND_BATCH_MESSAGE or header.batch
        config = self.check(request, header, channel.remote_addr)
        if isinstance(config, RemotingCommand):
            return config
        body = request.body_bytes()
        if len(body) > self.max_message_size:
            # upstream's store answers MESSAGE_ILLEGAL with this remark (SendMessageProcessor)
            return request.response(
                ResponseCode.MESSAGE_ILLEGAL,
                "the message is illegal, maybe msg body or properties length not matched. msg "
                f"body length limit {self.max_message_size}B, msg properties length limit 32KB.",
            )
        queue_id = header.queue_id
        if queue_id < 0:
            queue_id = random.randrange(max(1, config.write_queue_nums))

        properties_string = header.properties or ""
        properties = decode_properties(properties_string)
        if not batch:
            # a batch's items keep only their own properties, as upstream's batch encoder does
            properties_string = with_broker_properties(
                properties, properties_string, self.broker_added, self._added_text
            )
        topic = header.topic
        reconsume_times = header.reconsume_times or 0
        if topic.startswith(RETRY_GROUP_TOPIC_PREFIX) and not batch:
            dlq = self._retry_to_dlq(header, reconsume_times)
            if dlq is not None:
                topic, queue_id = dlq, 0
        born_host = channel.attrs.get("born_host")
        if born_host is None:
            born_host = channel.attrs["born_host"] = split_addr(channel.remote_addr)
        tags = properties.get(MessageConst.PROPERTY_TAGS)
        inner = MessageInner(
            topic=topic,
            queue_id=queue_id,
            body=body,
            flag=header.flag,
            properties=properties,
            # the producer's own encoding plus the broker's (decoded above only to read it)
            properties_string=properties_string,
            tags_code=tags_string_to_tags_code(tags) if tags else 0,
            sys_flag=header.sys_flag,
            born_timestamp=header.born_timestamp or int(time.time() * 1000),
            born_host=born_host,
            reconsume_times=reconsume_times,
        )
        if batch:
            pending: Awaitable[PutMessageResult] = self.store.put_messages(inner)
        else:
            result = self.store.put_message_nowait(inner)
            if isinstance(result, PutMessageResult):
                return self._respond(request, result, topic, queue_id, len(body), properties)
            pending = result
        return run_eagerly(
            self._finish(channel, request, pending, topic, queue_id, len(body), properties)
        )

    async def _finish(
        self,
        channel: Channel,
        request: RemotingCommand,
        pending: Awaitable[PutMessageResult],
        topic: str,
        queue_id: int,
        size: int,
        properties: dict[str, str],
    ) -> RemotingCommand:
        try:
            result = await pending
        except BAD_INPUT as exc:
            return bad_input(channel, request, exc)
        return self._respond(request, result, topic, queue_id, size, properties)

    def check(
        self, request: RemotingCommand, header: SendMessageRequestHeader, channel_addr: str = ""
    ) -> RemotingCommand | TopicConfig:
        """The topic's config when the send may go on, else the refusal (``channel_addr``: the
        producer's address, which upstream's remarks name)."""
        if self.is_slave():
            return request.response(
                ResponseCode.SERVICE_NOT_AVAILABLE,
                f"the broker {self.config.broker_name} is a slave: send to its master",
            )
        if not self.config.broker_permission & PERM_WRITE:
            return request.response(
                ResponseCode.NO_PERMISSION,
                f"the broker[{self.config.broker_ip1}] sending message is forbidden",
            )
        if header.topic == header.default_topic:
            return self._reserved(request, header.topic)
        if header.topic not in self._legal_names:
            refused = self._check_name(request, header.topic)
            if refused is not None:
                return refused
        config = self.topics.get(header.topic)
        if config is None:
            config = self._auto_create(header)
        if config is None:
            return request.response(
                ResponseCode.TOPIC_NOT_EXIST,
                f"topic[{header.topic}] not exist, apply first please!",
            )
        if not config.perm & PERM_WRITE:
            return request.response(
                ResponseCode.NO_PERMISSION,
                f"the topic[{header.topic}] sending message is forbidden",
            )
        valid = max(config.write_queue_nums, config.read_queue_nums)
        if header.queue_id >= valid:
            return request.response(
                ResponseCode.INVALID_PARAMETER,
                f"request queueId[{header.queue_id}] is illegal, {topic_config_text(config)} "
                f"Producer: {channel_addr}",
            )
        return config

    def _check_name(self, request: RemotingCommand, topic: str) -> RemotingCommand | None:
        reason = check_topic_name(topic)
        if reason is not None:
            return request.response(ResponseCode.MESSAGE_ILLEGAL, reason)
        if topic in ("TBW102", self.config.broker_cluster_name):
            return self._reserved(request, topic)
        if len(self._legal_names) >= _NAME_CACHE_MAX:
            self._legal_names.clear()
        self._legal_names.add(topic)
        return None

    @staticmethod
    def _reserved(request: RemotingCommand, topic: str) -> RemotingCommand:
        return request.response(
            ResponseCode.MESSAGE_ILLEGAL,
            f"the topic[{topic}] is conflict with system reserved words",
        )

    def _auto_create(self, header: SendMessageRequestHeader) -> TopicConfig | None:
        topic = header.topic
        if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            group = self.groups.find(topic[len(RETRY_GROUP_TOPIC_PREFIX) :])
            if group is None:
                return None
            config = self.topics.create_in_send_back(
                topic, max(1, group.retry_queue_nums), PERM_READ | PERM_WRITE
            )
        elif topic.startswith(DLQ_GROUP_TOPIC_PREFIX):
            config = self.topics.create_in_send_back(topic, 1, PERM_READ | PERM_WRITE)
        else:
            created = self.topics.create_in_send(
                topic, header.default_topic, header.default_topic_queue_nums
            )
            if created is None:
                return None
            config = created
        if config is not None:
            log.info("topic %s auto-created: %s", topic, config)
            self.on_topic_created(topic)
        return config

    def _retry_to_dlq(self, header: SendMessageRequestHeader, reconsume_times: int) -> str | None:
        """A retry message past its max reconsume times goes to the group's DLQ topic."""
        group_name = header.topic[len(RETRY_GROUP_TOPIC_PREFIX) :]
        group = self.groups.find(group_name)
        max_times = header.max_reconsume_times
        if max_times is None:
            max_times = group.retry_max_times if group else DEFAULT_MAX_RECONSUME_TIMES
        if reconsume_times < max_times:
            return None
        topic = dlq_topic(group_name)
        if self.topics.get(topic) is None:
            self.topics.create_in_send_back(topic, 1, PERM_READ | PERM_WRITE)
            self.on_topic_created(topic)
        return topic

    def _respond(
        self,
        request: RemotingCommand,
        result: PutMessageResult,
        topic: str,
        queue_id: int,
        size: int,
        properties: dict[str, str],
    ) -> RemotingCommand:
        code, remark = send_response_code(result)
        append = result.append_result
        if not result.is_ok or append is None:
            self.stats.put_failures += 1
            return request.response(code, remark or "put failed", self._response_added)
        stats = self.stats
        stats.put_messages += append.msg_num
        stats.put_bytes += size
        stats.put_requests += 1
        per_topic = stats.topics.get(topic)
        if per_topic is None:
            stats.topics[topic] = [append.msg_num, append.wrote_bytes, 1]
        else:
            per_topic[0] += append.msg_num
            per_topic[1] += append.wrote_bytes
            per_topic[2] += 1
        offsets = append.record_offsets
        msg_id = f"{append.msg_id_prefix}{offsets[0]:016X}" if len(offsets) == 1 else append.msg_id
        fields = {
            "msgId": msg_id,
            "queueId": str(queue_id),
            "queueOffset": str(append.queue_offset),
            **self._response_added,
        }
        # upstream answers the message's unique id as its transactionId (a batch has none)
        uniq = properties.get(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
        if uniq is not None:
            fields["transactionId"] = uniq
        if result.recall_handle is not None:
            fields["recallHandle"] = result.recall_handle
        # the SendMessageResponseHeader fields, all strings: built directly (every send pays)
        return RemotingCommand(
            int(code) if code is not ResponseCode.SUCCESS else _SUCCESS,
            fields,
            None,
            request.opaque,
            RESPONSE_FLAG,
            remark,
            serialize_type=request.serialize_type,
        )


def topic_config_text(config: TopicConfig) -> str:
    """Upstream TopicConfig.toString(), which its remarks quote."""
    perm = "".join(
        flag if config.perm & bit else "-"
        for flag, bit in (("R", PERM_READ), ("W", PERM_WRITE), ("X", PERM_INHERIT))
    )
    attributes = ", ".join(f"{k}={v}" for k, v in config.attributes.items())
    return (
        f"TopicConfig [topicName={config.topic_name}, readQueueNums={config.read_queue_nums}, "
        f"writeQueueNums={config.write_queue_nums}, perm={perm}, "
        f"topicFilterType={config.topic_filter_type.name}, topicSysFlag={config.topic_sys_flag}, "
        f"order={'true' if config.order else 'false'}, attributes={{{attributes}}}]"
    )


def broker_added_properties(config: BrokerConfig) -> dict[str, str]:
    """The properties upstream's broker writes into every message it stores from a producer:
    MSG_REGION and TRACE_ON (AbstractSendMessageProcessor), CLUSTER (SendMessageProcessor)."""
    return {
        MessageConst.PROPERTY_MSG_REGION: config.region_id,
        MessageConst.PROPERTY_TRACE_SWITCH: "true" if config.trace_on else "false",
        MessageConst.PROPERTY_CLUSTER: config.broker_cluster_name,
    }


def send_response_fields(config: BrokerConfig) -> dict[str, str]:
    """What upstream's SendMessageProcessor.preSend adds to every send response: MSG_REGION and
    TRACE_ON. The Go client takes its SendResult.RegionID and TraceOn from these alone (absent
    TRACE_ON reads as off); found by tests/interop/test_go_scenarios.py."""
    added = broker_added_properties(config)
    return {
        key: added[key]
        for key in (MessageConst.PROPERTY_MSG_REGION, MessageConst.PROPERTY_TRACE_SWITCH)
    }


def with_broker_properties(
    properties: dict[str, str], text: str, added: dict[str, str], added_text: str
) -> str:
    """``properties`` (decoded from ``text``) updated in place with ``added``; the encoding to
    store. The common case (none of them set by the producer) appends to the producer's own
    encoding; otherwise the broker's values replace the producer's, as upstream's put does."""
    if any(key in properties for key in added):
        properties.update(added)
        return encode_properties(properties)
    properties.update(added)
    if text and not text.endswith(PROPERTY_SEPARATOR):
        text += PROPERTY_SEPARATOR  # 5.x clients leave the last separator out
    return text + added_text


def is_compressed(sys_flag: int) -> bool:
    return bool(sys_flag & MessageSysFlag.COMPRESSED_FLAG)


__all__ = [
    "MessageConst",
    "SendMessageProcessor",
    "broker_added_properties",
    "send_response_code",
    "send_response_fields",
    "with_broker_properties",
]
