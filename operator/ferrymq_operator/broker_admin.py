"""Topics for new broker groups after a scale-out (seed OP1: new brokers get no topics by themselves).

The pure part decides *what* to create: the union of the topics the existing groups hold, minus
system topics and minus what the new group already has. The I/O part talks to brokers through the
:class:`TopicAdmin` protocol (upstream admin codes GET_ALL_TOPIC_CONFIG = 21 and
UPDATE_AND_CREATE_TOPIC = 17), implemented over ``ferrymq.client.admin`` when that package is
present; until then :class:`UnavailableAdmin` reports why nothing was copied.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

# Upstream TopicValidator system topics, and per-cluster/per-broker topics the broker creates itself.
SYSTEM_TOPICS = frozenset(
    {
        "TBW102",
        "SCHEDULE_TOPIC_XXXX",
        "BenchmarkTest",
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "RMQ_SYS_TRACE_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
        "SELF_TEST_TOPIC",
        "OFFSET_MOVED_EVENT",
    }
)
SYSTEM_PREFIXES = ("rmq_sys_", "RMQ_SYS_", "%RETRY%", "%DLQ%")


@dataclass(frozen=True)
class TopicConfig:
    """Upstream TopicConfig fields the admin API exchanges."""

    topic_name: str
    read_queue_nums: int = 8
    write_queue_nums: int = 8
    perm: int = 6  # PERM_READ | PERM_WRITE
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False


class AdminUnavailable(RuntimeError):
    """The broker admin API cannot be used (not installed, or the broker did not answer)."""


class TopicAdmin(Protocol):
    async def topics(self, broker_addr: str) -> list[TopicConfig]:
        """Every topic config a broker holds (GET_ALL_TOPIC_CONFIG)."""

    async def create_topic(self, broker_addr: str, config: TopicConfig) -> None:
        """Create or update one topic on a broker (UPDATE_AND_CREATE_TOPIC)."""


def is_system_topic(name: str, cluster_name: str, broker_names: Iterable[str]) -> bool:
    """Topics no operator should copy: upstream system topics and the per-cluster/broker ones."""
    if name in SYSTEM_TOPICS or name == cluster_name or name in set(broker_names):
        return True
    return name.startswith(SYSTEM_PREFIXES)


def plan_topic_copy(
    sources: Sequence[Sequence[TopicConfig]],
    target: Sequence[TopicConfig],
    cluster_name: str,
    broker_names: Iterable[str],
) -> list[TopicConfig]:
    """Topics to create on a new group, sorted by name.

    ``sources`` are the topic lists of the existing groups' masters. A topic held with different
    queue counts in different groups gets the largest counts (a new group should not be the one
    that limits throughput); a topic already on the target with the same settings is skipped.
    """
    names = list(broker_names)
    wanted: dict[str, TopicConfig] = {}
    for topics in sources:
        for topic in topics:
            if is_system_topic(topic.topic_name, cluster_name, names):
                continue
            seen = wanted.get(topic.topic_name)
            if seen is None:
                wanted[topic.topic_name] = topic
            else:
                wanted[topic.topic_name] = TopicConfig(
                    topic_name=topic.topic_name,
                    read_queue_nums=max(seen.read_queue_nums, topic.read_queue_nums),
                    write_queue_nums=max(seen.write_queue_nums, topic.write_queue_nums),
                    perm=seen.perm | topic.perm,
                    topic_filter_type=seen.topic_filter_type,
                    topic_sys_flag=seen.topic_sys_flag,
                    order=seen.order or topic.order,
                )
    present = {t.topic_name: t for t in target}
    return [wanted[name] for name in sorted(wanted) if present.get(name) != wanted[name]]


async def copy_topics(
    admin: TopicAdmin,
    source_addrs: Sequence[str],
    target_addr: str,
    cluster_name: str,
    broker_names: Iterable[str],
) -> list[TopicConfig]:
    """Create the existing groups' topics on the new group's master; returns what was created."""
    sources = [await admin.topics(addr) for addr in source_addrs]
    plan = plan_topic_copy(sources, await admin.topics(target_addr), cluster_name, broker_names)
    for topic in plan:
        await admin.create_topic(target_addr, topic)
    return plan


class UnavailableAdmin:
    """Stands in while ``ferrymq.client.admin`` is missing: every call says why it cannot work."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    async def topics(self, broker_addr: str) -> list[TopicConfig]:
        raise AdminUnavailable(self.reason)

    async def create_topic(self, broker_addr: str, config: TopicConfig) -> None:
        raise AdminUnavailable(self.reason)


def default_admin(timeout_seconds: float) -> TopicAdmin:
    """The ferrymq admin client adapter when importable, else :class:`UnavailableAdmin`."""
    try:
        module: Any = importlib.import_module("ferrymq.client.admin")
    except ImportError as error:
        return UnavailableAdmin(f"ferrymq.client.admin is not available ({error})")
    adapter = getattr(module, "OperatorTopicAdmin", None)
    if adapter is None:
        return UnavailableAdmin("ferrymq.client.admin has no OperatorTopicAdmin adapter yet")
    admin: TopicAdmin = adapter(timeout_seconds=timeout_seconds)
    return admin
