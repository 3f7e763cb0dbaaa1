"""Typed request/response headers (the ``extFields`` of a command), one class per upstream header.

Mirrors upstream ``CommandCustomHeader`` classes (``remoting/protocol/header/``). Attribute names are
snake_case; the wire names are upstream's camelCase (``consumer_group`` <-> ``consumerGroup``), except
where upstream spells otherwise (``clientID``), declared with ``wire(...)``.

Lenient in: every value arrives as a string (the command decoder stringifies numbers and booleans);
ints accept ``"12"``, booleans accept ``true/false/1/0`` in any case, empty strings count as missing
(some clients add empty ``AccessKey``/``Signature`` fields; unknown fields are ignored). A missing
required field or a malformed number raises :class:`HeaderError` naming the field, which a processor
turns into a response with a remark. Strict out: ``to_ext()`` yields only strings, skipping ``None``.

SEND_MESSAGE_V2 (310) and SEND_BATCH_MESSAGE (320) use one-letter names ``a``..``m``;
:meth:`SendMessageRequestHeader.from_ext` accepts both forms, ``to_ext_v2`` writes the short one.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self, TypeVar


class HeaderError(ValueError):
    """A request header that cannot be read; the message names the field and the reason."""


def wire(name: str, default: Any = dataclasses.MISSING) -> Any:
    """A dataclass field whose wire name differs from the camelCase of its attribute name."""
    if default is dataclasses.MISSING:
        return field(metadata={"wire": name})
    return field(default=default, metadata={"wire": name})


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


_TRUE = frozenset({"true", "1", "yes"})
_FALSE = frozenset({"false", "0", "no"})
_TRUE_ONLY = {"true": True}  # the one spelling the fast paths take; others go the lenient way


def _parse_bool(raw: str, wire_name: str) -> bool:
    low = raw.strip().lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise HeaderError(f"header field '{wire_name}' is not a boolean: {raw!r}")


def _parse_int(raw: str, wire_name: str) -> int:
    try:
        return int(raw.strip())
    except ValueError:
        pass
    try:
        # some clients write longs as "12.0"
        as_float = float(raw)
    except ValueError:
        raise HeaderError(f"header field '{wire_name}' is not an integer: {raw!r}") from None
    if not as_float.is_integer():
        raise HeaderError(f"header field '{wire_name}' is not an integer: {raw!r}")
    return int(as_float)


def _format(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@dataclass(frozen=True, slots=True)
class _Spec:
    attr: str
    wire: str
    kind: type  # int, bool or str
    required: bool
    label: str = ""  # how errors name the field (defaults to the wire name)


_H = TypeVar("_H", bound="Header")


class Header:
    """Base of every header: ``from_ext`` (lenient) and ``to_ext`` (strings only)."""

    __slots__ = ()
    _specs_cache: ClassVar[tuple[_Spec, ...] | None] = None

    @classmethod
    def _field_specs(cls) -> tuple[_Spec, ...]:
        specs = cls.__dict__.get("_specs_cache")
        if specs is not None:
            return typing.cast(tuple[_Spec, ...], specs)
        # per class (not inherited): each header subclass caches its own field table
        hints = typing.get_type_hints(cls)
        out: list[_Spec] = []
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            hint = hints[f.name]
            args = typing.get_args(hint)
            optional = type(None) in args
            base = next((a for a in args if a is not type(None)), hint) if args else hint
            if base not in (int, bool, str):
                raise TypeError(f"{cls.__name__}.{f.name}: unsupported header type {hint}")
            has_default = (
                f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
            )
            out.append(
                _Spec(
                    attr=f.name,
                    wire=f.metadata.get("wire", _camel(f.name)),
                    kind=base,
                    required=not (optional or has_default),
                )
            )
        result = tuple(out)
        cls._specs_cache = result
        return result

    @classmethod
    def from_ext(cls, ext: Mapping[str, str] | None) -> Self:
        return cls._from_specs(cls._field_specs(), ext or {})

    @classmethod
    def _from_specs(cls, specs: tuple[_Spec, ...], ext: Mapping[str, str]) -> Self:
        # hot path (every send and pull): plain loop, int() first, slow parsers only on odd input
        kwargs: dict[str, Any] = {}
        for spec in specs:
            raw = ext.get(spec.wire)
            if raw is None or raw == "":
                if spec.required:
                    raise HeaderError(f"missing header field '{spec.label or spec.wire}'")
                continue
            kind = spec.kind
            if kind is str:
                kwargs[spec.attr] = raw if type(raw) is str else _format(raw)
            elif kind is int:
                try:
                    kwargs[spec.attr] = int(raw)
                except (TypeError, ValueError):
                    kwargs[spec.attr] = _parse_int(_format(raw), spec.label or spec.wire)
            else:
                kwargs[spec.attr] = _parse_bool(_format(raw), spec.label or spec.wire)
        return cls(**kwargs)

    def to_ext(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for spec in self._field_specs():
            value = getattr(self, spec.attr)
            if value is not None:
                out[spec.wire] = _format(value)
        return out


# --------------------------------------------------------------------------------------------
# NameServer


@dataclass(slots=True)
class GetRouteInfoRequestHeader(Header):
    topic: str


@dataclass(slots=True)
class RegisterBrokerRequestHeader(Header):
    broker_name: str
    broker_addr: str
    cluster_name: str
    broker_id: int
    ha_server_addr: str | None = None
    compressed: bool = False
    body_crc32: int = 0
    # ferrymq: the broker's brokerRole, so a NameServer can refuse a SLAVE claiming brokerId 0
    # (upstream NameServers ignore the extra field; upstream brokers do not send it)
    broker_role: str | None = None


@dataclass(slots=True)
class RegisterBrokerResponseHeader(Header):
    ha_server_addr: str | None = None
    master_addr: str | None = None


@dataclass(slots=True)
class UnRegisterBrokerRequestHeader(Header):
    broker_name: str
    broker_addr: str
    cluster_name: str
    broker_id: int


@dataclass(slots=True)
class WipeWritePermOfBrokerRequestHeader(Header):
    broker_name: str


@dataclass(slots=True)
class WipeWritePermOfBrokerResponseHeader(Header):
    wipe_topic_count: int


@dataclass(slots=True)
class AddWritePermOfBrokerRequestHeader(Header):
    broker_name: str


@dataclass(slots=True)
class AddWritePermOfBrokerResponseHeader(Header):
    add_topic_count: int


@dataclass(slots=True)
class DeleteTopicFromNamesrvRequestHeader(Header):
    topic: str
    cluster_name: str | None = None


@dataclass(slots=True)
class GetKVConfigRequestHeader(Header):
    namespace: str
    key: str


@dataclass(slots=True)
class GetKVConfigResponseHeader(Header):
    value: str | None = None


@dataclass(slots=True)
class PutKVConfigRequestHeader(Header):
    namespace: str
    key: str
    value: str


@dataclass(slots=True)
class GetKVListByNamespaceRequestHeader(Header):
    namespace: str


@dataclass(slots=True)
class GetTopicsByClusterRequestHeader(Header):
    cluster: str


# --------------------------------------------------------------------------------------------
# Send

# SEND_MESSAGE_V2 short name -> long name (upstream SendMessageRequestHeaderV2)
V2_NAMES: dict[str, str] = {
    "a": "producerGroup",
    "b": "topic",
    "c": "defaultTopic",
    "d": "defaultTopicQueueNums",
    "e": "queueId",
    "f": "sysFlag",
    "g": "bornTimestamp",
    "h": "flag",
    "i": "properties",
    "j": "reconsumeTimes",
    "k": "unitMode",
    "l": "maxReconsumeTimes",
    "m": "batch",
}
_V2_LONG_TO_SHORT = {v: k for k, v in V2_NAMES.items()}


@dataclass(slots=True)
class SendMessageRequestHeader(Header):
    producer_group: str
    topic: str
    default_topic: str = "TBW102"
    default_topic_queue_nums: int = 4
    queue_id: int = -1
    sys_flag: int = 0
    born_timestamp: int = 0
    flag: int = 0
    properties: str | None = None
    reconsume_times: int | None = None
    unit_mode: bool = False
    batch: bool = False
    max_reconsume_times: int | None = None
    _v2_specs_cache: ClassVar[tuple[_Spec, ...] | None] = None

    @classmethod
    def from_ext(cls, ext: Mapping[str, str] | None) -> Self:
        """Accepts the long names (SEND_MESSAGE) and the short ones (SEND_MESSAGE_V2, batch)."""
        ext = ext or {}
        if "b" in ext and "topic" not in ext:
            fast = cls._from_v2_plain(ext)
            if fast is not None:
                return fast
            return cls._from_specs(cls._v2_specs(), ext)
        return cls._from_specs(cls._field_specs(), ext)

    @classmethod
    def _from_v2_plain(cls, ext: Mapping[str, str]) -> Self | None:
        """The V2 header of every send, field by field; None when some value needs the lenient
        generic parser (odd spellings) or is bad (the generic parser names the field)."""
        get = ext.get
        group = get("a")
        topic = get("b")
        default_topic = get("c") or "TBW102"
        properties = get("i") or None
        if (
            type(group) is not str
            or type(topic) is not str
            or not group
            or not topic
            or type(default_topic) is not str
            or (properties is not None and type(properties) is not str)
        ):
            return None
        unit_mode = get("k")
        batch = get("m")
        try:
            return cls(
                group,
                topic,
                default_topic,
                int(get("d") or 4),
                int(get("e") or -1),
                int(get("f") or 0),
                int(get("g") or 0),
                int(get("h") or 0),
                properties,
                int(raw) if (raw := get("j")) else None,
                False if not unit_mode or unit_mode == "false" else _TRUE_ONLY[unit_mode],
                False if not batch or batch == "false" else _TRUE_ONLY[batch],
                int(raw) if (raw := get("l")) else None,
            )
        except (KeyError, TypeError, ValueError):
            return None

    @classmethod
    def _v2_specs(cls) -> tuple[_Spec, ...]:
        specs = cls.__dict__.get("_v2_specs_cache")
        if specs is None:
            specs = tuple(
                dataclasses.replace(
                    spec,
                    wire=_V2_LONG_TO_SHORT.get(spec.wire, spec.wire),
                    label=f"{_V2_LONG_TO_SHORT.get(spec.wire, spec.wire)} ({spec.wire})",
                )
                for spec in cls._field_specs()
            )
            cls._v2_specs_cache = specs
        return typing.cast(tuple[_Spec, ...], specs)

    def to_ext_v2(self) -> dict[str, str]:
        return {_V2_LONG_TO_SHORT.get(k, k): v for k, v in self.to_ext().items()}


@dataclass(slots=True)
class SendMessageResponseHeader(Header):
    msg_id: str
    queue_id: int
    queue_offset: int
    transaction_id: str | None = None
    batch_uniq_id: str | None = None


@dataclass(slots=True)
class ConsumerSendMsgBackRequestHeader(Header):
    offset: int
    group: str
    delay_level: int
    origin_msg_id: str | None = None
    origin_topic: str | None = None
    unit_mode: bool = False
    max_reconsume_times: int | None = None


@dataclass(slots=True)
class EndTransactionRequestHeader(Header):
    producer_group: str
    tran_state_table_offset: int
    commit_log_offset: int
    commit_or_rollback: int
    msg_id: str
    from_transaction_check: bool = False
    transaction_id: str | None = None


@dataclass(slots=True)
class ReplyMessageRequestHeader(Header):
    """PUSH_REPLY_MESSAGE_TO_CLIENT's header (upstream ReplyMessageRequestHeader)."""

    producer_group: str
    topic: str
    default_topic: str
    default_topic_queue_nums: int
    queue_id: int
    sys_flag: int
    born_timestamp: int
    flag: int
    born_host: str
    store_host: str
    store_timestamp: int
    properties: str | None = None
    reconsume_times: int | None = None
    unit_mode: bool = False


