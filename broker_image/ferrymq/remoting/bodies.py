"""JSON bodies of the remoting protocol with upstream field names (``remoting/protocol/body``, ``route``,
``heartbeat``). pydantic v2 models: attribute names are snake_case, wire names upstream's camelCase
(or upstream's own spelling where it differs: ``clientID``, ``lockOKMQSet``).

Lenient in (clients differ): enums arrive as names (``"CLUSTERING"``) or Java ordinals (``1``), empty
lists may be missing, unknown fields are ignored, map keys may be fastjson's bare numbers or objects.
Every model reads with ``Model.decode(raw_body)`` (raises :class:`BodyError` naming the field) and writes
with ``model.encode()``. Bodies whose maps are keyed by MessageQueue (ConsumeStats, TopicStatsTable,
ResetOffsetBody) are written the fastjson way, with the key as a bare JSON object, because upstream tools
parse exactly that (see ``fastjson.py``).
"""

from __future__ import annotations

from enum import Enum, StrEnum
from typing import Annotated, Any, Self

from pydantic import AliasChoices, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from ferrymq.remoting import fastjson
from ferrymq.remoting.fastjson import ObjectKey

Buffer = bytes | bytearray | memoryview

# topic permissions (upstream PermName)
PERM_PRIORITY = 0x8
PERM_READ = 0x4
PERM_WRITE = 0x2
PERM_INHERIT = 0x1


class BodyError(ValueError):
    """A body that cannot be read; the message names the offending field."""


