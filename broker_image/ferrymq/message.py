"""Messages as RocketMQ 4.x defines them, shared by broker, client and Spark jobs.

Mirrors upstream ``common/message/{Message,MessageExt,MessageConst,MessageDecoder}.java`` and
``common/sysflag/MessageSysFlag.java``:

- :class:`Message` (what a producer sends), :class:`MessageExt` (what a consumer receives, with the
  store's bookkeeping) and :class:`MessageInner` (what the broker hands to the store).
- :class:`MessageConst`: property names with the upstream spellings (``KEYS``, ``TAGS``, ...).
- the properties codec ``name\\x01value\\x02...`` (:func:`encode_properties` / :func:`decode_properties`).
- :class:`MessageSysFlag` bits and transaction-type helpers.
- msgId: upper-case hex of ``storeIPv4(4) + port(4) + commitLogOffset(8)`` (:func:`create_message_id`,
  :func:`decode_message_id`).
- the SEND_BATCH_MESSAGE body codec (:func:`encode_batch`, :func:`decode_batch`), upstream
  ``MessageDecoder.encodeMessages/decodeMessages``.
- :func:`java_string_hash`: ``String.hashCode()`` with signed 32-bit semantics; the tags code a
  ConsumeQueue entry stores is that value (:func:`tags_string_to_tags_code`).

Only the standard library is imported here: the client and the Spark executors import this module too.
"""

from __future__ import annotations

import ipaddress
import operator
import socket
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

__all__ = [
    "BATCH_ITEM_FIELDS",
    "BATCH_PROPERTIES_LEN_CODE",
    "NAME_VALUE_SEPARATOR",
    "PROPERTY_SEPARATOR",
    "Message",
    "MessageConst",
    "MessageDecodeError",
    "MessageExt",
    "MessageInner",
    "MessageSysFlag",
    "create_message_id",
    "decode_batch",
    "decode_message_id",
    "decode_properties",
    "encode_batch",
    "encode_properties",
    "java_string_hash",
    "pack_host",
    "tags_string_to_tags_code",
    "unpack_host",
]

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"


class MessageDecodeError(ValueError):
    """Bytes that do not follow an upstream message layout (batch body, msgId, record)."""


class MessageConst:
    """Property names, spelled exactly as upstream ``MessageConst`` (they travel on the wire)."""

    PROPERTY_KEYS = "KEYS"
    PROPERTY_TAGS = "TAGS"
    PROPERTY_WAIT_STORE_MSG_OK = "WAIT"
    PROPERTY_DELAY_TIME_LEVEL = "DELAY"
    PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
    PROPERTY_REAL_TOPIC = "REAL_TOPIC"
    PROPERTY_REAL_QUEUE_ID = "REAL_QID"
    PROPERTY_TRANSACTION_PREPARED = "TRAN_MSG"
    PROPERTY_PRODUCER_GROUP = "PGROUP"
    PROPERTY_MIN_OFFSET = "MIN_OFFSET"
    PROPERTY_MAX_OFFSET = "MAX_OFFSET"
    PROPERTY_BUYER_ID = "BUYER_ID"
    PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
    PROPERTY_TRANSFER_FLAG = "TRANSFER_FLAG"
    PROPERTY_CORRECTION_FLAG = "CORRECTION_FLAG"
    PROPERTY_MQ2_FLAG = "MQ2_FLAG"
    PROPERTY_RECONSUME_TIME = "RECONSUME_TIME"
    PROPERTY_MSG_REGION = "MSG_REGION"
    PROPERTY_TRACE_SWITCH = "TRACE_ON"
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX = "UNIQ_KEY"
    PROPERTY_MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
    PROPERTY_CONSUME_START_TIMESTAMP = "CONSUME_START_TIME"
    PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET = "TRAN_PREPARED_QUEUE_OFFSET"
    PROPERTY_TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
    PROPERTY_TRANSACTION_ID = "__transactionId__"
    PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS = "CHECK_IMMUNITY_TIME_IN_SECONDS"
    PROPERTY_INSTANCE_ID = "INSTANCE_ID"
    PROPERTY_CORRELATION_ID = "CORRELATION_ID"
    PROPERTY_MESSAGE_REPLY_TO_CLIENT = "REPLY_TO_CLIENT"
    PROPERTY_MESSAGE_TTL = "TTL"
    PROPERTY_REPLY_MESSAGE_ARRIVE_TIME = "ARRIVE_TIME"
    PROPERTY_PUSH_REPLY_TIME = "PUSH_REPLY_TIME"
    PROPERTY_CLUSTER = "CLUSTER"
    PROPERTY_MESSAGE_TYPE = "MSG_TYPE"
    PROPERTY_SHARDING_KEY = "__SHARDINGKEY"
    # RocketMQ 5 POP and timer messages (upstream MessageConst)
    PROPERTY_POP_CK = "POP_CK"
    PROPERTY_FIRST_POP_TIME = "1ST_POP_TIME"
    PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
    PROPERTY_TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
    PROPERTY_TIMER_DELAY_MS = "TIMER_DELAY_MS"
    PROPERTY_TIMER_OUT_MS = "TIMER_OUT_MS"
    PROPERTY_TIMER_ENQUEUE_MS = "TIMER_ENQUEUE_MS"
    PROPERTY_TIMER_DEQUEUE_MS = "TIMER_DEQUEUE_MS"
    PROPERTY_TIMER_DEL_UNIQKEY = "TIMER_DEL_UNIQKEY"

    # Several keys in KEYS are separated by one space (upstream KEY_SEPARATOR).
    KEY_SEPARATOR = " "


