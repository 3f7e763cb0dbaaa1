"""TopicConfigManager: the broker's topics (topics.json), system topics, and auto-creation through
TBW102 (upstream TopicConfigManager + TopicValidator).

Decisions are pure methods; saving is the caller's job (``snapshot()`` -> ConfigFile in a thread), and
``changed`` tells the caller to persist and re-register with the NameServers.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import orjson

from ferrymq.remoting.bodies import (
    PERM_INHERIT,
    PERM_READ,
    PERM_WRITE,
    BodyError,
    DataVersion,
    TopicConfig,
    TopicConfigSerializeWrapper,
)
from ferrymq.topic_validator import (
    AUTO_CREATE_TOPIC_KEY_TOPIC as AUTO_CREATE_TOPIC_KEY_TOPIC,
)
from ferrymq.topic_validator import DLQ_GROUP_TOPIC_PREFIX as DLQ_GROUP_TOPIC_PREFIX
from ferrymq.topic_validator import OFFSET_MOVED_EVENT as OFFSET_MOVED_EVENT
from ferrymq.topic_validator import RETRY_GROUP_TOPIC_PREFIX as RETRY_GROUP_TOPIC_PREFIX
from ferrymq.topic_validator import RMQ_SYS_TRANS_HALF_TOPIC as RMQ_SYS_TRANS_HALF_TOPIC
from ferrymq.topic_validator import RMQ_SYS_TRANS_OP_HALF_TOPIC as RMQ_SYS_TRANS_OP_HALF_TOPIC
from ferrymq.topic_validator import SCHEDULE_TOPIC as SCHEDULE_TOPIC
from ferrymq.topic_validator import SELF_TEST_TOPIC as SELF_TEST_TOPIC
from ferrymq.topic_validator import TOPIC_MAX_LENGTH as TOPIC_MAX_LENGTH
from ferrymq.topic_validator import check_topic_name as check_topic_name
from ferrymq.topic_validator import dlq_topic as dlq_topic
from ferrymq.topic_validator import is_system_topic as is_system_topic
from ferrymq.topic_validator import reply_topic
from ferrymq.topic_validator import retry_topic as retry_topic

log = logging.getLogger(__name__)

SCHEDULE_LEVELS = 18


class TopicConfigManager:
    def __init__(
        self,
        *,
        cluster_name: str,
        broker_name: str,
        auto_create_topic_enable: bool,
        default_topic_queue_nums: int,
        cluster_topic_enable: bool = True,
        broker_topic_enable: bool = True,
        trace_topic: str | None = None,
    ) -> None:
        self.table: dict[str, TopicConfig] = {}
        self.data_version = DataVersion(timestamp=_now_ms(), counter=0)
        # a slave's view of a topic: topic configs reach a slave by sync, its messages by
        # replication, and messages of a topic (or queue) whose config has not arrived yet must
        # be readable in between (see BrokerApp.slave_topic_view); None on a master
        self.slave_view: Callable[[str, TopicConfig | None], TopicConfig | None] | None = None
        self.auto_create_topic_enable = auto_create_topic_enable
        self._system: set[str] = set()
        self._add_system(SELF_TEST_TOPIC, 1, 1)
        if auto_create_topic_enable:
            self._add_system(
                AUTO_CREATE_TOPIC_KEY_TOPIC,
                default_topic_queue_nums,
                default_topic_queue_nums,
                PERM_INHERIT | PERM_READ | PERM_WRITE,
            )
        if cluster_topic_enable:
            self._add_system(cluster_name, 16, 16, PERM_INHERIT | PERM_READ | PERM_WRITE)
        if broker_topic_enable:
            self._add_system(broker_name, 1, 1, PERM_INHERIT | PERM_READ | PERM_WRITE)
        self._add_system(OFFSET_MOVED_EVENT, 1, 1)
        self._add_system(SCHEDULE_TOPIC, SCHEDULE_LEVELS, SCHEDULE_LEVELS)
        self._add_system(RMQ_SYS_TRANS_HALF_TOPIC, 1, 1)
        # where request-reply stores replies (upstream TopicConfigManager: cluster + "_REPLY_TOPIC")
        self._add_system(reply_topic(cluster_name), 1, 1)
        if trace_topic:
            self._add_system(trace_topic, 1, 1)

    def _add_system(
        self, name: str, read: int, write: int, perm: int = PERM_READ | PERM_WRITE
    ) -> None:
        self.table[name] = TopicConfig(
            topic_name=name, read_queue_nums=read, write_queue_nums=write, perm=perm
        )
        self._system.add(name)

    # --- persistence --------------------------------------------------------------------------
    def snapshot(self) -> bytes:
        wrapper = self.wrapper()
        return orjson.dumps(wrapper.to_json_obj(), option=orjson.OPT_INDENT_2)

    def restore(self, data: bytes) -> None:
        """Load topics.json; a system topic keeps its built-in settings unless the file changed it."""
        try:
            wrapper = TopicConfigSerializeWrapper.decode(data)
        except BodyError as exc:
            raise ValueError(f"topics.json unreadable: {exc}") from None
        self.table.update(wrapper.topic_config_table)
        self.data_version = wrapper.data_version

    def wrapper(self) -> TopicConfigSerializeWrapper:
        return TopicConfigSerializeWrapper(
            topic_config_table={k: v.model_copy() for k, v in self.table.items()},
            data_version=self.data_version.model_copy(),
        )

    def _bump(self, state_version: int | None = None) -> None:
        self.data_version = DataVersion(
            timestamp=_now_ms(),
            counter=self.data_version.counter + 1,
            state_version=self.data_version.state_version
            if state_version is None
            else state_version,
        )

    def next_version(self, state_version: int | None = None) -> None:
        """A change the NameServers must apply although no topic changed (the broker's
        permission, which clamps every topic's perm): upstream DataVersion.nextVersion.
        ``state_version``: a controller-mode broker's master epoch (upstream
        ``nextVersion(newMasterEpoch)`` on each role change), by which a NameServer ignores a
        registration older than the entry it holds."""
        self._bump(state_version)

    # --- queries ------------------------------------------------------------------------------
    def get(self, topic: str) -> TopicConfig | None:
        config = self.table.get(topic)
        if self.slave_view is not None:
            return self.slave_view(topic, config)
        return config

    def is_order_topic(self, topic: str) -> bool:
        config = self.table.get(topic)
        return bool(config and config.order)

    # --- changes ------------------------------------------------------------------------------
    def update(self, config: TopicConfig) -> TopicConfig | None:
        """Create or replace; returns the previous config."""
        old = self.table.get(config.topic_name)
        self.table[config.topic_name] = config
        self._bump()
        log.info("topic config %s: %s -> %s", config.topic_name, old, config)
        return old

    def delete(self, topic: str) -> TopicConfig | None:
        old = self.table.pop(topic, None)
        if old is not None:
            self._bump()
            log.info("topic %s deleted", topic)
        return old

    def create_in_send(
        self,
        topic: str,
        default_topic: str,
        client_default_queue_nums: int,
        topic_sys_flag: int = 0,
    ) -> TopicConfig | None:
        """Auto-create ``topic`` from ``default_topic`` (TBW102) when that topic allows inheriting.

        Returns the new config, or None when auto-creation is not allowed (the sender then gets
        TOPIC_NOT_EXIST)."""
        existing = self.table.get(topic)
        if existing is not None:
            return existing
        template = self.table.get(default_topic)
        if template is None:
            return None
        if default_topic == AUTO_CREATE_TOPIC_KEY_TOPIC and not self.auto_create_topic_enable:
            return None
        if not template.perm & PERM_INHERIT:
            log.warning(
                "default topic %s does not allow inheriting; %s not created", default_topic, topic
            )
            return None
        queues = max(1, min(client_default_queue_nums, template.write_queue_nums))
        config = TopicConfig(
            topic_name=topic,
            read_queue_nums=queues,
            write_queue_nums=queues,
            perm=template.perm & ~PERM_INHERIT,
            topic_sys_flag=topic_sys_flag,
        )
        self.update(config)
        return config

    def create_in_send_back(
        self, topic: str, queue_nums: int, perm: int, topic_sys_flag: int = 0
    ) -> TopicConfig:
        """Create a retry/DLQ topic on demand (upstream createTopicInSendMessageBackMethod)."""
        existing = self.table.get(topic)
        if existing is not None:
            return existing
        config = TopicConfig(
            topic_name=topic,
            read_queue_nums=queue_nums,
            write_queue_nums=queue_nums,
            perm=perm,
            topic_sys_flag=topic_sys_flag,
        )
        self.update(config)
        return config

    def registration_wrapper(self, broker_permission: int) -> TopicConfigSerializeWrapper:
        """What a registration carries: with a read-only/write-only broker, every topic's perm is
        clamped to the broker's (upstream registerBrokerAll)."""
        wrapper = self.wrapper()
        if (broker_permission & (PERM_READ | PERM_WRITE)) != (PERM_READ | PERM_WRITE):
            for config in wrapper.topic_config_table.values():
                config.perm = broker_permission
        return wrapper


def _now_ms() -> int:
    return int(time.time() * 1000)
