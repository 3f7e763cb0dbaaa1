"""Replication inside one broker process: what ``broker/app.py`` starts, feeds and stops.

- Every role gets an :class:`~ferrymq.ha.service.HAService` over the broker's MessageStore.
- A master publishes its HA address in registrations (``haServerAddr``); under SYNC_MASTER it
  installs the replica waiter on the store, and every master wakes its HA writers on dispatch.
- A slave follows the master that the NameServer names in its registration answer (HA address
  for the CommitLog stream, broker address for :class:`~ferrymq.ha.slave_sync.SlaveSynchronize`),
  and copies topic configs, consumer offsets, delay offsets and subscription groups every 10 s
  into the broker's managers (:class:`ManagerSyncTargets`). A master's metadata notices on the HA
  connection make it copy what changed at once (``slave_sync.py``); so do replicated records of
  a topic it does not know yet. A topic gone from the master's configs is deleted on the slave
  with its ConsumeQueues, as on the master, so the slave stops serving it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import ssl
from collections.abc import Callable
from typing import Any

from ferrymq.ha.config import HASettings, Role, ha_config_for
from ferrymq.ha.protocol import MetadataVersions
from ferrymq.ha.service import HAService
from ferrymq.ha.slave_sync import SlaveSynchronize
from ferrymq.ha.store_adapter import CommitLogReplication
from ferrymq.remoting import fastjson
from ferrymq.remoting.bodies import (
    ConsumerOffsetSerializeWrapper,
    DataVersion,
    SubscriptionGroupWrapper,
    TopicConfigSerializeWrapper,
)
from ferrymq.remoting.client import RemotingClient
from ferrymq.store.dispatch import RoundRecords
from ferrymq.store.message_store import MessageStore

log = logging.getLogger(__name__)


class ManagerSyncTargets:
    """Applies what a slave copied to the broker's managers (upstream SlaveSynchronize bodies).

    The managers are the broker's own (TopicConfigManager, ConsumerOffsetManager,
    SubscriptionGroupManager, ScheduleMessageService); their periodic persistence writes the files.
    """

    def __init__(
        self,
        *,
        topics: Any,
        offsets: Any,
        groups: Any,
        schedule: Callable[[], Any],
        on_topics_changed: Callable[[], None],
    ) -> None:
        self._topics = topics
        self._offsets = offsets
        self._groups = groups
        self._schedule = schedule
        self._on_topics_changed = on_topics_changed
        self._saves: set[asyncio.Task[None]] = set()
        # the slave's store (set by BrokerHA): a topic deleted on the master loses its queues here
        self.store: MessageStore | None = None
        self.on_topics_removed: Callable[[list[str]], None] | None = None

    def has_topic(self, topic: str) -> bool:
        return topic in self._topics.table

    def versions(self) -> MetadataVersions:
        """What a master's metadata notices carry (ha/protocol.py)."""
        return MetadataVersions(
            topic_config=self._topics.data_version.counter,
            subscription_group=self._groups.data_version.counter,
            consumer_offset=self._offsets.version,
        )

    def replace_topic_configs(self, wrapper: TopicConfigSerializeWrapper) -> None:
        # Upstream clears and copies: a topic deleted on the master goes from the slave too.
        removed = sorted(set(self._topics.table) - set(wrapper.topic_config_table))
        previous = self._topics.data_version
        self._topics.table.clear()
        self._topics.table.update(wrapper.topic_config_table)
        self._topics.data_version = wrapper.data_version
        if removed:
            self._topics_removed(removed, previous, wrapper.data_version)
        self._on_topics_changed()

    def _topics_removed(
        self, removed: list[str], previous: DataVersion, current: DataVersion
    ) -> None:
        if current == previous:
            # the same version: nothing was deleted on the master; these are topics only this
            # broker's own settings add (a trace topic, TBW102...), of which it has no copies
            log.debug("topics of this broker's settings only: %s", ", ".join(removed))
            return
        if current.counter < previous.counter:
            # A master whose topic config does not continue the one this slave copied last
            # (its counter went back: topics.json lost or replaced) has not *deleted* these
            # topics: keep their queues, still served read-only, which may be the only copy.
            log.error(
                "the master's topic config does not continue the one copied before (version "
                "went back): %d topic(s) it lacks keep their ConsumeQueues here: %s",
                len(removed),
                ", ".join(removed),
            )
            return
        # The slave serves topics from its ConsumeQueues even before their config arrives, so a
        # deleted topic's queues must go too (the master deleted its own), or the slave would
        # keep serving it; its offsets go as on the master.
        for topic in removed:
            self._offsets.remove_topic(topic)
        deleted = self.store.delete_topics(removed) if self.store is not None else 0
        log.warning(
            "topics deleted on the master, deleted here (%d with queues): %s",
            deleted,
            ", ".join(removed),
        )
        if self.on_topics_removed is not None:
            self.on_topics_removed(removed)

    def merge_consumer_offsets(self, wrapper: ConsumerOffsetSerializeWrapper) -> None:
        # putAll, as upstream: the master's progress wins for every queue it knows.
        for key, table in wrapper.offset_table.items():
            self._offsets.offset_table.setdefault(key, {}).update(table)
        self._offsets.dirty = True
        self._offsets.version += 1

    def replace_delay_offsets(self, raw_json: bytes) -> None:
        schedule = self._schedule()
        if schedule is None:
            return
        data = fastjson.loads(raw_json)  # also reads fastjson's unquoted integer keys
        table = data.get("offsetTable", {}) if isinstance(data, dict) else {}
        schedule.offsets = {int(k): int(v) for k, v in table.items()}
        task = asyncio.get_running_loop().create_task(schedule.persist())
        self._saves.add(task)
        task.add_done_callback(self._saves.discard)

    def replace_subscription_groups(self, wrapper: SubscriptionGroupWrapper) -> None:
        self._groups.table.clear()
        self._groups.table.update(wrapper.subscription_group_table)
        self._groups.data_version = wrapper.data_version
        self._groups.dirty = True


