"""Topics for new broker groups after a scale-out (seed OP1: new brokers get no topics by themselves).

The pure part decides *what* to create: the union of the topics the existing groups hold, minus
system topics and minus what the new group already has. The I/O part talks to brokers through the
:class:`TopicAdmin` protocol (upstream admin codes GET_ALL_TOPIC_CONFIG = 21 and
UPDATE_AND_CREATE_TOPIC = 17), implemented by :class:`RemotingTopicAdmin` over ferrymq's own
client; :class:`UnavailableAdmin` stands in (and says why) if that client cannot be imported.
"""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from ferrymq import topic_validator
from ferrymq.topic_validator import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX

from ferrymq_operator import timeouts
from ferrymq_operator.security import session

_T = TypeVar("_T")

# Beyond upstream's system topics (topic_validator): the RMQ_SYS_ spelling, retry and DLQ topics.
_NOT_COPIED_PREFIXES = ("RMQ_SYS_", RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX)


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
    if topic_validator.is_system_topic(name) or name == cluster_name or name in set(broker_names):
        return True
    return name.startswith(_NOT_COPIED_PREFIXES)


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


class RemotingTopicAdmin:
    """TopicAdmin over the remoting protocol with ferrymq's client (``BrokerApi``).

    One short-lived connection set per call: topic copies are rare (once per new group), and no
    connection outlives the reconcile that needed it.
    """

    def __init__(self, timeout_seconds: float) -> None:
        self.timeout_seconds = timeout_seconds

    async def _call(self, action: Callable[[Any], Awaitable[_T]]) -> _T:
        from ferrymq.client.broker_api import BrokerApi
        from ferrymq.client.errors import BrokerUnreachableError
        from ferrymq.remoting.client import RemotingClient
        from ferrymq.remoting.processor import ProcessorTable

        remoting = RemotingClient(
            ProcessorTable(),
            name="ferrymq-operator admin",
            rpc_hook=session.rpc_hook(),
            ssl_context=session.ssl_context(),
        )
        try:
            return await timeouts.within(
                self.timeout_seconds * 2, action(BrokerApi(remoting, self.timeout_seconds))
            )
        except (OSError, TimeoutError, BrokerUnreachableError) as error:
            raise AdminUnavailable(f"broker unreachable: {error}") from error
        finally:
            await remoting.close()

    async def topics(self, broker_addr: str) -> list[TopicConfig]:
        wrapper = await self._call(lambda api: api.get_all_topic_config(broker_addr))
        return [
            TopicConfig(
                topic_name=tc.topic_name,
                read_queue_nums=tc.read_queue_nums,
                write_queue_nums=tc.write_queue_nums,
                perm=tc.perm,
                topic_filter_type=str(getattr(tc.topic_filter_type, "value", tc.topic_filter_type)),
                topic_sys_flag=tc.topic_sys_flag,
                order=tc.order,
            )
            for tc in wrapper.topic_config_table.values()
        ]

    async def create_topic(self, broker_addr: str, config: TopicConfig) -> None:
        from ferrymq.remoting.headers import CreateTopicRequestHeader

        header = CreateTopicRequestHeader(
            topic=config.topic_name,
            read_queue_nums=config.read_queue_nums,
            write_queue_nums=config.write_queue_nums,
            perm=config.perm,
            topic_filter_type=config.topic_filter_type,
            topic_sys_flag=config.topic_sys_flag,
            order=config.order,
        )
        await self._call(lambda api: api.create_topic(broker_addr, header))


def default_admin(timeout_seconds: float) -> TopicAdmin:
    """The remoting admin when ferrymq's client is importable, else :class:`UnavailableAdmin`."""
    try:
        importlib.import_module("ferrymq.client.broker_api")
    except ImportError as error:
        return UnavailableAdmin(f"ferrymq.client is not available ({error})")
    return RemotingTopicAdmin(timeout_seconds)