@dataclass(slots=True)
class CheckTransactionStateRequestHeader(Header):
    tran_state_table_offset: int
    commit_log_offset: int
    msg_id: str | None = None
    transaction_id: str | None = None
    offset_msg_id: str | None = None


# --------------------------------------------------------------------------------------------
# Pull and offsets

# PULL_MESSAGE sysFlag bits (upstream PullSysFlag)
PULL_FLAG_COMMIT_OFFSET = 0x1
PULL_FLAG_SUSPEND = 0x2
PULL_FLAG_SUBSCRIPTION = 0x4
PULL_FLAG_CLASS_FILTER = 0x8


@dataclass(slots=True)
class PullMessageRequestHeader(Header):
    consumer_group: str
    topic: str
    queue_id: int
    queue_offset: int
    max_msg_nums: int = 32
    sys_flag: int = 0
    commit_offset: int = 0
    suspend_timeout_millis: int = 0
    subscription: str | None = None
    sub_version: int = 0
    expression_type: str | None = None


@dataclass(slots=True)
class PullMessageResponseHeader(Header):
    next_begin_offset: int
    min_offset: int
    max_offset: int
    suggest_which_broker_id: int = 0


@dataclass(slots=True)
class QueryConsumerOffsetRequestHeader(Header):
    consumer_group: str
    topic: str
    queue_id: int


