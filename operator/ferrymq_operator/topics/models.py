"""``Topic`` and ``ConsumerGroup`` (``ferrymq.io/v1alpha1``): the source of their CRDs in ``crds/``.

Names follow upstream RocketMQ: topic names are checked with the broker's own rule (TopicValidator,
``[%|a-zA-Z0-9_-]``, at most 127 bytes; Kubernetes names cannot carry ``%``, ``|`` or ``_``, hence
``spec.name``), consumer group fields are upstream ``SubscriptionGroupConfig``'s, the message type is
upstream's topic attribute ``message.type``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from ferrymq.broker import topic_attributes
from ferrymq.broker.topic_config import TOPIC_MAX_LENGTH
from pydantic import ConfigDict, Field, StringConstraints, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from ferrymq_operator.base_models import CamelModel
from ferrymq_operator.models import Condition, DnsLabel, InvalidSpec, explain

# Upstream TopicValidator's character rule (ferrymq.broker.topic_config._VALID_TOPIC).
TOPIC_NAME_PATTERN = r"^[%|a-zA-Z0-9_-]+$"
# Upstream consumer group names: the same characters, at most 255 (Validators.CHARACTER_MAX_LENGTH).
GROUP_NAME_PATTERN = TOPIC_NAME_PATTERN
GROUP_MAX_LENGTH = 255
MAX_QUEUES = 1024  # the broker's MAX_QUEUE_NUMS (UPDATE_AND_CREATE_TOPIC refuses more)
DEFAULT_QUEUES = 8  # upstream defaultTopicQueueNums

RETAIN_ANNOTATION = "ferrymq.io/deletion-policy"
RETAIN = "retain"

TopicName = Annotated[
    str, StringConstraints(pattern=TOPIC_NAME_PATTERN, min_length=1, max_length=TOPIC_MAX_LENGTH)
]
GroupName = Annotated[
    str, StringConstraints(pattern=GROUP_NAME_PATTERN, min_length=1, max_length=GROUP_MAX_LENGTH)
]
QueueCount = Annotated[int, Field(ge=1, le=MAX_QUEUES)]


class BrokerRef(CamelModel):
    """A Broker custom resource in the same namespace."""

    name: DnsLabel = Field(description="metadata.name of the Broker.")


class TopicSpec(CamelModel):
    """Desired state of one topic on every broker group of a Broker."""

    broker_ref: BrokerRef
    name: TopicName | None = Field(
        default=None,
        description="RocketMQ topic name (may use % | _ and capitals); defaults to metadata.name.",
    )
    queues: QueueCount | None = Field(
        default=None, description="Read and write queues per broker group (or set both below)."
    )
    read_queue_nums: QueueCount | None = Field(default=None, description="Read queues per group.")
    write_queue_nums: QueueCount | None = Field(
        default=None, description="Write queues per group (at most readQueueNums)."
    )
    perm: Literal[2, 4, 6] = Field(default=6, description="2 write only, 4 read only, 6 both.")
    order: bool = Field(default=False, description="Ordered topic (upstream TopicConfig.order).")
    message_type: Literal["NORMAL", "FIFO", "DELAY", "TRANSACTION"] = Field(
        default="NORMAL", description="Upstream topic attribute message.type."
    )
    config: dict[str, str] = Field(
        default_factory=dict,
        description="Further upstream topic attributes, key without the leading +.",
    )

    @model_validator(mode="after")
    def _cross_field(self) -> TopicSpec:
        if self.queues is not None and (
            self.read_queue_nums is not None or self.write_queue_nums is not None
        ):
            raise ValueError(
                "set either queues or readQueueNums/writeQueueNums, not both; remove queues "
                "to give different read and write counts"
            )
        read, write = self.queue_counts()
        if write > read:
            raise ValueError(
                f"writeQueueNums ({write}) is larger than readQueueNums ({read}): messages "
                f"written to queues {read}..{write - 1} would never be read; raise "
                f"readQueueNums or lower writeQueueNums"
            )
        for key, value in self.config.items():
            if key == topic_attributes.MESSAGE_TYPE:
                raise ValueError(f"config.{key}: set it with spec.messageType instead")
            reason = topic_attributes.check_attribute(key, value)
            if reason is not None:
                raise ValueError(f"config.{key}: {reason}")
        return self

    def queue_counts(self) -> tuple[int, int]:
        """(readQueueNums, writeQueueNums) the spec asks for."""
        if self.queues is not None:
            return self.queues, self.queues
        read = self.read_queue_nums or self.write_queue_nums or DEFAULT_QUEUES
        write = self.write_queue_nums or self.read_queue_nums or DEFAULT_QUEUES
        return read, write

    def attributes(self) -> dict[str, str]:
        return {**self.config, topic_attributes.MESSAGE_TYPE: self.message_type}


class ConsumerGroupSpec(CamelModel):
    """Desired state of one consumer group (upstream SubscriptionGroupConfig) on every broker group."""

    broker_ref: BrokerRef
    name: GroupName | None = Field(
        default=None, description="RocketMQ consumer group name; defaults to metadata.name."
    )
    consume_enable: bool = Field(default=True, description="Consumers may pull.")
    consume_from_min_enable: bool = Field(
        default=True,
        description=(
            "consumeFromMinEnable: a queue the group has no committed offset for is read from "
            "its minimum offset."
        ),
    )
    consume_broadcast_enable: bool = Field(
        default=True, description="The group may consume in broadcasting mode."
    )
    consume_message_orderly: bool = Field(
        default=False,
        description="Consumers consume in order (queue locks; retries stay in the queue).",
    )
    retry_queue_nums: int = Field(
        default=1,
        ge=0,
        le=MAX_QUEUES,
        description="Queues of the group's retry topic %RETRY%<group> on each broker group.",
    )
    retry_max_times: int = Field(
        default=16,
        ge=-1,
        le=1000,
        description=(
            "Deliveries of a failed message before it goes to the dead-letter topic "
            "%DLQ%<group> (-1: upstream's default of 16 per client setting)."
        ),
    )
    broker_id: int = Field(default=0, ge=0, description="Broker id consumers pull from (0 master).")
    which_broker_when_consume_slowly: int = Field(
        default=1,
        ge=0,
        description="Broker id consumers are sent to when they fall behind (slaveReadEnable).",
    )
    notify_consumer_ids_changed_enable: bool = Field(
        default=True,
        description="Tell the group's consumers when one joins or leaves, so they rebalance at once.",
    )
    group_sys_flag: int = Field(
        default=0, ge=0, description="Upstream's groupSysFlag bit set (0 for ordinary groups)."
    )
    consume_timeout_minute: int = Field(
        default=15,
        ge=1,
        le=1440,
        description="Minutes a message may be consumed before it is redelivered (push consumers).",
    )


class ObjectStatus(CamelModel):
    """Status fields shared by Topic and ConsumerGroup (one writer: topics.conditions)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    observed_generation: int | None = None
    conditions: list[Condition] = Field(default_factory=list)
    name: str | None = Field(default=None, description="The RocketMQ name this resource manages.")
    broker_groups: list[str] = Field(
        default_factory=list, description="Broker groups (brokerName) where it is present."
    )


class TopicStatus(ObjectStatus):
    queues: str | None = Field(
        default=None, description="readQueueNums/writeQueueNums on the broker groups, e.g. 8/8."
    )


class ConsumerGroupStatus(ObjectStatus):
    lag: int | None = Field(
        default=None, description="Unconsumed messages over every broker group (GET_CONSUME_STATS)."
    )
    lag_by_topic: dict[str, int] = Field(
        default_factory=dict, description="The lag per subscribed topic."
    )


def parse_topic_spec(spec: dict[str, Any]) -> TopicSpec:
    try:
        return TopicSpec.model_validate(spec)
    except ValidationError as error:
        raise InvalidSpec(explain(error)) from error


def parse_group_spec(spec: dict[str, Any]) -> ConsumerGroupSpec:
    try:
        return ConsumerGroupSpec.model_validate(spec)
    except ValidationError as error:
        raise InvalidSpec(explain(error)) from error
