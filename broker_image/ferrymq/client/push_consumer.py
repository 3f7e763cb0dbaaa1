"""PushConsumer: a listener called with messages as they arrive (upstream DefaultMQPushConsumer).

"Push" is pulling in a loop (seeds-digest CO3): this class only wires the parts together --
subscriptions, :class:`Rebalance` (which queues we own), :class:`PullService` (a long-poll loop per
owned queue), :class:`ProcessQueue` (in-flight messages, flow control), :class:`ConsumeService`
(the listener, send-back of failures) and :class:`OffsetStore` (progress: broker for clustering,
local file for broadcasting; persisted every 5 s and on shutdown).

Clustering consumers also subscribe to ``%RETRY%<group>`` so messages that failed come back.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
from pathlib import Path
from typing import Any

from ferrymq.client import running_info
from ferrymq.client.allocate import MessageQueue, strategy_name
from ferrymq.client.consume_service import (
    ConsumeContext,
    ConsumeService,
    ConsumeStatus,
    Listener,
    result_status,
)
from ferrymq.client.credentials import ClientSecurity
from ferrymq.client.errors import ClientStateError, MQClientError
from ferrymq.client.instance import ClientInstance
from ferrymq.client.lifecycle import ClientMember
from ferrymq.client.local_offset_store import default_offsets_dir
from ferrymq.client.offset_store import BrokerOffsetBackend, LocalFileBackend, OffsetStore
from ferrymq.client.process_queue import FlowLimits, ProcessQueue
from ferrymq.client.pull_service import PullConfig, PullService
from ferrymq.client.rebalance import Rebalance, RebalanceConfig
from ferrymq.message import MessageExt, java_string_hash
from ferrymq.mixall import DEFAULT_MAX_RECONSUME_TIMES
from ferrymq.remoting import bodies
from ferrymq.remoting.bodies import ConsumeFromWhere, MessageModel
from ferrymq.tasks import cancel_and_wait
from ferrymq.topic_validator import RETRY_GROUP_TOPIC_PREFIX

log = logging.getLogger(__name__)


def build_subscription(
    topic: str, expression: str | None, expression_type: str = "TAG"
) -> bodies.SubscriptionData:
    """Upstream FilterAPI.buildSubscriptionData: ``"*"``, or tags joined by ``||``."""
    expr = (expression or "*").strip() or "*"
    sub = bodies.SubscriptionData(
        topic=topic,
        sub_string=expr,
        sub_version=time.time_ns() // 1000,
        expression_type=expression_type,
    )
    if expression_type.upper() == "TAG" and expr != "*":
        tags = [t.strip() for t in expr.split("||") if t.strip()]
        if not tags:
            raise ValueError(f"subscription expression {expression!r} names no tag")
        sub.tags_set = tags
        sub.code_set = [java_string_hash(t) for t in tags]
    return sub


def parse_consume_timestamp(text: str) -> int:
    """``yyyyMMddHHmmss`` (upstream consumeTimestamp, local time) -> epoch milliseconds."""
    import datetime as dt

    try:
        parsed = dt.datetime.strptime(text, "%Y%m%d%H%M%S")
    except ValueError:
        raise ValueError(f"consume_timestamp {text!r} is not yyyyMMddHHmmss") from None
    return int(parsed.timestamp() * 1000)


class _Host:
    """The RebalanceHost view of a client instance."""

    def __init__(self, instance: ClientInstance) -> None:
        self.instance = instance
        self.client_id = instance.client_id

    def subscribe_queues(self, topic: str) -> list[MessageQueue]:
        return self.instance.routes.subscribe.get(topic, [])

    async def find_consumer_ids(self, topic: str, group: str) -> list[str]:
        return await self.instance.find_consumer_ids(topic, group)

    async def max_offset(self, mq: MessageQueue) -> int:
        addr = await self.instance.find_broker_addr(mq.broker_name, mq.topic, master=False)
        return await self.instance.broker.get_max_offset(addr, mq)

    async def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        addr = await self.instance.find_broker_addr(mq.broker_name, mq.topic, master=False)
        return await self.instance.broker.search_offset(addr, mq, timestamp_ms)


class PushConsumer(ClientMember):
    role = "consumer"

    def __init__(
        self,
        group: str,
        namesrv_addr: str | list[str] | None = None,
        *,
        instance: ClientInstance | None = None,
        security: ClientSecurity | None = None,
        message_model: MessageModel = MessageModel.CLUSTERING,
        consume_from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
        consume_timestamp: str | None = None,
        allocate_strategy: str = "AVG",
        consume_thread_max: int = 20,
        consume_batch_max_size: int = 1,
        pull_batch_size: int = 32,
        pull_interval: float = 0.0,
        suspend_timeout: float = 15.0,
        flow_limits: FlowLimits | None = None,
        max_reconsume_times: int = DEFAULT_MAX_RECONSUME_TIMES,
        run_sync_listener_in_thread: bool = True,
        offsets_dir: Path | None = None,
    ) -> None:
        super().__init__(group, namesrv_addr, instance, security)
        self.message_model = message_model
        self.consume_from_where = consume_from_where
        self.consume_timestamp_ms = (
            parse_consume_timestamp(consume_timestamp)
            if consume_timestamp
            else int((time.time() - 30 * 60) * 1000)  # upstream default: half an hour ago
        )
        self.allocate_strategy = strategy_name(allocate_strategy)
        self.consume_thread_max = consume_thread_max
        self.consume_batch_max_size = consume_batch_max_size
        self.max_reconsume_times = max_reconsume_times
        self.run_sync_listener_in_thread = run_sync_listener_in_thread
        self.pull_config = PullConfig(
            group=group,
            clustering=message_model is MessageModel.CLUSTERING,
            pull_batch_size=pull_batch_size,
            pull_interval_s=pull_interval,
            suspend_s=suspend_timeout,
            limits=flow_limits or FlowLimits(),
        )
        self.offsets_dir = offsets_dir
        self.subscriptions: dict[str, bodies.SubscriptionData] = {}
        self.listener: Listener | None = None
        self._route_watch: asyncio.Task[None] | None = None
        self.offset_store: OffsetStore | None = None
        self.rebalance: Rebalance | None = None
        self.pull_service: PullService | None = None
        self.consume_service: ConsumeService | None = None

    @property
    def clustering(self) -> bool:
        return self.message_model is MessageModel.CLUSTERING

    # --- configuration before start ----------------------------------------------------------------
    def subscribe(self, topic: str, expression: str = "*", expression_type: str = "TAG") -> None:
        """``expression_type`` "SQL92" takes a property filter (the broker needs
        enablePropertyFilter=true); a bad one raises FilterCompileError (a ValueError) here."""
        from ferrymq.client.producer import check_topic

        check_topic(topic)
        kind = expression_type.strip().upper()
        if kind == "SQL92":
            from ferrymq.filter import compile_sql92

            compile_sql92(expression)
        elif kind != "TAG":
            raise ValueError(f"expression type {expression_type!r} is not TAG or SQL92")
        self.subscriptions[topic] = build_subscription(topic, expression, kind)
        if self.rebalance is not None:
            self.rebalance.topics = list(self.subscriptions)

    def unsubscribe(self, topic: str) -> None:
        self.subscriptions.pop(topic, None)
        if self.rebalance is not None:
            self.rebalance.topics = list(self.subscriptions)

    def register_listener(self, listener: Listener) -> None:
        """``listener(msgs, context)`` returns ConsumeStatus, True/None (success) or False; it may
        be ``async def``."""
        self.listener = listener

    # --- lifecycle ------------------------------------------------------------------------------
    async def start(self) -> None:
        self._check_created()
        if self.listener is None:
            raise ClientStateError("register a listener before starting the consumer")
        if not self.subscriptions:
            raise ClientStateError("subscribe to at least one topic before starting the consumer")
        if self.clustering:
            retry_topic = RETRY_GROUP_TOPIC_PREFIX + self.group
            self.subscriptions.setdefault(retry_topic, build_subscription(retry_topic, "*"))
            self.offset_store = OffsetStore(BrokerOffsetBackend(self.instance, self.group))
        else:
            # upstream rocketmq.client.localOffsetStoreDir default, overridable for tests and pods
            directory = self.offsets_dir or default_offsets_dir()
            self.offset_store = OffsetStore(
                LocalFileBackend(directory, self.instance.client_id, self.group)
            )
        self.consume_service = ConsumeService(
            self.listener,
            self.group,
            self.offset_store,
            self._send_back if self.clustering else None,
            clustering=self.clustering,
            consume_batch_max_size=self.consume_batch_max_size,
            consume_thread_max=self.consume_thread_max,
            run_sync_in_thread=self.run_sync_listener_in_thread,
        )
        self.pull_service = PullService(
            self.pull_config,
            self.instance,
            self.offset_store,
            self.subscriptions.get,
            self.consume_service.submit,
        )
        self.rebalance = Rebalance(
            RebalanceConfig(
                group=self.group,
                clustering=self.clustering,
                strategy=self.allocate_strategy,
                consume_from_where=self.consume_from_where,
                consume_timestamp_ms=self.consume_timestamp_ms,
            ),
            _Host(self.instance),
            self.offset_store,
            self.pull_service.start_queue,
            self._on_queue_removed,
        )
        self.rebalance.topics = list(self.subscriptions)
        self.customize_services()
        self.instance.register_consumer(self)
        self.consume_service.start()
        await self.instance.start()
        self._state = "running"
        self.start_timestamp_ms = int(time.time() * 1000)
        for topic in self.subscriptions:
            try:
                await self.instance.update_route(topic)
            except MQClientError as exc:
                log.warning("route of %s unavailable at start: %s", topic, exc)
        if not any(
            self.instance.routes.subscribe.get(t)
            for t in self.subscriptions
            if not t.startswith("%")
        ):
            log.warning(
                "%s: no subscribed topic has a route yet; retrying every rebalance", self.group
            )
        await self.instance.send_heartbeat_to_all_brokers()
        await self.do_rebalance()
        missing = [t for t in self.subscriptions if not self.instance.routes.subscribe.get(t)]
        if missing:
            self._route_watch = asyncio.create_task(self._await_routes(missing))

    async def _await_routes(self, topics: list[str], within_s: float = 15.0) -> None:
        """Fetch routes that did not exist at start (the broker creates the group's retry topic on
        our first heartbeat and registers it moments later) promptly, not at the 30 s route poll,
        so none of their queues sits unowned meanwhile; rebalance as soon as one appears."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within_s
        pending = set(topics)
        while pending and self._state == "running" and loop.time() < deadline:
            await asyncio.sleep(0.5)
            found = False
            for topic in sorted(pending):
                with contextlib.suppress(MQClientError):
                    await self.instance.update_route(topic)
                if self.instance.routes.subscribe.get(topic):
                    pending.discard(topic)
                    found = True
            if found:
                self.instance.rebalance_immediately()

    async def _stop_parts(self) -> None:
        await cancel_and_wait(self._route_watch)
        assert self.pull_service and self.consume_service and self.rebalance and self.offset_store
        await self.rebalance.stop()
        await self.pull_service.shutdown()
        await self.consume_service.shutdown()
        await self.persist_offsets()
        for pq in self.rebalance.process_queues.values():
            pq.dropped = True

    async def _unregister(self) -> None:
        await self.instance.unregister(None, self.group)

    def customize_services(self) -> None:
        """Hook for variants (orderly consumption) to swap parts after they are built, before
        anything runs; the plain push consumer keeps them."""

    # --- ConsumerMember -----------------------------------------------------------------------------
    def consumer_data(self) -> bodies.ConsumerData:
        return bodies.ConsumerData(
            group_name=self.group,
            consume_type=bodies.ConsumeType.CONSUME_PASSIVELY,
            message_model=self.message_model,
            consume_from_where=self.consume_from_where,
            subscription_data_set=list(self.subscriptions.values()),
        )

    def subscribed_topics(self) -> list[str]:
        return list(self.subscriptions)

    async def do_rebalance(self) -> None:
        if self.rebalance is None or self._state != "running":
            return
        await self.rebalance.do_rebalance()

    async def persist_offsets(self) -> None:
        if self.offset_store is None or self.rebalance is None:
            return
        try:
            await self.offset_store.persist_all(list(self.rebalance.process_queues))
        except MQClientError as exc:
            log.warning("%s: persisting offsets failed: %s", self.group, exc)

    def owned_queues(self) -> list[MessageQueue]:
        return sorted(self.rebalance.process_queues) if self.rebalance else []

    def running_info(self) -> dict[str, Any]:
        """GET_CONSUMER_RUNNING_INFO body (upstream ConsumerRunningInfo, the parts ferrymq has;
        statusTable stays empty: the client measures no pull/consume RT or TPS)."""
        from ferrymq.remoting.fastjson import ObjectKey

        now_mono, now_ms = running_info.now_pair()

        def wall(mono: float) -> int:
            return running_info.wall_clock_ms(mono, now_monotonic=now_mono, now_ms=now_ms)

        mq_table: dict[Any, Any] = {}
        if self.rebalance is not None and self.offset_store is not None:
            for mq, pq in sorted(self.rebalance.process_queues.items()):
                key = ObjectKey(
                    (("brokerName", mq.broker_name), ("queueId", mq.queue_id), ("topic", mq.topic))
                )
                offsets = list(pq.messages)
                locked, last_lock = self.queue_lock_state(mq)
                mq_table[key] = {
                    "commitOffset": self.offset_store.offsets.get(mq, -1),
                    "cachedMsgMinOffset": offsets[0] if offsets else 0,
                    "cachedMsgMaxOffset": offsets[-1] if offsets else 0,
                    "cachedMsgCount": pq.msg_count,
                    "cachedMsgSizeInMiB": pq.msg_size // (1024 * 1024),
                    "transactionMsgMinOffset": 0,
                    "transactionMsgMaxOffset": 0,
                    "transactionMsgCount": 0,
                    "locked": locked,
                    "tryUnlockTimes": 0,
                    "lastLockTimestamp": wall(last_lock),
                    "droped": pq.dropped,
                    "lastPullTimestamp": wall(pq.last_pull_monotonic),
                    "lastConsumeTimestamp": wall(pq.last_consume_monotonic),
                }
        return {
            "properties": running_info.consumer_properties(
                consume_type="CONSUME_PASSIVELY",
                namesrv_addrs=self.instance.namesrv_addrs,
                start_timestamp_ms=self.start_timestamp_ms,
                orderly=self.consume_orderly,
                thread_core_size=self.consume_thread_max,
                fields={
                    "consumerGroup": self.group,
                    "messageModel": self.message_model.value,
                    "consumeFromWhere": self.consume_from_where.value,
                    "allocateMessageQueueStrategy": self.allocate_strategy,
                    "consumeThreadMax": self.consume_thread_max,
                    "consumeMessageBatchMaxSize": self.consume_batch_max_size,
                    "maxReconsumeTimes": self.max_reconsume_times,
                    "pullBatchSize": self.pull_config.pull_batch_size,
                },
            ),
            "subscriptionSet": [s.to_json_obj() for s in self.subscriptions.values()],
            "mqTable": mq_table,
            "statusTable": {},
        }

    # whether this consumer consumes orderly (PROP_CONSUMEORDERLY); OrderlyPushConsumer: True
    consume_orderly = False

    def queue_lock_state(self, mq: MessageQueue) -> tuple[bool, float]:
        """(locked, monotonic time of the last lock) of a queue: only orderly consumers lock."""
        return False, 0.0

    # --- admin relays (RESET_CONSUMER_CLIENT_OFFSET, GET_CONSUMER_STATUS_FROM_CLIENT) ----------
    async def reset_offset(self, topic: str, offsets: dict[MessageQueue, int]) -> None:
        """Upstream resetOffset: drop the queues' in-flight messages, store the new offsets on
        the broker, then rebalance so the queues start again from there."""
        if self.rebalance is None or self.offset_store is None or self.pull_service is None:
            return
        for mq, offset in offsets.items():
            if mq.topic != topic:
                continue
            pq = self.rebalance.process_queues.pop(mq, None)
            if pq is not None:
                pq.dropped = True
                await self.pull_service.stop_queue(mq)
            self.offset_store.update_offset(mq, offset, increase_only=False)
            try:
                await self.offset_store.persist(mq)
            except MQClientError as exc:
                log.warning("%s: storing the reset offset of %s failed: %s", self.group, mq, exc)
            self.offset_store.remove_offset(mq)
        await self.do_rebalance()

    async def consume_directly(self, msg: MessageExt, broker_name: str) -> tuple[str, str | None]:
        """(consumeResult, remark) of running the listener on ``msg`` once (upstream
        ConsumeMessageConcurrentlyService.consumeMessageDirectly): CR_SUCCESS, CR_LATER or
        CR_THROW_EXCEPTION."""
        listener = self.listener
        if listener is None:
            return "CR_THROW_EXCEPTION", "no listener registered"
        ctx = ConsumeContext(MessageQueue(msg.topic, broker_name, msg.queue_id))
        try:
            if inspect.iscoroutinefunction(listener):
                result = await listener([msg], ctx)
            elif self.run_sync_listener_in_thread:
                result = await asyncio.to_thread(listener, [msg], ctx)
            else:
                result = listener([msg], ctx)
        except Exception as exc:
            return "CR_THROW_EXCEPTION", f"{type(exc).__name__}: {exc}"
        if result_status(result) is ConsumeStatus.CONSUME_SUCCESS:
            return "CR_SUCCESS", None
        return "CR_LATER", None

    def consume_status(self, topic: str) -> dict[MessageQueue, int]:
        """The offsets this consumer holds for ``topic`` (upstream getConsumeStatus)."""
        if self.offset_store is None:
            return {}
        return self.offset_store.clone_offsets(topic)

    # --- internals ------------------------------------------------------------------------------
    async def _on_queue_removed(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        assert self.pull_service is not None and self.offset_store is not None
        await self.pull_service.stop_queue(mq)
        # hand over exactly where we are: the next owner starts at our lowest unconsumed offset
        await self.offset_store.persist(mq)

    async def _send_back(self, msg: MessageExt, mq: MessageQueue, delay_level: int) -> None:
        addr = self.instance.broker_addr(mq.broker_name)
        if addr is None:
            addr = f"{msg.store_host[0]}:{msg.store_host[1]}"
        await self.instance.broker.consumer_send_msg_back(
            addr, msg, self.group, delay_level, self.max_reconsume_times
        )

    @property
    def stats(self) -> dict[str, int]:
        cs = self.consume_service
        return {
            "pulled": self.pull_service.pulled if self.pull_service else 0,
            "consumed_ok": cs.stats.ok if cs else 0,
            "consume_failed": cs.stats.failed if cs else 0,
            "sent_back": cs.stats.sent_back if cs else 0,
        }
