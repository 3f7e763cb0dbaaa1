"""The client instance shared by a process's producers and consumers (upstream MQClientInstance).

One instance per client id owns: the connections (one RemotingClient), the NameServer and broker
call wrappers, the route cache, the unique-id generator, and the periodic tasks:

- route refresh of every topic in use, every 30 s (``pollNameServerInterval``);
- heartbeat to every broker, every 30 s (``heartbeatBrokerInterval``) and when a member starts;
- consumer offset persistence, every 5 s (``persistConsumerOffsetInterval``);
- rebalance, every 20 s (``RebalanceService``) and at once on NOTIFY_CONSUMER_IDS_CHANGED.

Producers and consumers register as members (small protocols below); the instance asks them what
to put in a heartbeat and tells them when to rebalance or persist.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import weakref
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Protocol

from ferrymq.client import admin_handlers
from ferrymq.client.broker_api import BrokerApi
from ferrymq.client.credentials import ClientSecurity
from ferrymq.client.errors import ClientStateError, MQClientError, NoRouteError
from ferrymq.client.namesrv_api import NamesrvApi, parse_namesrv_addr
from ferrymq.client.offset_store import PERSIST_CONSUMER_OFFSET_INTERVAL_S
from ferrymq.client.route_cache import RouteCache, TopicPublishInfo, publish_queues
from ferrymq.client.uniq_id import UniqIdGenerator
from ferrymq.remoting import bodies
from ferrymq.remoting.channel import Channel
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.processor import Handler, ProcessorTable
from ferrymq.tasks import Periodic
from ferrymq.topic_validator import AUTO_CREATE_TOPIC_KEY_TOPIC as DEFAULT_TOPIC

log = logging.getLogger(__name__)

# upstream MQClientManager keeps one MQClientInstance per client id in a process; ferrymq builds
# one per member unless shared, so group uniqueness is checked across the live ones of an id
_INSTANCES: weakref.WeakSet[ClientInstance] = weakref.WeakSet()

POLL_NAMESRV_INTERVAL_S = 30.0
HEARTBEAT_BROKER_INTERVAL_S = 30.0
REBALANCE_INTERVAL_S = 20.0
# no shutdown step may hang on a stuck peer
SHUTDOWN_STEP_TIMEOUT_S = 5.0


class ProducerMember(Protocol):
    group: str

    def producer_data(self) -> bodies.ProducerData: ...


class ConsumerMember(Protocol):
    group: str

    def consumer_data(self) -> bodies.ConsumerData: ...

    def subscribed_topics(self) -> list[str]: ...

    async def do_rebalance(self) -> None: ...

    async def persist_offsets(self) -> None: ...

    def running_info(self) -> dict[str, Any]: ...


def local_ip(namesrv_addr: str) -> str:
    """The address this host uses towards the NameServer (a UDP connect sends no packet)."""
    host = namesrv_addr.rpartition(":")[0].strip("[]")
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.connect((host, 9))
            return str(sock.getsockname()[0])
    except OSError:
        return "127.0.0.1"


# upstream FAQUrl.GROUP_NAME_DUPLICATE_URL with FAQUrl.suggestTodo's framing
GROUP_NAME_DUPLICATE_URL = "https://rocketmq.apache.org/docs/bestPractice/06FAQ"


def duplicate_group_message(role: str, group: str) -> str:
    """Upstream's refusal of a second producer or consumer of a group in one client instance
    (DefaultMQPushConsumerImpl/DefaultMQProducerImpl.start), word for word."""
    return (
        f"The {role} group[{group}] has been created before, specify another name please."
        f"\nSee {GROUP_NAME_DUPLICATE_URL} for further details."
    )


class ClientInstance:
    def __init__(
        self,
        namesrv_addr: str | list[str],
        *,
        instance_name: str | None = None,
        timeout: float = 3.0,
        poll_namesrv_interval: float = POLL_NAMESRV_INTERVAL_S,
        heartbeat_interval: float = HEARTBEAT_BROKER_INTERVAL_S,
        persist_offset_interval: float = PERSIST_CONSUMER_OFFSET_INTERVAL_S,
        rebalance_interval: float = REBALANCE_INTERVAL_S,
        security: ClientSecurity | None = None,
    ) -> None:
        self.namesrv_addrs = parse_namesrv_addr(namesrv_addr)
        self.ip = local_ip(self.namesrv_addrs[0])
        # upstream 4.9: a DEFAULT instance name becomes "pid#nanotime", so two clients of one
        # process get distinct ids (each consumer is its own member of the group)
        self.instance_name = instance_name or f"{os.getpid()}#{time.monotonic_ns()}"
        self.client_id = f"{self.ip}@{self.instance_name}"
        self.processors = ProcessorTable()
        # credentials and TLS: given, or from FERRYMQ_ACCESS_KEY/..._SECRET_KEY/..._TLS_* (CLI)
        self.security = security if security is not None else ClientSecurity.from_env()
        self.remoting = RemotingClient(
            self.processors,
            name=f"client {self.client_id}",
            rpc_hook=self.security.rpc_hook(),
            ssl_context=self.security.ssl_context(),
        )
        self.namesrv = NamesrvApi(self.remoting, self.namesrv_addrs, timeout)
        self.broker = BrokerApi(self.remoting, timeout)
        self.routes = RouteCache()
        self.ids = UniqIdGenerator(self.ip)
        self.producers: dict[str, ProducerMember] = {}
        self.consumers: dict[str, ConsumerMember] = {}
        self.intervals = {
            "routes": poll_namesrv_interval,
            "heartbeat": heartbeat_interval,
            "persist": persist_offset_interval,
            "rebalance": rebalance_interval,
        }
        self._loops = [
            self._periodic("routes", self.refresh_all_routes),
            self._periodic("heartbeat", self.send_heartbeat_to_all_brokers),
            self._periodic("persist", self.persist_all_offsets),
        ]
        # also woken by rebalance_immediately()
        self._rebalance = self._periodic("rebalance", self.do_rebalance)
        self._loops.append(self._rebalance)
        self._tasks: set[asyncio.Task[None]] = set()
        self._route_locks: dict[str, asyncio.Lock] = {}
        self._started = False
        self._stopped = False
        _INSTANCES.add(self)
        self.processors.register(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, self._on_ids_changed)
        self.processors.register(RequestCode.GET_CONSUMER_RUNNING_INFO, self._on_running_info)
        self.processors.register(
            RequestCode.RESET_CONSUMER_CLIENT_OFFSET,
            lambda ch, req: admin_handlers.on_reset_offset(self, ch, req),
        )
        self.processors.register(
            RequestCode.GET_CONSUMER_STATUS_FROM_CLIENT,
            lambda ch, req: admin_handlers.on_consumer_status(self, ch, req),
        )
        self.processors.register(
            RequestCode.CONSUME_MESSAGE_DIRECTLY,
            lambda ch, req: admin_handlers.on_consume_directly(self, ch, req),
        )

    # --- lifecycle ------------------------------------------------------------------------------
    async def start(self) -> None:
        if self._stopped:
            raise ClientStateError("client instance already shut down")
        if self._started:
            return
        self._started = True
        for loop in self._loops:
            loop.start()

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def shutdown(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        tasks += [asyncio.ensure_future(loop.stop()) for loop in self._loops]
        await asyncio.wait(tasks, timeout=SHUTDOWN_STEP_TIMEOUT_S)
        self._tasks.clear()
        # a peer that stopped reading keeps our unsent bytes (and the close) pending: bounded
        try:
            await asyncio.wait_for(self.remoting.close(), SHUTDOWN_STEP_TIMEOUT_S)
        except TimeoutError:
            log.warning(
                "%s: connections did not close within %.0fs",
                self.client_id,
                SHUTDOWN_STEP_TIMEOUT_S,
            )

    @property
    def running(self) -> bool:
        return self._started and not self._stopped

    def register_handler(self, code: int, handler: Handler) -> None:
        """For extensions answering other broker->client requests (e.g. CHECK_TRANSACTION_STATE)."""
        self.processors.register(code, handler)

    # --- members --------------------------------------------------------------------------------
    def _same_id(self) -> list[ClientInstance]:
        """This process's live instances with this client id (this one included)."""
        return [i for i in _INSTANCES if i.client_id == self.client_id and not i._stopped]

    def register_producer(self, member: ProducerMember) -> None:
        if any(member.group in i.producers for i in self._same_id()):
            raise MQClientError(duplicate_group_message("producer", member.group))
        self.producers[member.group] = member

    def register_consumer(self, member: ConsumerMember) -> None:
        """Upstream ``MQClientInstance.registerConsumer``: one consumer per group and client id.
        A second one would share the client id the broker relays requests by
        (GET_CONSUMER_RUNNING_INFO, reset offset): one of the two never answers them."""
        if any(member.group in i.consumers for i in self._same_id()):
            raise MQClientError(duplicate_group_message("consumer", member.group))
        self.consumers[member.group] = member

    async def unregister(self, producer_group: str | None, consumer_group: str | None) -> None:
        """Forget a member and tell every broker (UNREGISTER_CLIENT), so a rebalance runs at once."""
        if producer_group:
            self.producers.pop(producer_group, None)
        if consumer_group:
            self.consumers.pop(consumer_group, None)
        for addr in self.routes.all_addrs():
            try:
                await self.broker.unregister_client(
                    addr, self.client_id, producer_group, consumer_group
                )
            except MQClientError as exc:
                log.info("unregister from %s failed: %s", addr, exc)

    # --- periodic work --------------------------------------------------------------------------
    def _periodic(self, name: str, work: Callable[[], Awaitable[None]]) -> Periodic:
        return Periodic(f"{self.client_id} {name}", work, lambda: self.intervals[name])

    async def do_rebalance(self) -> None:
        for member in list(self.consumers.values()):
            try:
                await member.do_rebalance()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("%s: rebalance of group %s failed", self.client_id, member.group)

    def rebalance_immediately(self) -> None:
        self._rebalance.wakeup()

    async def persist_all_offsets(self) -> None:
        for member in list(self.consumers.values()):
            await member.persist_offsets()

    # --- routes ---------------------------------------------------------------------------------
    def topics_in_use(self) -> set[str]:
        topics = set(self.routes.publish)
        for member in self.consumers.values():
            topics.update(member.subscribed_topics())
        return topics

    async def refresh_all_routes(self) -> None:
        for topic in sorted(self.topics_in_use()):
            try:
                await self.update_route(topic)
            except MQClientError as exc:
                log.info("route refresh of %s failed: %s", topic, exc)

    async def update_route(self, topic: str) -> bool:
        """Fetch the topic's route; True when it changed. A topic no NameServer knows keeps its
        cached route (upstream does the same: a NameServer hiccup must not drop a working route)."""
        lock = self._route_locks.setdefault(topic, asyncio.Lock())
        async with lock:
            route = await self.namesrv.get_route(topic)
            if route is None:
                return False
            known = set(self.routes.all_addrs())
            changed = self.routes.update(topic, route)
            if changed and self.running and not set(self.routes.all_addrs()) <= known:
                # a broker we never talked to: introduce ourselves now rather than in up to 30 s
                # (transaction check-backs and consumer lists depend on the broker knowing us)
                self._spawn(self._heartbeat_soon())
            return changed

    async def publish_info(self, topic: str, default_topic_queue_nums: int = 4) -> TopicPublishInfo:
        """The queues to send to (upstream tryToFindTopicPublishInfo).

        Unknown to every NameServer: borrow TBW102's route (brokers with autoCreateTopicEnable
        publish it), capped to ``default_topic_queue_nums`` queues per broker; the broker creates
        the topic on the first send and registers it, and the next refresh finds the real route.
        A topic the NameServers know but with no writable queue (no master registered, as in a
        switchover) is not borrowed for (upstream's ``isHaveTopicRouterInfo``): the send fails
        and its retry finds the new master, instead of creating the topic on other brokers.
        """
        info = self.routes.publish.get(topic)
        if info is not None and info.ok:
            return info
        await self.update_route(topic)
        info = self.routes.publish.get(topic)
        if info is not None and info.ok:
            return info
        if topic in self.routes.routes:
            raise NoRouteError(
                f"no route info of topic {topic!r}: the NameServers list it, but no broker "
                "master with a writable queue of it is registered (a switchover under way?)"
            )
        default = await self.namesrv.get_route(DEFAULT_TOPIC)
        if default is not None:
            for qd in default.queue_datas:
                qd.read_queue_nums = min(default_topic_queue_nums, qd.read_queue_nums)
                qd.write_queue_nums = min(default_topic_queue_nums, qd.write_queue_nums)
            self.routes.brokers.update(
                {b.broker_name: dict(b.broker_addrs) for b in default.broker_datas}
            )
            queues = publish_queues(topic, default)
            if queues:
                info = TopicPublishInfo(topic, queues, default)
                # not stored as the topic's route: the next refresh must fetch the real one
                self.routes.publish[topic] = info
                return info
        raise NoRouteError(
            f"no route info of topic {topic!r} from NameServer {';'.join(self.namesrv_addrs)} "
            "(create it with `ferrymq admin topic create`, or enable autoCreateTopicEnable)"
        )

    def broker_addr(self, broker_name: str, *, master: bool = True) -> str | None:
        return self.routes.master_addr(broker_name) if master else self.routes.any_addr(broker_name)

    async def find_broker_addr(self, broker_name: str, topic: str, *, master: bool = True) -> str:
        addr = self.broker_addr(broker_name, master=master)
        if addr is None:
            await self.update_route(topic)
            addr = self.broker_addr(broker_name, master=master)
        if addr is None:
            raise NoRouteError(f"broker {broker_name!r} of topic {topic!r} has no known address")
        return addr

    async def find_consumer_ids(self, topic: str, group: str) -> list[str]:
        """The group's consumers as one broker of the topic knows them (from heartbeats)."""
        route = self.routes.routes.get(topic)
        names = sorted({qd.broker_name for qd in route.queue_datas}) if route else []
        for name in names:
            addr = self.routes.any_addr(name)
            if addr is None:
                continue
            try:
                return await self.broker.get_consumer_id_list(addr, group)
            except MQClientError as exc:
                log.info("consumer list of %s from %s failed: %s", group, addr, exc)
        return []

    # --- heartbeats -----------------------------------------------------------------------------
    def heartbeat_data(self) -> bodies.HeartbeatData:
        return bodies.HeartbeatData(
            client_id=self.client_id,
            producer_data_set=[p.producer_data() for p in self.producers.values()],
            consumer_data_set=[c.consumer_data() for c in self.consumers.values()],
        )

    async def _heartbeat_soon(self) -> None:
        try:
            await self.send_heartbeat_to_all_brokers()
        except Exception:
            log.exception("%s: heartbeat failed", self.client_id)

    async def send_heartbeat_to_all_brokers(self) -> None:
        data = self.heartbeat_data()
        if not data.producer_data_set and not data.consumer_data_set:
            return
        # producers only need the masters; consumers also pull from slaves
        addrs = (
            self.routes.all_addrs() if data.consumer_data_set else self.routes.all_master_addrs()
        )
        results = await asyncio.gather(
            *(self.broker.heartbeat(addr, data) for addr in addrs), return_exceptions=True
        )
        for addr, result in zip(addrs, results, strict=True):
            if isinstance(result, Exception):
                log.info("heartbeat to %s failed: %s", addr, result)

    # --- broker -> client requests --------------------------------------------------------------
    def _on_ids_changed(self, channel: Channel, request: RemotingCommand) -> None:
        log.info(
            "%s: consumer ids of group %s changed (from %s); rebalancing",
            self.client_id,
            request.ext_fields.get("consumerGroup"),
            channel.remote_addr,
        )
        self.rebalance_immediately()
        return None

    def _on_running_info(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        group = request.ext_fields.get("consumerGroup", "")
        member = self.consumers.get(group)
        if member is None:
            return request.response(
                ResponseCode.SYSTEM_ERROR, f"the consumer group [{group}] not exist in this client"
            )
        from ferrymq.remoting import fastjson

        return request.response(ResponseCode.SUCCESS, body=fastjson.dumps(member.running_info()))