def _errors_text(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        loc = ".".join(str(p) for p in err.get("loc", ())) or "<body>"
        parts.append(f"{loc}: {err.get('msg', 'invalid')}")
    return "; ".join(parts)


class Body(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="ignore",
        validate_default=False,
    )

    def to_json_obj(self) -> Any:
        """Plain JSON-ready data with wire names (enums as names, sets as lists)."""
        return self.model_dump(by_alias=True, mode="json")

    def encode(self) -> bytes:
        return fastjson.dumps(self.to_json_obj())

    @classmethod
    def from_json_obj(cls, obj: Any) -> Self:
        try:
            return cls.model_validate(obj)
        except ValidationError as exc:
            raise BodyError(f"invalid {cls.__name__} body: {_errors_text(exc)}") from None

    @classmethod
    def decode(cls, raw: Buffer | None) -> Self:
        if raw is None or len(raw) == 0:
            raise BodyError(f"missing {cls.__name__} body")
        try:
            obj = fastjson.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise BodyError(f"{cls.__name__} body is not JSON: {exc}") from None
        if not isinstance(obj, dict):
            raise BodyError(f"{cls.__name__} body is not a JSON object")
        return cls.from_json_obj(obj)


# --------------------------------------------------------------------------------------------
# Enums: written as names (as fastjson does), read as names or Java ordinals


class ConsumeType(StrEnum):
    CONSUME_ACTIVELY = "CONSUME_ACTIVELY"
    CONSUME_PASSIVELY = "CONSUME_PASSIVELY"
    CONSUME_POP = "CONSUME_POP"


class MessageModel(StrEnum):
    BROADCASTING = "BROADCASTING"
    CLUSTERING = "CLUSTERING"


class ConsumeFromWhere(StrEnum):
    CONSUME_FROM_LAST_OFFSET = "CONSUME_FROM_LAST_OFFSET"
    CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST = (
        "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST"
    )
    CONSUME_FROM_MIN_OFFSET = "CONSUME_FROM_MIN_OFFSET"
    CONSUME_FROM_MAX_OFFSET = "CONSUME_FROM_MAX_OFFSET"
    CONSUME_FROM_FIRST_OFFSET = "CONSUME_FROM_FIRST_OFFSET"
    CONSUME_FROM_TIMESTAMP = "CONSUME_FROM_TIMESTAMP"


class TopicFilterType(StrEnum):
    SINGLE_TAG = "SINGLE_TAG"
    MULTI_TAG = "MULTI_TAG"


def _lenient_enum(enum_cls: type[Enum]) -> BeforeValidator:
    members = list(enum_cls)

    def convert(value: Any) -> Any:
        if isinstance(value, enum_cls):
            return value
        if isinstance(value, bool):
            raise ValueError(f"not a {enum_cls.__name__}: {value!r}")
        if isinstance(value, int):
            if 0 <= value < len(members):
                return members[value]
            raise ValueError(f"{enum_cls.__name__} ordinal out of range: {value}")
        if isinstance(value, str):
            text = value.strip()
            if text.isdigit():
                return convert(int(text))
            try:
                return enum_cls[text.upper()]
            except KeyError:
                raise ValueError(f"unknown {enum_cls.__name__}: {value!r}") from None
        raise ValueError(f"not a {enum_cls.__name__}: {value!r}")

    return BeforeValidator(convert)


ConsumeTypeField = Annotated[ConsumeType, _lenient_enum(ConsumeType)]
MessageModelField = Annotated[MessageModel, _lenient_enum(MessageModel)]
ConsumeFromWhereField = Annotated[ConsumeFromWhere, _lenient_enum(ConsumeFromWhere)]
TopicFilterTypeField = Annotated[TopicFilterType, _lenient_enum(TopicFilterType)]


def _none_to_empty(value: Any) -> Any:
    return [] if value is None else value


def _none_to_empty_map(value: Any) -> Any:
    return {} if value is None else value


ListOrNone = BeforeValidator(_none_to_empty)
MapOrNone = BeforeValidator(_none_to_empty_map)


# --------------------------------------------------------------------------------------------
# Shared small types


class DataVersion(Body):
    timestamp: int = 0
    counter: int = 0
    state_version: int = 0


class MessageQueue(Body):
    """A queue of a topic on one broker group; hashable, usable as a map key."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True
    )
    topic: str
    broker_name: str
    queue_id: int

    def object_key(self) -> ObjectKey:
        """The fastjson map-key form, with upstream's field order (brokerName, queueId, topic)."""
        return ObjectKey(
            (("brokerName", self.broker_name), ("queueId", self.queue_id), ("topic", self.topic))
        )

    def __lt__(self, other: MessageQueue) -> bool:
        # upstream MessageQueue.compareTo: topic, then brokerName, then queueId
        return (self.topic, self.broker_name, self.queue_id) < (
            other.topic,
            other.broker_name,
            other.queue_id,
        )


def _mq_keyed(table: dict[MessageQueue, Any]) -> dict[ObjectKey, Any]:
    return {mq.object_key(): value for mq, value in table.items()}


def _mq_key_in(value: Any) -> Any:
    """Accept a map keyed by fastjson object keys, dicts, or already-built MessageQueues."""
    if not isinstance(value, dict):
        return value
    out: dict[Any, Any] = {}
    for key, item in value.items():
        if isinstance(key, ObjectKey):
            key = MessageQueue.model_validate(key.as_dict())
        elif isinstance(key, str) and key.startswith("{"):
            key = MessageQueue.model_validate(fastjson.loads(key))
        out[key] = item
    return out


# --------------------------------------------------------------------------------------------
# Routes (NameServer)


class QueueData(Body):
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int = PERM_READ | PERM_WRITE
    # older clients and brokers spell it topicSynFlag
    topic_sys_flag: int = Field(
        default=0,
        alias="topicSysFlag",
        validation_alias=AliasChoices("topicSysFlag", "topicSynFlag", "topic_sys_flag"),
    )


class BrokerData(Body):
    cluster: str
    broker_name: str
    # brokerId (0 = master) -> "ip:port"; written with quoted keys, which every client accepts
    broker_addrs: Annotated[dict[int, str], MapOrNone] = Field(default_factory=dict)

    def master_addr(self) -> str | None:
        return self.broker_addrs.get(0)

    def to_json_obj(self) -> Any:
        return {
            "cluster": self.cluster,
            "brokerName": self.broker_name,
            "brokerAddrs": {str(k): v for k, v in sorted(self.broker_addrs.items())},
        }


class TopicRouteData(Body):
    order_topic_conf: str | None = None
    queue_datas: Annotated[list[QueueData], ListOrNone] = Field(default_factory=list)
    broker_datas: Annotated[list[BrokerData], ListOrNone] = Field(default_factory=list)
    filter_server_table: Annotated[dict[str, list[str]], MapOrNone] = Field(default_factory=dict)

    def to_json_obj(self) -> Any:
        out: dict[str, Any] = {
            "queueDatas": [q.to_json_obj() for q in self.queue_datas],
            "brokerDatas": [b.to_json_obj() for b in self.broker_datas],
            "filterServerTable": self.filter_server_table,
        }
        if self.order_topic_conf is not None:
            out["orderTopicConf"] = self.order_topic_conf
        return out


class ClusterInfo(Body):
    broker_addr_table: Annotated[dict[str, BrokerData], MapOrNone] = Field(default_factory=dict)
    cluster_addr_table: Annotated[dict[str, list[str]], MapOrNone] = Field(default_factory=dict)

    def to_json_obj(self) -> Any:
        return {
            "brokerAddrTable": {k: v.to_json_obj() for k, v in self.broker_addr_table.items()},
            "clusterAddrTable": {k: sorted(v) for k, v in self.cluster_addr_table.items()},
        }


class TopicList(Body):
    topic_list: Annotated[list[str], ListOrNone] = Field(default_factory=list)
    broker_addr: str | None = None


class KVTable(Body):
    table: Annotated[dict[str, str], MapOrNone] = Field(default_factory=dict)


# --------------------------------------------------------------------------------------------
# Topic config and broker registration


class TopicConfig(Body):
    topic_name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = PERM_READ | PERM_WRITE
    topic_filter_type: TopicFilterTypeField = TopicFilterType.SINGLE_TAG
    topic_sys_flag: int = 0
    order: bool = False
    # upstream 5 topic attributes (e.g. message.type); see ferrymq.broker.topic_attributes
    attributes: Annotated[dict[str, str], MapOrNone] = Field(default_factory=dict)


class TopicConfigSerializeWrapper(Body):
    topic_config_table: Annotated[dict[str, TopicConfig], MapOrNone] = Field(default_factory=dict)
    data_version: DataVersion = Field(default_factory=DataVersion)


class RegisterBrokerBody(Body):
    topic_config_serialize_wrapper: TopicConfigSerializeWrapper = Field(
        default_factory=TopicConfigSerializeWrapper
    )
    filter_server_list: Annotated[list[str], ListOrNone] = Field(default_factory=list)


class RegisterBrokerResult(Body):
    """Not on the wire as a body upstream (header + KVTable); kept for the broker's own bookkeeping."""

    ha_server_addr: str | None = None
    master_addr: str | None = None
    kv_table: KVTable = Field(default_factory=KVTable)


# --------------------------------------------------------------------------------------------
# Heartbeats and clients


class SubscriptionData(Body):
    topic: str
    sub_string: str = "*"
    tags_set: Annotated[list[str], ListOrNone] = Field(default_factory=list)
    code_set: Annotated[list[int], ListOrNone] = Field(default_factory=list)
    sub_version: int = 0
    expression_type: str = "TAG"
    class_filter_mode: bool = False


class ProducerData(Body):
    group_name: str


class ConsumerData(Body):
    group_name: str
    consume_type: ConsumeTypeField = ConsumeType.CONSUME_PASSIVELY
    message_model: MessageModelField = MessageModel.CLUSTERING
    consume_from_where: ConsumeFromWhereField = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
    subscription_data_set: Annotated[list[SubscriptionData], ListOrNone] = Field(
        default_factory=list
    )
    unit_mode: bool = False


class HeartbeatData(Body):
    client_id: str = Field(alias="clientID")
    producer_data_set: Annotated[list[ProducerData], ListOrNone] = Field(default_factory=list)
    consumer_data_set: Annotated[list[ConsumerData], ListOrNone] = Field(default_factory=list)


class ConsumerListBody(Body):
    consumer_id_list: Annotated[list[str], ListOrNone] = Field(default_factory=list)


class Connection(Body):
    client_id: str
    client_addr: str
    language: str = "JAVA"
    version: int = 0


class ConsumerConnection(Body):
    connection_set: Annotated[list[Connection], ListOrNone] = Field(default_factory=list)
    subscription_table: Annotated[dict[str, SubscriptionData], MapOrNone] = Field(
        default_factory=dict
    )
    consume_type: ConsumeTypeField | None = None
    message_model: MessageModelField | None = None
    consume_from_where: ConsumeFromWhereField | None = None


class ProducerConnection(Body):
    connection_set: Annotated[list[Connection], ListOrNone] = Field(default_factory=list)


class GroupList(Body):
    group_list: Annotated[list[str], ListOrNone] = Field(default_factory=list)


# --------------------------------------------------------------------------------------------
# Offsets and stats (MessageQueue-keyed maps written the fastjson way)


class OffsetWrapper(Body):
    broker_offset: int = 0
    consumer_offset: int = 0
    # 5.x: the next offset the group's last pull asked for (mqadmin's "Inflight" is pull - consumer)
    pull_offset: int = 0
    last_timestamp: int = 0


class ConsumeStats(Body):
    offset_table: Annotated[dict[MessageQueue, OffsetWrapper], BeforeValidator(_mq_key_in)] = Field(
        default_factory=dict
    )
    consume_tps: float = 0.0

    def compute_total_diff(self) -> int:
        return sum(w.broker_offset - w.consumer_offset for w in self.offset_table.values())

    def to_json_obj(self) -> Any:
        return {
            "offsetTable": {
                mq.object_key(): w.to_json_obj() for mq, w in sorted(self.offset_table.items())
            },
            "consumeTps": self.consume_tps,
        }


class TopicOffset(Body):
    min_offset: int = 0
    max_offset: int = 0
    last_update_timestamp: int = 0


class TopicStatsTable(Body):
    offset_table: Annotated[dict[MessageQueue, TopicOffset], BeforeValidator(_mq_key_in)] = Field(
        default_factory=dict
    )

    def to_json_obj(self) -> Any:
        return {
            "offsetTable": {
                mq.object_key(): t.to_json_obj() for mq, t in sorted(self.offset_table.items())
            }
        }


class ResetOffsetBody(Body):
    offset_table: Annotated[dict[MessageQueue, int], BeforeValidator(_mq_key_in)] = Field(
        default_factory=dict
    )

    def to_json_obj(self) -> Any:
        return {"offsetTable": _mq_keyed(dict(sorted(self.offset_table.items())))}


class ConsumerOffsetSerializeWrapper(Body):
    """GET_ALL_CONSUMER_OFFSET body and consumerOffset.json: ``"topic@group" -> {queueId: offset}``."""

    offset_table: Annotated[dict[str, dict[int, int]], MapOrNone] = Field(default_factory=dict)

    def to_json_obj(self) -> Any:
        # integer keys quoted: this is also the metadata file, which must stay standard JSON
        return {
            "offsetTable": {
                key: {str(q): off for q, off in sorted(table.items())}
                for key, table in self.offset_table.items()
            }
        }


class SubscriptionGroupConfig(Body):
    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    broker_id: int = 0
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True
    # the rest of upstream SubscriptionGroupConfig: stored and returned (Topic/ConsumerGroup CRs)
    consume_message_orderly: bool = False
    group_sys_flag: int = 0
    consume_timeout_minute: int = 15


class SubscriptionGroupWrapper(Body):
    subscription_group_table: Annotated[dict[str, SubscriptionGroupConfig], MapOrNone] = Field(
        default_factory=dict
    )
    data_version: DataVersion = Field(default_factory=DataVersion)


class LockBatchRequestBody(Body):
    consumer_group: str
    client_id: str
    mq_set: Annotated[list[MessageQueue], ListOrNone] = Field(default_factory=list)


class LockBatchResponseBody(Body):
    lock_ok_mq_set: Annotated[list[MessageQueue], ListOrNone] = Field(
        default_factory=list, alias="lockOKMQSet"
    )


class UnlockBatchRequestBody(Body):
    consumer_group: str
    client_id: str
    mq_set: Annotated[list[MessageQueue], ListOrNone] = Field(default_factory=list)


class BrokerRuntimeInfo(KVTable):
    """GET_BROKER_RUNTIME_INFO answers a KVTable of string stats."""


# --------------------------------------------------------------------------------------------
# Admin and monitoring bodies (upstream remoting/protocol/body, admin)


class GetConsumerStatusBody(Body):
    """INVOKE_BROKER_TO_GET_CONSUMER_STATUS answer (``consumerTable``: clientId -> mq -> offset)
    and GET_CONSUMER_STATUS_FROM_CLIENT answer (``messageQueueTable``: mq -> offset)."""

    message_queue_table: Annotated[dict[MessageQueue, int], BeforeValidator(_mq_key_in)] = Field(
        default_factory=dict
    )
    consumer_table: Annotated[dict[str, dict[MessageQueue, int]], MapOrNone] = Field(
        default_factory=dict
    )

    @classmethod
    def from_json_obj(cls, obj: Any) -> Self:
        if isinstance(obj, dict) and isinstance(obj.get("consumerTable"), dict):
            obj = {
                **obj,
                "consumerTable": {k: _mq_key_in(v) for k, v in obj["consumerTable"].items()},
            }
        return super().from_json_obj(obj)

    def to_json_obj(self) -> Any:
        return {
            "messageQueueTable": _mq_keyed(dict(sorted(self.message_queue_table.items()))),
            "consumerTable": {
                client: _mq_keyed(dict(sorted(table.items())))
                for client, table in sorted(self.consumer_table.items())
            },
        }


class QueueTimeSpan(Body):
    message_queue: MessageQueue
    min_time_stamp: int = 0
    max_time_stamp: int = 0
    consume_time_stamp: int = 0
    delay_time: int = 0


class QueryConsumeTimeSpanBody(Body):
    consume_time_span_set: Annotated[list[QueueTimeSpan], ListOrNone] = Field(default_factory=list)


class BrokerStatsItem(Body):
    sum: int = 0
    tps: float = 0.0
    avgpt: float = 0.0


class BrokerStatsData(Body):
    stats_minute: BrokerStatsItem = Field(default_factory=BrokerStatsItem)
    stats_hour: BrokerStatsItem = Field(default_factory=BrokerStatsItem)
    stats_day: BrokerStatsItem = Field(default_factory=BrokerStatsItem)


class ConsumeStatsList(Body):
    """GET_BROKER_CONSUME_STATS: ``[{group: [ConsumeStats per topic]}]``, brokerAddr, totalDiff."""

    consume_stats_list: Annotated[list[dict[str, list[ConsumeStats]]], ListOrNone] = Field(
        default_factory=list
    )
    broker_addr: str | None = None
    total_diff: int = 0
    total_inflight_diff: int = 0

    def to_json_obj(self) -> Any:
        return {
            "consumeStatsList": [
                {group: [s.to_json_obj() for s in stats] for group, stats in item.items()}
                for item in self.consume_stats_list
            ],
            "brokerAddr": self.broker_addr,
            "totalDiff": self.total_diff,
            "totalInflightDiff": self.total_inflight_diff,
        }


class ConsumeQueueData(Body):
    physic_offset: int = 0
    physic_size: int = 0
    tags_code: int = 0
    extend_data_json: str | None = None
    bit_map: str | None = None
    eval: bool = False
    msg: str | None = None


class QueryConsumeQueueResponseBody(Body):
    subscription_data: SubscriptionData | None = None
    filter_data: str | None = None
    queue_data: Annotated[list[ConsumeQueueData], ListOrNone] = Field(default_factory=list)
    max_queue_index: int = 0
    min_queue_index: int = 0


class ProducerInfo(Body):
    """One producer of GET_ALL_PRODUCER_INFO (upstream ProducerInfo)."""

    client_id: str
    remote_ip: str = Field(alias="remoteIP")
    language: str = "JAVA"
    version: int = 0
    last_update_timestamp: int = 0


class ProducerTableInfo(Body):
    data: Annotated[dict[str, list[ProducerInfo]], MapOrNone] = Field(default_factory=dict)


class ConsumeMessageDirectlyResult(Body):
    order: bool = False
    auto_commit: bool = True
    consume_result: str | None = None
    remark: str | None = None
    spent_time_mills: int = 0