class BrokerHA:
    def __init__(
        self,
        *,
        store: MessageStore,
        settings: HASettings,
        role: Role,
        sync_flush_timeout_ms: int,
        bind_host: str,
        advertised_ip: str,
        client: RemotingClient,
        targets: ManagerSyncTargets,
        tls: tuple[ssl.SSLContext, ssl.SSLContext] | None = None,
    ) -> None:
        self.config = ha_config_for(
            settings,
            role=role,
            sync_flush_timeout_ms=sync_flush_timeout_ms,
            listen_host=bind_host,
        )
        if tls is not None:  # (server, client) contexts of the HA link (tls.ha.enable)
            self.config = dataclasses.replace(self.config, server_ssl=tls[0], client_ssl=tls[1])
        self._store = store
        self._targets = targets
        self._advertised_ip = advertised_ip
        # topics seen in replicated records but unknown here, already asked of the master
        self._asked: set[str] = set()
        self.service = HAService(
            self.config, CommitLogReplication.for_store(store), metadata_versions=targets.versions
        )
        self.slave_sync: SlaveSynchronize | None = None
        if role is Role.SLAVE:
            self.slave_sync = SlaveSynchronize(
                client, targets, interval_s=self.config.slave_sync_interval_s
            )
            targets.store = store
            targets.on_topics_removed = self._asked.difference_update
            if self.service.client is not None:
                self.service.client.metadata_listener = self.slave_sync.on_master_versions

    async def start(self) -> None:
        await self.service.start()
        store = self._store
        if self.config.role.is_master:
            store.add_dispatch_round_listener(self.service.notify_new_data)
        if self.config.role is Role.SYNC_MASTER:
            store.set_replica_waiter(self.service.wait_for_replica)
        if self.slave_sync is not None:
            store.add_dispatch_round_listener(self._on_replicated_round)
            self.slave_sync.start()

    def _on_replicated_round(self, records: RoundRecords) -> None:
        """A slave dispatched replicated records: a topic it has no config for was created on
        the master since the last sync, so fetch the topic configs now (once per topic)."""
        if self.slave_sync is None:
            return
        unknown = [t for t in records.topics() if not self._targets.has_topic(t)]
        fresh = [t for t in unknown if t not in self._asked]
        if fresh:
            self._asked.update(fresh)
            self.slave_sync.kick()

    async def shutdown(self) -> None:
        if self.config.role is Role.SYNC_MASTER:
            self._store.set_replica_waiter(None)
        if self.slave_sync is not None:
            await self.slave_sync.shutdown()
        await self.service.shutdown()

    def ha_server_addr(self) -> str | None:
        """What a master registers as haServerAddr (slaves, and a master whose listener is not
        up yet, e.g. in the middle of a promotion, register none)."""
        master = self.service.master
        if not self.config.role.is_master or master is None or not master.listening:
            return None
        return f"{self._advertised_ip}:{self.service.listen_port}"

    def on_register_result(self, ha_server_addr: str | None, master_addr: str | None) -> None:
        """A slave learns (or loses) its master from each registration answer."""
        if self.config.role is not Role.SLAVE:
            return
        # As upstream, a missing master (killed, not yet expired or restarted) leaves the last
        # address in place: the HA client keeps retrying it every 5 s and resumes the moment the
        # master is back, without waiting for the next 30 s registration round.
        if ha_server_addr and self.config.master_ha_address is None:
            self.service.update_master_address(ha_server_addr)
        if master_addr and self.slave_sync is not None:
            self.slave_sync.set_master_addr(master_addr)

    def runtime_info(self) -> dict[str, str]:
        info = self.service.runtime_info()
        if self.slave_sync is not None:
            info["haSlaveSyncMaster"] = self.slave_sync.master_addr or ""
            info["haSlaveSyncRounds"] = str(self.slave_sync.rounds)
            info["haSlaveSyncPrompt"] = str(self.slave_sync.prompt_syncs)
        return info