class MessageSysFlag:
    """``sysFlag`` bits of upstream ``MessageSysFlag`` (separate from the application ``flag``)."""

    COMPRESSED_FLAG = 0x1
    MULTI_TAGS_FLAG = 0x1 << 1
    TRANSACTION_NOT_TYPE = 0
    TRANSACTION_PREPARED_TYPE = 0x1 << 2
    TRANSACTION_COMMIT_TYPE = 0x2 << 2
    TRANSACTION_ROLLBACK_TYPE = 0x3 << 2
    BORNHOST_V6_FLAG = 0x1 << 4
    STOREHOSTADDRESS_V6_FLAG = 0x1 << 5
    NEED_UNWRAP_FLAG = 0x1 << 6
    INNER_BATCH_FLAG = 0x1 << 7

    @staticmethod
    def get_transaction_value(flag: int) -> int:
        """The transaction type bits (one of the TRANSACTION_*_TYPE values)."""
        return flag & MessageSysFlag.TRANSACTION_ROLLBACK_TYPE

    @staticmethod
    def reset_transaction_value(flag: int, transaction_type: int) -> int:
        """``flag`` with its transaction bits replaced by ``transaction_type``."""
        return (flag & ~MessageSysFlag.TRANSACTION_ROLLBACK_TYPE) | transaction_type

    @staticmethod
    def clear_compressed_flag(flag: int) -> int:
        return flag & ~MessageSysFlag.COMPRESSED_FLAG


# --- properties codec ---------------------------------------------------------------------------


def encode_properties(properties: Mapping[str, str]) -> str:
    """``name\\x01value\\x02`` for every pair, as upstream ``messageProperties2String``.

    Upstream skips null values; a ``None`` sneaking in from a loose caller is skipped the same way.
    """
    parts: list[str] = []
    for name, value in properties.items():
        if value is None:
            continue
        parts.append(f"{name}{NAME_VALUE_SEPARATOR}{value}{PROPERTY_SEPARATOR}")
    return "".join(parts)


def property_value(text: str, name: str) -> str | None:
    """``decode_properties(text).get(name)`` without building the dict (the reput reads two or
    three names of every record). A value never holds the item separator, so the last
    ``\x02name\x01`` (or a leading ``name\x01``) is the item ``decode_properties`` keeps."""
    span = property_span(text, name)
    return None if span is None else text[span[0] : span[1]]


def property_span(text: str, name: str) -> tuple[int, int] | None:
    """Where :func:`property_value` finds its value: ``text[start:end]`` is it; None when
    absent. For a run of properties texts sharing one layout the span of the first is the
    span of all (the reput's columnar path)."""
    head = name + NAME_VALUE_SEPARATOR
    if head not in text:
        return None
    marker = PROPERTY_SEPARATOR + head
    i = text.rfind(marker)
    if i >= 0:
        i += len(marker)
    elif text.startswith(head):
        i = len(head)
    else:
        return None
    j = text.find(PROPERTY_SEPARATOR, i)
    return i, (j if j >= 0 else len(text))


