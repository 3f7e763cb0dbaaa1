"""RouteTable: every NameServer route table in one object (upstream RouteInfoManager).

Tables (seeds-digest NS2): ``topic_queue_table`` topic -> brokerName -> QueueData;
``broker_addr_table`` brokerName -> BrokerData; ``cluster_addr_table`` cluster -> brokerNames;
``broker_live_table`` brokerAddr -> BrokerLiveInfo (replaced on each registration);
``filter_server_table`` brokerAddr -> filter server addresses.

All methods are synchronous and take the current time as an argument, so every decision (what a
registration changes, what expires, what a route looks like) is testable without sockets or clocks.
The NameServer runs on one event loop, so no lock is needed: a method runs to completion.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ferrymq.mixall import MASTER_ID
from ferrymq.remoting.bodies import (
    PERM_WRITE,
    BrokerData,
    ClusterInfo,
    DataVersion,
    QueueData,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicList,
    TopicRouteData,
)


@dataclass(slots=True)
class BrokerLiveInfo:
    last_update_timestamp: int
    data_version: DataVersion
    ha_server_addr: str | None
    # the connection the broker registered on (closed on expiry); opaque to the table
    channel: Any = None


@dataclass(slots=True)
class RegisterResult:
    ha_server_addr: str | None = None
    master_addr: str | None = None
    # set when the registration was ignored: another address holds the id with a newer master
    # epoch (upstream "Registered Broker conflicts with the existed one, just ignore")
    conflict: str | None = None


@dataclass(slots=True)
class RemovedBroker:
    """What an expiry or an unregistration removed (for the log line)."""

    broker_addr: str
    broker_name: str | None
    cluster: str | None
    topics_removed: list[str] = field(default_factory=list)


class RouteTable:
    def __init__(self) -> None:
        self.topic_queue_table: dict[str, dict[str, QueueData]] = {}
        self.broker_addr_table: dict[str, BrokerData] = {}
        self.cluster_addr_table: dict[str, set[str]] = {}
        self.broker_live_table: dict[str, BrokerLiveInfo] = {}
        self.filter_server_table: dict[str, list[str]] = {}

    # --- registration -------------------------------------------------------------------------
    def registration_refusal(
        self, *, broker_name: str, broker_addr: str, broker_id: int, broker_role: str | None
    ) -> str | None:
        """Why a registration must be refused to keep routes whole, or None. Pure (reads only).

        brokerId 0 is the master's entry: a broker that says it is a SLAVE cannot take it, least
        of all from a live master at another address (clients would send to a slave).
        """
        if broker_role != "SLAVE" or broker_id != MASTER_ID:
            return None
        data = self.broker_addr_table.get(broker_name)
        master = data.broker_addrs.get(MASTER_ID) if data is not None else None
        if master is not None and master != broker_addr and master in self.broker_live_table:
            return (
                f"{broker_addr} registers as brokerId 0 of {broker_name} with brokerRole=SLAVE: "
                f"refused, it would replace the live master {master}; a slave needs brokerId >= 1"
            )
        return (
            f"{broker_addr} registers as brokerId 0 of {broker_name} with brokerRole=SLAVE: "
            "refused, brokerId 0 is the master's; a slave needs brokerId >= 1"
        )

    def register_broker(
        self,
        *,
        cluster_name: str,
        broker_addr: str,
        broker_name: str,
        broker_id: int,
        ha_server_addr: str | None,
        topic_config_wrapper: TopicConfigSerializeWrapper | None,
        filter_server_list: Iterable[str],
        now_ms: int,
        channel: Any = None,
    ) -> RegisterResult:
        conflict = self.stale_registration(
            broker_name=broker_name,
            broker_addr=broker_addr,
            broker_id=broker_id,
            state_version=topic_config_wrapper.data_version.state_version
            if topic_config_wrapper is not None
            else 0,
        )
        if conflict is not None:
            # the stale registrant's own entry goes too (upstream removes its live info): it
            # registers again with its new role, and expiry must not be fooled meanwhile
            self.broker_live_table.pop(broker_addr, None)
            return RegisterResult(conflict=conflict)
        self.cluster_addr_table.setdefault(cluster_name, set()).add(broker_name)

        broker_data = self.broker_addr_table.get(broker_name)
        register_first = broker_data is None
        if broker_data is None:
            broker_data = BrokerData(cluster=cluster_name, broker_name=broker_name)
            self.broker_addr_table[broker_name] = broker_data
        broker_data.cluster = cluster_name
        # the same address under another id means a role switch (slave became master): drop the old id
        for bid, addr in list(broker_data.broker_addrs.items()):
            if addr == broker_addr and bid != broker_id:
                del broker_data.broker_addrs[bid]
        old_addr = broker_data.broker_addrs.get(broker_id)
        broker_data.broker_addrs[broker_id] = broker_addr
        register_first = register_first or old_addr is None

        if topic_config_wrapper is not None and broker_id == MASTER_ID:
            live = self.broker_live_table.get(broker_addr)
            changed = live is None or live.data_version != topic_config_wrapper.data_version
            if changed or register_first:
                self._apply_topic_configs(broker_name, topic_config_wrapper.topic_config_table)

        version = topic_config_wrapper.data_version if topic_config_wrapper else DataVersion()
        self.broker_live_table[broker_addr] = BrokerLiveInfo(
            last_update_timestamp=now_ms,
            data_version=version,
            ha_server_addr=ha_server_addr,
            channel=channel,
        )
        filters = list(filter_server_list)
        if filters:
            self.filter_server_table[broker_addr] = filters
        else:
            self.filter_server_table.pop(broker_addr, None)

        result = RegisterResult()
        if broker_id != MASTER_ID:
            master_addr = broker_data.broker_addrs.get(MASTER_ID)
            if master_addr is not None:
                master_live = self.broker_live_table.get(master_addr)
                if master_live is not None:
                    result.ha_server_addr = master_live.ha_server_addr
                    result.master_addr = master_addr
        return result

    def stale_registration(
        self, *, broker_name: str, broker_addr: str, broker_id: int, state_version: int
    ) -> str | None:
        """Why a registration is older than the entry it would replace, or None (pure).

        Upstream 5.x ``RouteInfoManager.registerBroker``: a live broker at another address holds
        this brokerId with a higher ``DataVersion.stateVersion`` (a controller-mode broker's
        master epoch). Without this, a master cut off and replaced re-registers as brokerId 0
        before it learns of its successor, overwrites the new master's entry, and its next
        registration as a slave removes brokerId 0 altogether: no master in the route for up to
        a registration period (issue 34).
        """
        data = self.broker_addr_table.get(broker_name)
        holder = data.broker_addrs.get(broker_id) if data is not None else None
        if holder is None or holder == broker_addr:
            return None
        live = self.broker_live_table.get(holder)
        if live is None or live.data_version.state_version <= state_version:
            return None
        return (
            f"{broker_addr} registers as brokerId {broker_id} of {broker_name} with master epoch "
            f"{state_version}, older than that of {holder} ({live.data_version.state_version}): "
            "ignored"
        )

    def _apply_topic_configs(self, broker_name: str, table: dict[str, TopicConfig]) -> None:
        for name, config in table.items():
            self.topic_queue_table.setdefault(name, {})[broker_name] = QueueData(
                broker_name=broker_name,
                read_queue_nums=config.read_queue_nums,
                write_queue_nums=config.write_queue_nums,
                perm=config.perm,
                topic_sys_flag=config.topic_sys_flag,
            )
        # a full registration is the broker's whole topic set: topics it no longer has go away
        for topic in list(self.topic_queue_table):
            if topic not in table:
                self._remove_queue(topic, broker_name)

    def _remove_queue(self, topic: str, broker_name: str) -> bool:
        queues = self.topic_queue_table.get(topic)
        if queues is None or broker_name not in queues:
            return False
        del queues[broker_name]
        if not queues:
            del self.topic_queue_table[topic]
        return True

    def is_broker_topic_config_changed(self, broker_addr: str, version: DataVersion) -> bool:
        live = self.broker_live_table.get(broker_addr)
        return live is None or live.data_version != version

    # --- removal ------------------------------------------------------------------------------
    def unregister_broker(
        self, *, cluster_name: str, broker_addr: str, broker_name: str, broker_id: int
    ) -> RemovedBroker:
        self.broker_live_table.pop(broker_addr, None)
        self.filter_server_table.pop(broker_addr, None)
        removed = RemovedBroker(broker_addr=broker_addr, broker_name=broker_name, cluster=None)
        broker_data = self.broker_addr_table.get(broker_name)
        if broker_data is not None and broker_data.broker_addrs.get(broker_id) == broker_addr:
            del broker_data.broker_addrs[broker_id]
        if broker_data is not None and not broker_data.broker_addrs:
            del self.broker_addr_table[broker_name]
            removed.cluster = cluster_name
            names = self.cluster_addr_table.get(cluster_name)
            if names is not None:
                names.discard(broker_name)
                if not names:
                    del self.cluster_addr_table[cluster_name]
            removed.topics_removed = self._remove_topics_of(broker_name)
        return removed

    def _remove_topics_of(self, broker_name: str) -> list[str]:
        return [t for t in list(self.topic_queue_table) if self._remove_queue(t, broker_name)]

    def remove_broker_addr(self, broker_addr: str) -> RemovedBroker | None:
        """Forget an address wherever it appears (expiry, or its connection closed)."""
        self.broker_live_table.pop(broker_addr, None)
        self.filter_server_table.pop(broker_addr, None)
        for broker_name, data in list(self.broker_addr_table.items()):
            for bid, addr in list(data.broker_addrs.items()):
                if addr == broker_addr:
                    return self.unregister_broker(
                        cluster_name=data.cluster,
                        broker_addr=broker_addr,
                        broker_name=broker_name,
                        broker_id=bid,
                    )
        return None

    def expired_brokers(self, now_ms: int, expire_ms: int) -> list[str]:
        """Addresses whose last registration is older than ``expire_ms`` (pure: removes nothing)."""
        return [
            addr
            for addr, live in self.broker_live_table.items()
            if live.last_update_timestamp + expire_ms < now_ms
        ]

    def broker_addr_of_channel(self, channel: Any) -> str | None:
        for addr, live in self.broker_live_table.items():
            if live.channel is channel:
                return addr
        return None

    # --- queries ------------------------------------------------------------------------------
    def pickup_topic_route_data(self, topic: str) -> TopicRouteData | None:
        queues = self.topic_queue_table.get(topic)
        if not queues:
            return None
        broker_datas: list[BrokerData] = []
        filters: dict[str, list[str]] = {}
        for broker_name in sorted(queues):
            data = self.broker_addr_table.get(broker_name)
            if data is None:
                continue
            broker_datas.append(data.model_copy(deep=True))
            for addr in data.broker_addrs.values():
                if addr in self.filter_server_table:
                    filters[addr] = list(self.filter_server_table[addr])
        if not broker_datas:
            return None
        return TopicRouteData(
            queue_datas=[queues[name].model_copy() for name in sorted(queues)],
            broker_datas=broker_datas,
            filter_server_table=filters,
        )

    def cluster_info(self) -> ClusterInfo:
        return ClusterInfo(
            broker_addr_table={
                k: v.model_copy(deep=True) for k, v in self.broker_addr_table.items()
            },
            cluster_addr_table={k: sorted(v) for k, v in self.cluster_addr_table.items()},
        )

    def all_topics(self) -> TopicList:
        return TopicList(topic_list=sorted(self.topic_queue_table))

    def topics_by_cluster(self, cluster: str) -> TopicList:
        names = self.cluster_addr_table.get(cluster, set())
        topics = [t for t, q in self.topic_queue_table.items() if names.intersection(q)]
        return TopicList(topic_list=sorted(topics))

    def delete_topic(self, topic: str, cluster: str | None = None) -> bool:
        if cluster is None:
            return self.topic_queue_table.pop(topic, None) is not None
        names = self.cluster_addr_table.get(cluster, set())
        return any([self._remove_queue(topic, name) for name in sorted(names)])

    # --- permissions --------------------------------------------------------------------------
    def wipe_write_perm_of_broker(self, broker_name: str) -> int:
        """Clear the write bit of every queue of ``broker_name``; returns how many topics changed."""
        return self._update_perm(broker_name, lambda perm: perm & ~PERM_WRITE)

    def add_write_perm_of_broker(self, broker_name: str) -> int:
        return self._update_perm(broker_name, lambda perm: perm | PERM_WRITE)

    def _update_perm(self, broker_name: str, change: Any) -> int:
        count = 0
        for queues in self.topic_queue_table.values():
            data = queues.get(broker_name)
            if data is not None:
                data.perm = change(data.perm)
                count += 1
        return count
