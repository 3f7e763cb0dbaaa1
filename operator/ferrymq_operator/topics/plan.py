"""Pure decisions for Topic and ConsumerGroup resources: no I/O, unit-tested without brokers.

* which RocketMQ name a resource manages and whether an earlier resource already claims it;
* per broker group, what the topic (or group) should look like after this pass: the spec, except
  that read queues are only removed once they are drained (writes to them stop at once, so they
  drain; upstream's advice for shrinking a topic);
* what differs between a broker group and the spec (the drift or update message).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ferrymq.topic_validator import (
    AUTO_CREATE_TOPIC_KEY_TOPIC,
    DLQ_GROUP_TOPIC_PREFIX,
    RETRY_GROUP_TOPIC_PREFIX,
    RMQ_SYS_NAME_PREFIX,
    SYSTEM_TOPIC_PREFIX,
    check_topic_name,
)
from pydantic.alias_generators import to_camel

from ferrymq_operator.topics import models

MAX_LISTED = 5

# Names a Topic or ConsumerGroup resource may not manage: the broker's retry and DLQ topics, both
# system prefixes and TBW102 (the rest of upstream's system-topic set is not refused here).
RESERVED_PREFIXES = (
    RETRY_GROUP_TOPIC_PREFIX,
    DLQ_GROUP_TOPIC_PREFIX,
    SYSTEM_TOPIC_PREFIX,
    RMQ_SYS_NAME_PREFIX,
)


# --- names and duplicates ---


def managed_name(spec_name: str | None, metadata_name: str, kind: str) -> str:
    """The RocketMQ name of a topic or consumer group, or ValueError saying how to fix it."""
    name = spec_name or metadata_name
    if kind == "topic":
        reason = check_topic_name(name)
    elif not re.fullmatch(models.GROUP_NAME_PATTERN, name) or len(name) > models.GROUP_MAX_LENGTH:
        reason = f"allowed: [%|a-zA-Z0-9_-], at most {models.GROUP_MAX_LENGTH} characters"
    else:
        reason = None
    if reason is not None:
        raise ValueError(
            f"metadata.name {metadata_name!r} is not a valid RocketMQ {kind} name ({reason}); "
            f"set spec.name"
        )
    if name.startswith(RESERVED_PREFIXES) or name == AUTO_CREATE_TOPIC_KEY_TOPIC:
        raise ValueError(
            f"{kind} name {name!r} is reserved for the broker's system {kind}s; choose another"
        )
    return name


@dataclass(frozen=True)
class Claim:
    """One resource's claim on a (Broker, name) pair."""

    resource: str  # metadata.name
    broker: str
    name: str
    created: str  # metadata.creationTimestamp (RFC 3339, sortable as text)


def claim_of(body: Mapping[str, Any]) -> Claim | None:
    """The claim of a resource as listed from the API (None when its spec names nothing usable)."""
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    broker = (spec.get("brokerRef") or {}).get("name")
    if not broker:
        return None
    return Claim(
        resource=str(meta.get("name", "")),
        broker=str(broker),
        name=str(spec.get("name") or meta.get("name", "")),
        created=str(meta.get("creationTimestamp") or ""),
    )


def earlier_claim(mine: Claim, others: Sequence[Claim]) -> Claim | None:
    """The resource that owns ``mine``'s name when it is not ``mine``: the oldest claim wins
    (ties: the smaller metadata.name), so the later of two resources changes nothing."""
    rivals = [
        c
        for c in others
        if c.resource != mine.resource and (c.broker, c.name) == (mine.broker, mine.name)
    ]
    if not rivals:
        return None
    first = min([mine, *rivals], key=lambda c: (c.created, c.resource))
    return None if first == mine else first


# --- topics ---


@dataclass(frozen=True)
class TopicState:
    """The parts of a broker's TopicConfig a Topic resource manages."""

    read_queue_nums: int
    write_queue_nums: int
    perm: int
    order: bool
    attributes: Mapping[str, str] = field(default_factory=dict)

    @property
    def queues(self) -> str:
        return f"{self.read_queue_nums}/{self.write_queue_nums}"