def decode_properties(text: str | bytes | bytearray | memoryview) -> dict[str, str]:
    """Parse ``name\\x01value\\x02...``; items without a separator or with an empty name are skipped.

    Upstream ``string2messageProperties`` is lenient the same way (a missing trailing ``\\x02`` is
    accepted), which matters because several client libraries disagree on the trailing separator.
    """
    if not isinstance(text, str):
        text = bytes(text).decode("utf-8", errors="replace")
    result: dict[str, str] = {}
    if not text:
        return result
    for item in text.split(PROPERTY_SEPARATOR):
        name, sep, value = item.partition(NAME_VALUE_SEPARATOR)
        if sep and name:
            result[name] = value
    return result


# --- hosts and msgId ------------------------------------------------------------------------------


def pack_host(host: str) -> bytes:
    """The 4 (IPv4) or 16 (IPv6) address bytes of a literal address; hostnames are resolved."""
    try:
        return ipaddress.ip_address(host).packed
    except ValueError:
        # A hostname: resolve once; the store packs its own address a single time at start-up.
        return socket.inet_aton(socket.gethostbyname(host))


def unpack_host(packed: bytes) -> str:
    """The textual address of 4 or 16 address bytes."""
    if len(packed) == 4:
        return socket.inet_ntoa(packed)  # the hot path: C, no object churn
    return str(ipaddress.ip_address(bytes(packed)))


_MSG_ID_V4 = struct.Struct(">4sIq")  # store IPv4, port (as int32), commit-log offset
_MSG_ID_V6 = struct.Struct(">16sIq")


def create_message_id(
    store_host: tuple[str, int] | tuple[bytes, int], commit_log_offset: int
) -> str:
    """The upstream offset msgId: upper-case hex of ``ip(4|16) + port(4) + offset(8)``.

    ``store_host`` is ``(address, port)``, the address either text or already-packed bytes.
    """
    addr, port = store_host
    packed = addr if isinstance(addr, bytes) else pack_host(addr)
    if len(packed) == 4:
        return _MSG_ID_V4.pack(packed, port, commit_log_offset).hex().upper()
    if len(packed) == 16:
        return _MSG_ID_V6.pack(packed, port, commit_log_offset).hex().upper()
    raise ValueError(f"store host address must be 4 or 16 bytes, got {len(packed)}")


def decode_message_id(msg_id: str) -> tuple[str, int, int]:
    """``(store ip, store port, commit-log offset)`` of an offset msgId (32 or 56 hex digits)."""
    try:
        raw = bytes.fromhex(msg_id)
    except ValueError as exc:
        raise MessageDecodeError(f"msgId {msg_id!r} is not hexadecimal") from exc
    if len(raw) == _MSG_ID_V4.size:
        ip, port, offset = _MSG_ID_V4.unpack(raw)
    elif len(raw) == _MSG_ID_V6.size:
        ip, port, offset = _MSG_ID_V6.unpack(raw)
    else:
        raise MessageDecodeError(
            f"msgId {msg_id!r} has {len(raw)} bytes; expected 16 (IPv4) or 28 (IPv6)"
        )
    return unpack_host(ip), port, offset


# --- Java hash ------------------------------------------------------------------------------------


_HASH_TABLE_LEN = 512
# 31**k mod 2**32 for k = _HASH_TABLE_LEN-1 .. 0: the tail of length n weights n characters.
_POWERS_OF_31 = tuple(pow(31, k, 1 << 32) for k in range(_HASH_TABLE_LEN - 1, -1, -1))


def java_string_hash(text: str) -> int:
    """``String.hashCode()`` of Java: ``h = 31*h + c`` over UTF-16 code units, signed int32.

    Computed as ``sum(c_i * 31**(n-1-i)) mod 2**32`` with a precomputed power table, so the
    per-character work runs in C (sum/map) rather than in a Python loop.
    """
    if text.isascii():
        units: bytes | list[int] = text.encode("ascii")
    else:
        raw = text.encode("utf-16-be")
        units = [(raw[i] << 8) | raw[i + 1] for i in range(0, len(raw), 2)]
    n = len(units)
    if n <= _HASH_TABLE_LEN:
        h: int = sum(map(operator.mul, units, _POWERS_OF_31[_HASH_TABLE_LEN - n :])) & 0xFFFFFFFF
    else:
        h = 0
        for unit in units:
            h = (31 * h + unit) & 0xFFFFFFFF
    return h - 0x100000000 if h & 0x80000000 else h


