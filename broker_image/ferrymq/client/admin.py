"""AdminClient: cluster, topic, group and message administration (upstream DefaultMQAdminExt).

Cluster-wide operations fan out the way mqadmin does: a topic is created on the master of every
broker group of a cluster (UPDATE_AND_CREATE_TOPIC; the brokers then register it with every
NameServer), deleted from every master and then from every NameServer; a group's consume stats are
merged from every broker of its retry topic's route (every consumer subscribes to it, so its route
names every broker the group uses).
"""

from __future__ import annotations

from dataclasses import dataclass

from ferrymq.client.allocate import MessageQueue
from ferrymq.client.credentials import ClientSecurity
from ferrymq.client.errors import MQClientError, NoRouteError
from ferrymq.client.instance import ClientInstance
from ferrymq.client.lifecycle import InstanceUser
from ferrymq.client.monitoring_admin import MonitoringAdmin
from ferrymq.client.route_cache import publish_queues, subscribe_queues
from ferrymq.message import MessageExt, decode_message_id
from ferrymq.mixall import MASTER_ID, TOOLS_CONSUMER_GROUP
from ferrymq.remoting import bodies, headers
from ferrymq.topic_validator import RETRY_GROUP_TOPIC_PREFIX


@dataclass(frozen=True, slots=True)
class QueueProgress:
    """One row of ``consumer-progress``: a queue's broker offset, committed offset and lag."""

    queue: MessageQueue
    broker_offset: int
    consumer_offset: int
    last_timestamp: int

    @property
    def diff(self) -> int:
        return max(0, self.broker_offset - self.consumer_offset)