def desired_topic(spec: models.TopicSpec) -> TopicState:
    read, write = spec.queue_counts()
    return TopicState(read, write, spec.perm, spec.order, spec.attributes())


def differences(desired: TopicState, actual: TopicState) -> list[str]:
    """``field actual -> desired`` for each managed field that differs."""
    out = []
    for label, want, have in (
        ("readQueueNums", desired.read_queue_nums, actual.read_queue_nums),
        ("writeQueueNums", desired.write_queue_nums, actual.write_queue_nums),
        ("perm", desired.perm, actual.perm),
        ("order", desired.order, actual.order),
    ):
        if want != have:
            out.append(f"{label} {have} -> {want}")
    if dict(desired.attributes) != dict(actual.attributes):
        out.append(f"attributes {dict(actual.attributes)} -> {dict(desired.attributes)}")
    return out


def removed_read_queues(desired: TopicState, actual: TopicState | None) -> range:
    """Queue ids the spec no longer reads (they must be drained before they go)."""
    if actual is None or actual.read_queue_nums <= desired.read_queue_nums:
        return range(0)
    return range(desired.read_queue_nums, actual.read_queue_nums)


@dataclass(frozen=True)
class QueueBacklog:
    """Messages left on one queue that is to be removed."""

    queue_id: int
    max_offset: int
    min_offset: int
    # consumer group -> committed offset, for every group with offsets on the topic here
    committed: Mapping[str, int] = field(default_factory=dict)

    def left(self) -> dict[str, int]:
        """Group -> unconsumed messages; with no group at all, every message still stored."""
        if not self.committed:
            kept = self.max_offset - self.min_offset
            return {"(no consumer group)": kept} if kept > 0 else {}
        return {g: self.max_offset - c for g, c in self.committed.items() if self.max_offset > c}


def undrained(backlogs: Sequence[QueueBacklog]) -> dict[str, int]:
    """Group -> messages left over the removed queues (empty: they are drained)."""
    out: dict[str, int] = {}
    for backlog in backlogs:
        for group, count in backlog.left().items():
            out[group] = out.get(group, 0) + count
    return out


def target_topic(desired: TopicState, actual: TopicState | None, drained: bool) -> TopicState:
    """What to write to a broker group this pass: the spec, but read queues are only removed when
    ``drained`` (write queues go at once, so nothing new lands on the queues being removed)."""
    if actual is None or drained or actual.read_queue_nums <= desired.read_queue_nums:
        return desired
    return replace(desired, read_queue_nums=actual.read_queue_nums)


def shrink_message(broker_name: str, queues: range, left: Mapping[str, int]) -> str:
    listed = sorted(left.items(), key=lambda kv: (-kv[1], kv[0]))
    text = ", ".join(f"{g} ({n} left)" for g, n in listed[:MAX_LISTED])
    if len(listed) > MAX_LISTED:
        text += f" and {len(listed) - MAX_LISTED} more"
    return (
        f"{broker_name}: queues {queues.start}..{queues.stop - 1} are no longer written but still "
        f"hold unconsumed messages ({text}); readQueueNums stays {queues.stop} until they are "
        f"consumed"
    )


# --- consumer groups ---

# ConsumerGroupSpec field -> SubscriptionGroupConfig field (same snake_case names).
GROUP_FIELDS = (
    "consume_enable",
    "consume_from_min_enable",
    "consume_broadcast_enable",
    "consume_message_orderly",
    "retry_queue_nums",
    "retry_max_times",
    "broker_id",
    "which_broker_when_consume_slowly",
    "notify_consumer_ids_changed_enable",
    "group_sys_flag",
    "consume_timeout_minute",
)


def desired_group(spec: models.ConsumerGroupSpec) -> dict[str, Any]:
    return {name: getattr(spec, name) for name in GROUP_FIELDS}


def group_differences(desired: Mapping[str, Any], actual: Mapping[str, Any]) -> list[str]:
    return [
        f"{to_camel(k)} {actual.get(k)} -> {v}" for k, v in desired.items() if actual.get(k) != v
    ]


def listed(items: Sequence[str]) -> str:
    shown = ", ".join(items[:MAX_LISTED])
    more = len(items) - MAX_LISTED
    return f"{shown} and {more} more" if more > 0 else shown