def tags_string_to_tags_code(tags: str | None) -> int:
    """The ConsumeQueue tags code of a TAGS property: its Java hash, 0 when absent or empty."""
    if not tags:
        return 0
    return java_string_hash(tags)


# --- dataclasses ----------------------------------------------------------------------------------


@dataclass(slots=True)
class Message:
    """What a producer sends: topic, body, application ``flag`` and string properties."""

    topic: str
    body: bytes = b""
    flag: int = 0
    properties: dict[str, str] = field(default_factory=dict)
    # Batch messages and transaction id live outside properties upstream too.
    transaction_id: str | None = None

    @property
    def tags(self) -> str | None:
        return self.properties.get(MessageConst.PROPERTY_TAGS)

    @tags.setter
    def tags(self, value: str | None) -> None:
        self._set_or_clear(MessageConst.PROPERTY_TAGS, value)

    @property
    def keys(self) -> list[str]:
        raw = self.properties.get(MessageConst.PROPERTY_KEYS, "")
        return [k for k in raw.split(MessageConst.KEY_SEPARATOR) if k]

    @keys.setter
    def keys(self, value: str | Iterable[str] | None) -> None:
        if value is None:
            self._set_or_clear(MessageConst.PROPERTY_KEYS, None)
        elif isinstance(value, str):
            self._set_or_clear(MessageConst.PROPERTY_KEYS, value)
        else:
            self._set_or_clear(MessageConst.PROPERTY_KEYS, MessageConst.KEY_SEPARATOR.join(value))

    @property
    def delay_time_level(self) -> int:
        raw = self.properties.get(MessageConst.PROPERTY_DELAY_TIME_LEVEL)
        try:
            return int(raw) if raw else 0
        except ValueError:
            return 0

    @delay_time_level.setter
    def delay_time_level(self, level: int) -> None:
        self._set_or_clear(MessageConst.PROPERTY_DELAY_TIME_LEVEL, str(level) if level else None)

    @property
    def wait_store_msg_ok(self) -> bool:
        # Upstream: absent means true.
        raw = self.properties.get(MessageConst.PROPERTY_WAIT_STORE_MSG_OK)
        return raw is None or raw.lower() == "true"

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)

    def _set_or_clear(self, name: str, value: str | None) -> None:
        if value is None or value == "":
            self.properties.pop(name, None)
        else:
            self.properties[name] = value


@dataclass(slots=True)
class MessageExt(Message):
    """A stored message as a consumer sees it (upstream ``MessageExt``)."""

    queue_id: int = 0
    store_size: int = 0
    queue_offset: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: tuple[str, int] = ("0.0.0.0", 0)
    store_timestamp: int = 0
    store_host: tuple[str, int] = ("0.0.0.0", 0)
    msg_id: str = ""
    commit_log_offset: int = 0
    body_crc: int = 0
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0

    @property
    def offset_msg_id(self) -> str:
        """The store-derived msgId (``store host + port + commit-log offset``)."""
        return create_message_id(self.store_host, self.commit_log_offset)


@dataclass(slots=True)
class MessageInner:
    """What the broker hands to the store (upstream ``MessageExtBrokerInner`` / ``MessageExtBatch``).

    ``properties`` and ``properties_string`` must agree; build with :meth:`create` to get both.
    For ``put_messages`` the body is a SEND_BATCH_MESSAGE body (see :func:`encode_batch`) whose items
    inherit topic, queue id, sysFlag, born time/host and reconsume times from this object.
    ``tags_code`` is recomputed by the store's dispatcher from the stored TAGS; the value here is
    informational for callers that want it before the put.
    """

    topic: str
    queue_id: int
    body: bytes
    flag: int = 0
    properties: dict[str, str] = field(default_factory=dict)
    properties_string: str = ""
    tags_code: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: tuple[str, int] = ("127.0.0.1", 0)
    store_host: tuple[str, int] | None = None
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0

    @classmethod
    def create(
        cls,
        topic: str,
        queue_id: int,
        body: bytes,
        properties: Mapping[str, str] | None = None,
        **kwargs: object,
    ) -> MessageInner:
        """Build with ``properties_string`` and ``tags_code`` derived from ``properties``."""
        props = dict(properties or {})
        inner = cls(topic=topic, queue_id=queue_id, body=body, properties=props, **kwargs)  # type: ignore[arg-type]
        inner.properties_string = encode_properties(props)
        inner.tags_code = tags_string_to_tags_code(props.get(MessageConst.PROPERTY_TAGS))
        return inner

    def set_property(self, name: str, value: str) -> None:
        """Set one property and keep the encoded string in step."""
        self.properties[name] = value
        self.properties_string = encode_properties(self.properties)

    def remove_property(self, name: str) -> None:
        if self.properties.pop(name, None) is not None:
            self.properties_string = encode_properties(self.properties)