@dataclass(slots=True)
class QueryConsumerOffsetResponseHeader(Header):
    offset: int


@dataclass(slots=True)
class UpdateConsumerOffsetRequestHeader(Header):
    consumer_group: str
    topic: str
    queue_id: int
    commit_offset: int


@dataclass(slots=True)
class GetMaxOffsetRequestHeader(Header):
    topic: str
    queue_id: int


@dataclass(slots=True)
class GetMinOffsetRequestHeader(Header):
    topic: str
    queue_id: int


@dataclass(slots=True)
class OffsetResponseHeader(Header):
    """The reply of GET_MAX_OFFSET, GET_MIN_OFFSET and SEARCH_OFFSET_BY_TIMESTAMP."""

    offset: int


@dataclass(slots=True)
class SearchOffsetRequestHeader(Header):
    topic: str
    queue_id: int
    timestamp: int


@dataclass(slots=True)
class GetEarliestMsgStoretimeRequestHeader(Header):
    topic: str
    queue_id: int


@dataclass(slots=True)
class GetEarliestMsgStoretimeResponseHeader(Header):
    timestamp: int


@dataclass(slots=True)
class QueryMessageRequestHeader(Header):
    topic: str
    key: str
    max_num: int
    begin_timestamp: int = 0
    end_timestamp: int = 2**63 - 1