class AdminClient(MonitoringAdmin, InstanceUser):
    role = "admin client"

    def __init__(
        self,
        namesrv_addr: str | list[str] | None = None,
        *,
        instance: ClientInstance | None = None,
        security: ClientSecurity | None = None,
        timeout: float = 5.0,
    ) -> None:
        super().__init__(namesrv_addr, instance, timeout=timeout, security=security)

    async def start(self) -> None:
        await self.instance.start()

    async def shutdown(self) -> None:
        if self._own_instance:
            await self.instance.shutdown()

    # --- cluster --------------------------------------------------------------------------------
    async def cluster_info(self) -> bodies.ClusterInfo:
        return await self.instance.namesrv.get_cluster_info()

    async def master_addrs(self, cluster: str | None = None) -> dict[str, str]:
        """brokerName -> master address, for one cluster (or the only one / all when None)."""
        info = await self.cluster_info()
        if cluster is not None:
            if cluster not in info.cluster_addr_table:
                known = ", ".join(sorted(info.cluster_addr_table)) or "none"
                raise MQClientError(
                    f"cluster {cluster!r} is unknown to the NameServer (known: {known})"
                )
            names = info.cluster_addr_table[cluster]
        else:
            names = list(info.broker_addr_table)
        out: dict[str, str] = {}
        for name in sorted(names):
            data = info.broker_addr_table.get(name)
            if data is not None and MASTER_ID in data.broker_addrs:
                out[name] = data.broker_addrs[MASTER_ID]
        return out

    async def broker_runtime_info(self, addr: str) -> dict[str, str]:
        return await self.instance.broker.get_broker_runtime_info(addr)

    async def broker_config(self, addr: str) -> dict[str, str]:
        return await self.instance.broker.get_broker_config(addr)

    async def update_broker_config(self, addr: str, properties: dict[str, str]) -> None:
        await self.instance.broker.update_broker_config(addr, properties)

    async def wipe_write_perm(self, broker_name: str) -> dict[str, int]:
        """Stop writes to a broker group (before maintenance): the master drops its write
        permission (and keeps it dropped in later registrations) and every NameServer marks its
        queues read-only at once, so producers move away at their next route refresh. Returns
        {address: count} per broker and NameServer."""
        out: dict[str, int] = {}
        master = (await self.master_addrs()).get(broker_name)
        if master is not None:
            out[master] = await self.instance.broker.wipe_write_perm(master)
        out.update(await self.instance.namesrv.wipe_write_perm(broker_name))
        return out

    async def add_write_perm(self, broker_name: str) -> dict[str, int]:
        out: dict[str, int] = {}
        master = (await self.master_addrs()).get(broker_name)
        if master is not None:
            out[master] = await self.instance.broker.add_write_perm(master)
        out.update(await self.instance.namesrv.add_write_perm(broker_name))
        return out

    # --- topics ---------------------------------------------------------------------------------
    async def topic_list(self) -> list[str]:
        return await self.instance.namesrv.get_all_topic_list()

    async def topic_route(self, topic: str) -> bodies.TopicRouteData:
        route = await self.instance.namesrv.get_route(topic)
        if route is None:
            raise NoRouteError(f"topic {topic!r} does not exist on any broker")
        self.instance.routes.update(topic, route)
        return route

    async def create_topic(
        self,
        topic: str,
        *,
        cluster: str | None = None,
        broker_addr: str | None = None,
        read_queue_nums: int = 8,
        write_queue_nums: int = 8,
        perm: int = bodies.PERM_READ | bodies.PERM_WRITE,
        order: bool = False,
        attributes: str | None = None,
    ) -> list[str]:
        """Create (or update) the topic on one broker or on every master of a cluster; returns the
        broker addresses written to. ``attributes``: ``+key=value,-key`` (e.g.
        ``+message.type=FIFO``); None keeps the topic's current attributes."""
        from ferrymq.client.producer import check_topic

        check_topic(topic)
        if read_queue_nums < 1 or write_queue_nums < 1:
            raise MQClientError("read and write queue numbers must be at least 1")
        header = headers.CreateTopicRequestHeader(
            topic=topic,
            read_queue_nums=read_queue_nums,
            write_queue_nums=write_queue_nums,
            perm=perm,
            order=order,
            attributes=attributes,
        )
        addrs = [broker_addr] if broker_addr else list((await self.master_addrs(cluster)).values())
        if not addrs:
            raise MQClientError("no broker master is registered with the NameServer")
        for addr in addrs:
            await self.instance.broker.create_topic(addr, header)
        return addrs

    async def delete_topic(self, topic: str, *, cluster: str | None = None) -> list[str]:
        """DELETE_TOPIC_IN_BROKER on every master of the cluster, then DELETE_TOPIC_IN_NAMESRV."""
        addrs = list((await self.master_addrs(cluster)).values())
        for addr in addrs:
            await self.instance.broker.delete_topic(addr, topic)
        await self.instance.namesrv.delete_topic(topic, cluster)
        self.instance.routes.forget(topic)
        return addrs

    async def topic_config(self, broker_addr: str) -> bodies.TopicConfigSerializeWrapper:
        return await self.instance.broker.get_all_topic_config(broker_addr)

    async def topic_queues(self, topic: str, *, write: bool = False) -> list[MessageQueue]:
        route = await self.topic_route(topic)
        return publish_queues(topic, route) if write else subscribe_queues(topic, route)

    async def _addr(self, mq: MessageQueue) -> str:
        return await self.instance.find_broker_addr(mq.broker_name, mq.topic, master=False)

    async def max_offset(self, mq: MessageQueue) -> int:
        return await self.instance.broker.get_max_offset(await self._addr(mq), mq)

    async def min_offset(self, mq: MessageQueue) -> int:
        return await self.instance.broker.get_min_offset(await self._addr(mq), mq)

    async def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        return await self.instance.broker.search_offset(await self._addr(mq), mq, timestamp_ms)

    async def earliest_msg_store_time(self, mq: MessageQueue) -> int:
        return await self.instance.broker.get_earliest_msg_storetime(await self._addr(mq), mq)

    async def store_time_at(self, mq: MessageQueue, offset: int) -> int | None:
        """Store time (ms) of the message at ``offset`` of ``mq``, or None when none is there.

        One pull of one message with no commit, no suspension and no filter, as upstream's tools
        read a message by queue offset: the time lag of a consumer at ``offset`` is now minus this.
        """
        header = headers.PullMessageRequestHeader(
            consumer_group=TOOLS_CONSUMER_GROUP,
            topic=mq.topic,
            queue_id=mq.queue_id,
            queue_offset=offset,
            max_msg_nums=1,
            # the subscription travels with the pull: the tools group has no registered one
            sys_flag=headers.PULL_FLAG_SUBSCRIPTION,
            subscription="*",
        )
        result = await self.instance.broker.pull_message(
            await self._addr(mq), header, self.instance.broker.timeout
        )
        for msg in result.messages:
            if msg.queue_offset == offset:
                return msg.store_timestamp
        return None

    # --- groups ---------------------------------------------------------------------------------
    async def create_subscription_group(
        self,
        config: bodies.SubscriptionGroupConfig,
        *,
        cluster: str | None = None,
        broker_addr: str | None = None,
    ) -> list[str]:
        addrs = [broker_addr] if broker_addr else list((await self.master_addrs(cluster)).values())
        for addr in addrs:
            await self.instance.broker.create_subscription_group(addr, config)
        return addrs

    async def all_consumer_offsets(self, broker_addr: str) -> bodies.ConsumerOffsetSerializeWrapper:
        return await self.instance.broker.get_all_consumer_offset(broker_addr)

    async def _group_broker_addrs(self, group: str, topic: str | None) -> list[str]:
        """Masters of the brokers of the group's retry topic route (or of ``topic``)."""
        routes = []
        for name in ([topic] if topic else []) + [RETRY_GROUP_TOPIC_PREFIX + group]:
            route = await self.instance.namesrv.get_route(name)
            if route is not None:
                routes.append(route)
        addrs = {
            bd.broker_addrs[MASTER_ID]
            for route in routes
            for bd in route.broker_datas
            if MASTER_ID in bd.broker_addrs
        }
        if not addrs:
            # the group never consumed (no retry topic yet): ask every master
            addrs = set((await self.master_addrs()).values())
        return sorted(addrs)

    async def consumer_connection(self, group: str) -> bodies.ConsumerConnection:
        errors: list[str] = []
        for addr in await self._group_broker_addrs(group, None):
            try:
                conn = await self.instance.broker.get_consumer_connection_list(addr, group)
            except MQClientError as exc:
                errors.append(str(exc))
                continue
            if conn.connection_set:
                return conn
        raise MQClientError(
            f"consumer group {group!r} is not online"
            + (f" ({'; '.join(errors)})" if errors else "")
        )

    async def consume_stats(self, group: str, topic: str | None = None) -> bodies.ConsumeStats:
        merged = bodies.ConsumeStats()
        for addr in await self._group_broker_addrs(group, topic):
            stats = await self.instance.broker.get_consume_stats(addr, group, topic)
            merged.offset_table.update(stats.offset_table)
            merged.consume_tps += stats.consume_tps
        return merged

    async def consumer_progress(self, group: str, topic: str | None = None) -> list[QueueProgress]:
        """mqadmin consumerProgress: per queue broker offset, committed offset, diff, last time."""
        stats = await self.consume_stats(group, topic)
        rows = [
            QueueProgress(
                MessageQueue(mq.topic, mq.broker_name, mq.queue_id),
                w.broker_offset,
                w.consumer_offset,
                w.last_timestamp,
            )
            for mq, w in stats.offset_table.items()
        ]
        return sorted(rows, key=lambda r: r.queue)

    # --- messages -------------------------------------------------------------------------------
    async def query_message_by_key(
        self, topic: str, key: str, max_num: int = 64, begin_ms: int = 0, end_ms: int = 2**63 - 1
    ) -> list[MessageExt]:
        """Messages with ``key`` in KEYS (or as UNIQ_KEY), from every broker of the topic."""
        route = await self.topic_route(topic)
        found: dict[str, MessageExt] = {}
        for bd in route.broker_datas:
            addr = bd.broker_addrs.get(MASTER_ID) or next(iter(bd.broker_addrs.values()), None)
            if addr is None:
                continue
            for msg in await self.instance.broker.query_message(
                addr, topic, key, max_num, begin_ms, end_ms
            ):
                found[msg.offset_msg_id] = msg
        return sorted(found.values(), key=lambda m: (m.store_timestamp, m.offset_msg_id))

    async def view_message(self, msg_id: str, topic: str | None = None) -> MessageExt:
        """By offset msgId (store host + CommitLog offset); with ``topic``, a client UNIQ_KEY too."""
        try:
            host, port, offset = decode_message_id(msg_id)
        except ValueError:
            host, port, offset = "", 0, -1
        if offset >= 0 and host not in ("", "0.0.0.0"):
            try:
                return await self.instance.broker.view_message(f"{host}:{port}", offset)
            except MQClientError:
                if topic is None:
                    raise
        if topic is None:
            raise MQClientError(
                f"{msg_id!r} is not a broker message id; give the topic to look it up as a client id"
            )
        for msg in await self.query_message_by_key(topic, msg_id):
            if msg.uniq_key == msg_id or msg.offset_msg_id == msg_id:
                return msg
        raise MQClientError(f"message {msg_id!r} not found in topic {topic!r}")


def queue_label(mq: MessageQueue) -> str:
    return f"{mq.broker_name}:{mq.queue_id}"