# --- batch body codec (SEND_BATCH_MESSAGE) -----------------------------------------------------

BATCH_ITEM_FIELDS: tuple[tuple[str, str], ...] = (
    ("TOTALSIZE", "i"),  # the whole item, this field included
    ("MAGICCODE", "i"),  # 0 (a client does not set it)
    ("BODYCRC", "i"),  # 0 (the broker computes the record's)
    ("FLAG", "i"),  # the application flag
    ("BODYLEN", "i"),  # then BODY, PROPERTIESLEN (BATCH_PROPERTIES_LEN_CODE), PROPERTIES (UTF-8)
)
"""The head of one item of a SEND_BATCH_MESSAGE body (upstream ``MessageDecoder.encodeMessage``),
as (name, big-endian ``struct`` code) pairs: declared here, the only place; the store's record
layout (``ferrymq.store.record_layout.BATCH_ITEM``) is built from it."""
BATCH_PROPERTIES_LEN_CODE = "h"
"""PROPERTIESLEN of a batch item (a signed short, as upstream)."""

_BATCH_ITEM_HEAD = struct.Struct(">" + "".join(code for _, code in BATCH_ITEM_FIELDS))
_BATCH_PROPS_LEN = struct.Struct(">" + BATCH_PROPERTIES_LEN_CODE)
_MAX_PROPERTIES_LEN = (1 << (8 * _BATCH_PROPS_LEN.size - 1)) - 1  # 32767: a signed short


def encode_batch(messages: Sequence[Message]) -> bytes:
    """The body of a SEND_BATCH_MESSAGE request holding ``messages`` (topic travels in the header)."""
    out = bytearray()
    for msg in messages:
        props = encode_properties(msg.properties).encode("utf-8")
        if len(props) > _MAX_PROPERTIES_LEN:
            raise ValueError(f"properties of a batch item are {len(props)} bytes; max 32767")
        total = _BATCH_ITEM_HEAD.size + len(msg.body) + _BATCH_PROPS_LEN.size + len(props)
        out += _BATCH_ITEM_HEAD.pack(total, 0, 0, msg.flag, len(msg.body))
        out += msg.body
        out += _BATCH_PROPS_LEN.pack(len(props))
        out += props
    return bytes(out)


def decode_batch(body: bytes | bytearray | memoryview, topic: str = "") -> list[Message]:
    """Split a SEND_BATCH_MESSAGE body into messages; a malformed body raises MessageDecodeError."""
    view = memoryview(body)
    messages: list[Message] = []
    pos = 0
    end = len(view)
    while pos < end:
        if end - pos < _BATCH_ITEM_HEAD.size + _BATCH_PROPS_LEN.size:
            raise MessageDecodeError(f"batch item at byte {pos} is truncated")
        total, _magic, _crc, flag, body_len = _BATCH_ITEM_HEAD.unpack_from(view, pos)
        body_start = pos + _BATCH_ITEM_HEAD.size
        if body_len < 0 or body_start + body_len + _BATCH_PROPS_LEN.size > end:
            raise MessageDecodeError(f"batch item at byte {pos} has bad body length {body_len}")
        props_pos = body_start + body_len
        (props_len,) = _BATCH_PROPS_LEN.unpack_from(view, props_pos)
        props_start = props_pos + _BATCH_PROPS_LEN.size
        if props_len < 0 or props_start + props_len > end:
            raise MessageDecodeError(
                f"batch item at byte {pos} has bad properties length {props_len}"
            )
        if total != props_start + props_len - pos:
            raise MessageDecodeError(
                f"batch item at byte {pos} declares {total} bytes but its fields span "
                f"{props_start + props_len - pos}"
            )
        try:
            props = decode_properties(
                bytes(view[props_start : props_start + props_len]).decode("utf-8")
            )
        except UnicodeDecodeError as exc:
            raise MessageDecodeError(f"batch item at byte {pos}: properties are not UTF-8") from exc
        messages.append(
            Message(
                topic=topic, body=bytes(view[body_start:props_pos]), flag=flag, properties=props
            )
        )
        pos += total
    return messages