@dataclass(slots=True)
class QueryMessageResponseHeader(Header):
    index_last_update_timestamp: int
    index_last_update_phyoffset: int


@dataclass(slots=True)
class ViewMessageRequestHeader(Header):
    offset: int


# --------------------------------------------------------------------------------------------
# Clients


@dataclass(slots=True)
class GetConsumerListByGroupRequestHeader(Header):
    consumer_group: str


@dataclass(slots=True)
class UnregisterClientRequestHeader(Header):
    client_id: str = wire("clientID")
    producer_group: str | None = None
    consumer_group: str | None = None


@dataclass(slots=True)
class NotifyConsumerIdsChangedRequestHeader(Header):
    consumer_group: str


# --------------------------------------------------------------------------------------------
# Admin


@dataclass(slots=True)
class CreateTopicRequestHeader(Header):
    topic: str
    default_topic: str = "TBW102"
    read_queue_nums: int = 8
    write_queue_nums: int = 8
    perm: int = 6
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False
    # upstream 5: "+key=value,-key" (ferrymq.broker.topic_attributes); None keeps the current ones
    attributes: str | None = None


@dataclass(slots=True)
class DeleteTopicRequestHeader(Header):
    topic: str


@dataclass(slots=True)
class GetConsumerConnectionListRequestHeader(Header):
    consumer_group: str


@dataclass(slots=True)
class GetProducerConnectionListRequestHeader(Header):
    producer_group: str


@dataclass(slots=True)
class GetConsumeStatsRequestHeader(Header):
    consumer_group: str
    topic: str | None = None


