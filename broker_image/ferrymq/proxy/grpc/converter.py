"""v2 messages <-> broker messages (upstream ``SendMessageActivity.buildMessageProperty`` and
``GrpcConverter.buildMessage``). Pure apart from the clock used for the delay check."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

from google.protobuf import timestamp_pb2

from ferrymq.message import MessageConst, MessageExt, MessageSysFlag
from ferrymq.proxy.config import ProxyConfig
from ferrymq.proxy.errors import Code, ProxyError
from ferrymq.proxy.message_type import (
    PROPERTY_TIMER_DELAY_SEC,
    PROPERTY_TIMER_DELIVER_MS,
    TopicMessageType,
    of_properties,
)
from ferrymq.proxy.v2 import definition_pb2 as pb

PROPERTY_TRACE_CONTEXT = "TRACE_CONTEXT"
PROPERTY_BORN_HOST = "__BORNHOST"
PROPERTY_BORN_TIMESTAMP = "BORN_TIMESTAMP"
PROPERTY_DLQ_ORIGIN_TOPIC = "DLQ_ORIGIN_TOPIC"
PROPERTY_DLQ_ORIGIN_MESSAGE_ID = "DLQ_ORIGIN_MESSAGE_ID"
PROPERTY_POP_CK = "POP_CK"

# upstream MessageConst.STRING_HASH_SET of 5.4.0 (printed from its jar): keys a user property
# may not use, and the properties a received message does not show as user properties
# (__SHARDINGKEY, TRACE_CONTEXT and others are not among them: upstream shows them)
SYSTEM_PROPERTY_KEYS = frozenset(
    [
        "1ST_POP_TIME",
        "ARRIVE_TIME",
        "BORN_TIMESTAMP",
        "BUYER_ID",
        "CLUSTER",
        "CONSUME_START_TIME",
        "CORRECTION_FLAG",
        "CORRELATION_ID",
        "DELAY",
        "DLQ_ORIGIN_MESSAGE_ID",
        "DLQ_ORIGIN_TOPIC",
        "DUP_INFO",
        "EXTEND_UNIQ_INFO",
        "INNER_MULTI_QUEUE_OFFSET",
        "INSTANCE_ID",
        "KEYS",
        "MAX_OFFSET",
        "MAX_RECONSUME_TIMES",
        "MIN_OFFSET",
        "MQ2_FLAG",
        "MSG_REGION",
        "MSG_TYPE",
        "ORIGIN_GROUP",
        "ORIGIN_MESSAGE_ID",
        "PGROUP",
        "POP_CK",
        "POP_CK_OFFSET",
        "PUSH_REPLY_TIME",
        "REAL_QID",
        "REAL_TOPIC",
        "RECONSUME_TIME",
        "REPLY_TO_CLIENT",
        "RETRY_TOPIC",
        "TAGS",
        "TIMER_DELAY_LEVEL",
        "TIMER_DELAY_MS",
        "TIMER_DELAY_SEC",
        "TIMER_DELIVER_MS",
        "TIMER_DEL_UNIQKEY",
        "TIMER_DEQUEUE_MS",
        "TIMER_ENQUEUE_MS",
        "TIMER_OUT_MS",
        "TIMER_ROLL_TIMES",
        "TRACE_ON",
        "TRANSFER_FLAG",
        "TRAN_MSG",
        "TRAN_PREPARED_QUEUE_OFFSET",
        "TTL",
        "UNIQ_KEY",
        "WAIT",
        "_SYS_MSG_PRIORITY_",
        "__BORNHOST",
        "__CRC32#",
    ]
)

_MESSAGE_TYPE = {
    TopicMessageType.NORMAL: pb.NORMAL,
    TopicMessageType.FIFO: pb.FIFO,
    TopicMessageType.DELAY: pb.DELAY,
    TopicMessageType.TRANSACTION: pb.TRANSACTION,
}


def message_type_pb(t: TopicMessageType) -> pb.MessageType.ValueType:
    return _MESSAGE_TYPE.get(t, pb.MESSAGE_TYPE_UNSPECIFIED)


def _has_control(text: str) -> bool:
    return any(ord(c) < 0x20 or ord(c) == 0x7F for c in text)


def _millis(ts: timestamp_pb2.Timestamp) -> int:
    return ts.seconds * 1000 + ts.nanos // 1_000_000


def _timestamp(ms: int) -> timestamp_pb2.Timestamp:
    return timestamp_pb2.Timestamp(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def validate_tag(tag: str) -> None:
    if tag and (not tag.strip() or _has_control(tag) or "|" in tag):
        raise ProxyError(Code.ILLEGAL_MESSAGE_TAG, f"tag {tag!r} is not allowed")


def sys_flag_of(message: pb.Message) -> int:
    flag = 0
    if message.system_properties.body_encoding == pb.GZIP:
        flag |= MessageSysFlag.COMPRESSED_FLAG
    if message.system_properties.message_type == pb.TRANSACTION:
        flag |= MessageSysFlag.TRANSACTION_PREPARED_TYPE
    return flag


def build_properties(
    message: pb.Message, producer_group: str, config: ProxyConfig, remote: str, now_ms: int
) -> dict[str, str]:
    """The broker properties of a v2 message; raises ProxyError as upstream's checks do."""
    sp = message.system_properties
    body = message.body
    if config.enable_message_body_empty_check and not body:
        raise ProxyError(Code.MESSAGE_BODY_EMPTY, "message body cannot be empty")
    if len(body) > config.max_message_size:
        raise ProxyError(
            Code.MESSAGE_BODY_TOO_LARGE,
            f"message body cannot exceed the max {config.max_message_size}",
        )
    user = dict(message.user_properties)
    if len(user) > config.user_property_max_num:
        raise ProxyError(
            Code.MESSAGE_PROPERTIES_TOO_LARGE,
            f"too many user properties, max is {config.user_property_max_num}",
        )
    size = 0
    for key, value in user.items():
        if key in SYSTEM_PROPERTY_KEYS:
            raise ProxyError(
                Code.ILLEGAL_MESSAGE_PROPERTY_KEY, f"property is used by system: {key}"
            )
        if _has_control(key):
            raise ProxyError(
                Code.ILLEGAL_MESSAGE_PROPERTY_KEY,
                "the key of property cannot contain control character",
            )
        if _has_control(value):
            raise ProxyError(
                Code.ILLEGAL_MESSAGE_PROPERTY_KEY,
                "the value of property cannot contain control character",
            )
        size += len(key.encode()) + len(value.encode())
    props = dict(user)
    tag = sp.tag if sp.HasField("tag") else ""
    validate_tag(tag)
    if tag:
        props[MessageConst.PROPERTY_TAGS] = tag
    size += len(tag.encode())
    for key in sp.keys:
        if key and (not key.strip()):
            raise ProxyError(
                Code.ILLEGAL_MESSAGE_KEY, "key cannot be the char sequence of whitespace"
            )
        if _has_control(key):
            raise ProxyError(Code.ILLEGAL_MESSAGE_KEY, "key cannot contain control character")
        size += len(key.encode())
    if sp.keys:
        props[MessageConst.PROPERTY_KEYS] = MessageConst.KEY_SEPARATOR.join(sp.keys)
    if size > config.max_user_property_size:
        raise ProxyError(
            Code.MESSAGE_PROPERTIES_TOO_LARGE,
            f"the total size of user property is too large, max is {config.max_user_property_size}",
        )
    if not sp.message_id.strip():
        raise ProxyError(Code.ILLEGAL_MESSAGE_ID, "message id cannot be empty")
    props[MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = sp.message_id
    if sp.message_type == pb.TRANSACTION:
        props[MessageConst.PROPERTY_TRANSACTION_PREPARED] = "true"
        if sp.HasField("orphaned_transaction_recovery_duration"):
            seconds = sp.orphaned_transaction_recovery_duration.seconds
            if seconds > config.max_transaction_recovery_second:
                raise ProxyError(
                    Code.BAD_REQUEST,
                    "the max transaction recovery time of message is too large, max is "
                    f"{config.max_transaction_recovery_second}",
                )
            props[MessageConst.PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS] = str(seconds)
    if sp.HasField("delivery_timestamp"):
        deliver_ms = _millis(sp.delivery_timestamp)
        if deliver_ms - now_ms > config.max_delay_time_mills:
            raise ProxyError(
                Code.ILLEGAL_DELIVERY_TIME,
                f"the max delay time of message is too large, max is {config.max_delay_time_mills}",
            )
        props[PROPERTY_TIMER_DELIVER_MS] = str(deliver_ms)
    props[MessageConst.PROPERTY_RECONSUME_TIME] = str(sp.delivery_attempt)
    props[MessageConst.PROPERTY_PRODUCER_GROUP] = producer_group
    group = sp.message_group if sp.HasField("message_group") else ""
    if group:
        if not group.strip():
            raise ProxyError(
                Code.ILLEGAL_MESSAGE_GROUP,
                "message group cannot be the char sequence of whitespace",
            )
        if len(group.encode()) >= config.max_message_group_size:
            raise ProxyError(
                Code.ILLEGAL_MESSAGE_GROUP,
                f"message group exceed the max size {config.max_message_group_size}",
            )
        if _has_control(group):
            raise ProxyError(
                Code.ILLEGAL_MESSAGE_GROUP, "message group cannot contain control character"
            )
        props[MessageConst.PROPERTY_SHARDING_KEY] = group
    if sp.HasField("trace_context") and sp.trace_context:
        props[PROPERTY_TRACE_CONTEXT] = sp.trace_context
    born_host = sp.born_host.strip() or remote
    if born_host:
        props[PROPERTY_BORN_HOST] = born_host
    if sp.HasField("born_timestamp"):
        props[PROPERTY_BORN_TIMESTAMP] = str(_millis(sp.born_timestamp))
    return props


def user_properties(properties: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in properties.items() if k not in SYSTEM_PROPERTY_KEYS}


def received_type(props: Mapping[str, str]) -> pb.MessageType.ValueType:
    """GrpcConverter.buildSystemProperties (TIMER_DELAY_MS does not make a DELAY message)."""
    return message_type_pb(of_properties(props, timer_delay_ms=False))


def to_v2_message(msg: MessageExt, now_ms: int) -> pb.Message:
    """A broker message as the v2 message a consumer receives (GrpcConverter.buildMessage)."""
    props = msg.properties
    sp = pb.SystemProperties(
        message_id=props.get(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX) or msg.msg_id,
        body_digest=pb.Digest(type=pb.MD5, checksum=hashlib.md5(msg.body).hexdigest().upper()),
        body_encoding=(pb.GZIP if msg.sys_flag & MessageSysFlag.COMPRESSED_FLAG else pb.IDENTITY),
        message_type=received_type(props),
        born_timestamp=_timestamp(msg.born_timestamp),
        store_timestamp=_timestamp(msg.store_timestamp),
        queue_id=msg.queue_id,
        queue_offset=msg.queue_offset,
        delivery_attempt=msg.reconsume_times + 1,
    )
    tag = props.get(MessageConst.PROPERTY_TAGS)
    if tag is not None:
        sp.tag = tag
    keys = props.get(MessageConst.PROPERTY_KEYS)
    if keys is not None:
        sp.keys.extend(keys.split(MessageConst.KEY_SEPARATOR))
    born_host = props.get(PROPERTY_BORN_HOST) or _host_text(msg.born_host)
    if born_host:
        sp.born_host = born_host
    store_host = _host_text(msg.store_host)
    if store_host:
        sp.store_host = store_host
    delay_sec = props.get(PROPERTY_TIMER_DELAY_SEC)
    deliver = props.get(PROPERTY_TIMER_DELIVER_MS)
    if delay_sec is not None and delay_sec.lstrip("-").isdigit():
        sp.delivery_timestamp.CopyFrom(_timestamp(now_ms + int(delay_sec) * 1000))
    elif deliver is not None and deliver.lstrip("-").isdigit():
        sp.delivery_timestamp.CopyFrom(_timestamp(int(deliver)))
    group = props.get(MessageConst.PROPERTY_SHARDING_KEY)
    if group is not None:
        sp.message_group = group
    handle = props.get(PROPERTY_POP_CK)
    if handle is not None:
        sp.receipt_handle = handle
    trace = props.get(PROPERTY_TRACE_CONTEXT)
    if trace is not None:
        sp.trace_context = trace
    dlq_topic = props.get(PROPERTY_DLQ_ORIGIN_TOPIC)
    dlq_id = props.get(PROPERTY_DLQ_ORIGIN_MESSAGE_ID)
    if dlq_topic is not None and dlq_id is not None:
        sp.dead_letter_queue.CopyFrom(pb.DeadLetterQueue(topic=dlq_topic, message_id=dlq_id))
    return pb.Message(
        topic=pb.Resource(name=msg.topic),
        user_properties=user_properties(props),
        system_properties=sp,
        body=msg.body,
    )


def _host_text(host: object) -> str:
    if isinstance(host, tuple) and len(host) == 2:
        return f"{host[0]}:{host[1]}"
    return str(host) if host else ""