@dataclass(slots=True)
class GetTopicStatsInfoRequestHeader(Header):
    topic: str


@dataclass(slots=True)
class QueryTopicConsumeByWhoRequestHeader(Header):
    topic: str


@dataclass(slots=True)
class DeleteSubscriptionGroupRequestHeader(Header):
    group_name: str
    clean_offset: bool = False


@dataclass(slots=True)
class ResetOffsetRequestHeader(Header):
    """INVOKE_BROKER_TO_RESET_OFFSET / RESET_CONSUMER_CLIENT_OFFSET; 5.x adds queueId and offset
    (reset one queue, or with queueId -1 every queue, to an offset instead of a time)."""

    topic: str
    group: str
    timestamp: int
    is_force: bool = True
    queue_id: int = -1
    offset: int | None = None


def decode(cls: type[_H], ext: Mapping[str, str] | None) -> _H:
    """``cls.from_ext(ext)``, for call sites that pick the class dynamically."""
    return cls.from_ext(ext)


# --- admin and monitoring (upstream remoting/protocol/header) ------------------------------------


@dataclass(slots=True)
class GetConsumerStatusRequestHeader(Header):
    topic: str
    group: str
    client_addr: str | None = None


@dataclass(slots=True)
class QueryConsumeTimeSpanRequestHeader(Header):
    topic: str
    group: str


@dataclass(slots=True)
class ConsumeMessageDirectlyResultRequestHeader(Header):
    consumer_group: str
    client_id: str | None = None
    msg_id: str | None = None
    broker_name: str | None = None
    topic: str | None = None


@dataclass(slots=True)
class CloneGroupOffsetRequestHeader(Header):
    src_group: str
    dest_group: str
    topic: str | None = None
    offline: bool = False


@dataclass(slots=True)
class ViewBrokerStatsDataRequestHeader(Header):
    stats_name: str
    stats_key: str


@dataclass(slots=True)
class GetConsumeStatsInBrokerHeader(Header):
    is_order: bool = False


@dataclass(slots=True)
class QueryConsumeQueueRequestHeader(Header):
    topic: str
    queue_id: int
    index: int
    count: int
    consumer_group: str | None = None


@dataclass(slots=True)
class GetAllProducerInfoRequestHeader(Header):
    pass


# --- POP consumption, topic/group config, recall (5.x; upstream remoting/protocol/header) --------


@dataclass(slots=True)
class PopMessageRequestHeader(Header):
    consumer_group: str
    topic: str
    queue_id: int  # -1: every readable queue of the topic
    max_msg_nums: int
    invisible_time: int  # ms
    poll_time: int  # ms the broker may hold the request when nothing is found
    born_time: int
    init_mode: int  # ConsumeInitMode: 0 MIN, 1 MAX (first pop of a group on a queue)
    exp_type: str | None = None  # TAG | SQL92
    exp: str | None = None
    order: bool = False
    attempt_id: str | None = None


@dataclass(slots=True)
class PopMessageResponseHeader(Header):
    pop_time: int
    invisible_time: int
    revive_qid: int
    rest_num: int
    start_offset_info: str | None = None
    msg_offset_info: str | None = None
    order_count_info: str | None = None


@dataclass(slots=True)
class AckMessageRequestHeader(Header):
    consumer_group: str
    topic: str
    queue_id: int
    extra_info: str
    offset: int


@dataclass(slots=True)
class ChangeInvisibleTimeRequestHeader(Header):
    consumer_group: str
    topic: str
    queue_id: int
    extra_info: str
    offset: int
    invisible_time: int


@dataclass(slots=True)
class ChangeInvisibleTimeResponseHeader(Header):
    pop_time: int
    invisible_time: int
    revive_qid: int


@dataclass(slots=True)
class GetTopicConfigRequestHeader(Header):
    topic: str


@dataclass(slots=True)
class GetSubscriptionGroupConfigRequestHeader(Header):
    group: str


@dataclass(slots=True)
class RecallMessageRequestHeader(Header):
    topic: str
    recall_handle: str
    producer_group: str | None = None


@dataclass(slots=True)
class RecallMessageResponseHeader(Header):
    msg_id: str
