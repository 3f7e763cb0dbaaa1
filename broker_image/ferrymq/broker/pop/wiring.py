"""Wiring of the RocketMQ 5 broker features into a broker (one object, built by ``app.py``): POP
(service, POP/ACK/CHANGE_INVISIBLE processors, assignment), timer messages (the rewrite on the send
path, the timer service, RECALL_MESSAGE). On a slave nothing runs: checkpoints, acks and timer
messages reach it by replication; a broker started as master replays them."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from ferrymq.broker.client_registry import ConsumerManager
from ferrymq.broker.config import BrokerConfig
from ferrymq.broker.consumer_offsets import ConsumerOffsetManager
from ferrymq.broker.pop.ack_processor import AckMessageProcessor
from ferrymq.broker.pop.assignment import MessageRequestModeManager, QueryAssignmentProcessor
from ferrymq.broker.pop.pop_processor import PopMessageProcessor
from ferrymq.broker.pop.service import PopConfig, PopService
from ferrymq.broker.pop.settings import PopTimerSettings
from ferrymq.broker.processors.admin_config_get import ConfigGetProcessor
from ferrymq.broker.semantics import SendSemanticsStore
from ferrymq.broker.store_port import MessageStorePort
from ferrymq.broker.subscription_groups import SubscriptionGroupManager
from ferrymq.broker.timer.recall import RecallMessageProcessor
from ferrymq.broker.timer.timer_message import TIMER_TOPIC, TimerRewrite
from ferrymq.broker.timer.timer_service import TimerService
from ferrymq.broker.topic_config import TopicConfigManager
from ferrymq.client.namesrv_api import NamesrvApi
from ferrymq.remoting.bodies import TopicConfig, TopicRouteData
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.server import RemotingServer

log = logging.getLogger(__name__)

__all__ = ["PopTimerServices"]


class PopTimerServices:
    def __init__(
        self,
        *,
        config: BrokerConfig,
        settings: PopTimerSettings,
        store: MessageStorePort,
        send_store: SendSemanticsStore,
        offsets: ConsumerOffsetManager,
        topics: TopicConfigManager,
        groups: SubscriptionGroupManager,
        consumers: ConsumerManager,
        client: RemotingClient,
        config_dir: Path,
        is_slave: Callable[[], bool],
        on_topic_created: Callable[[str], None],
    ) -> None:
        store_host = (config.broker_ip1, config.listen_port)
        self.settings = settings
        self.is_slave = is_slave
        self.topics = topics
        self.on_topic_created = on_topic_created
        self.pop = PopService(
            PopConfig(
                broker_name=config.broker_name,
                cluster_name=config.broker_cluster_name,
                store_host=store_host,
                revive_queue_num=settings.revive_queue_num,
                enable_retry_topic_v2=settings.enable_retry_topic_v2,
                pop_from_retry_probability=settings.pop_from_retry_probability,
                init_pop_offset_by_check_msg_in_mem=settings.init_pop_offset_by_check_msg_in_mem,
            ),
            store,
            offsets,
            topics,
            on_topic_created=on_topic_created,
            order_info_path=config_dir / "consumerOrderInfo.json",
        )
        self.pop_processor = PopMessageProcessor(
            config, self.pop, topics, groups, offsets, is_slave=is_slave
        )
        self.ack_processor = AckMessageProcessor(self.pop, topics, offsets, is_slave=is_slave)
        self.modes = MessageRequestModeManager(config_dir / "messageRequestMode.json")
        addrs = config.namesrv_addrs
        namesrv = NamesrvApi(client, addrs) if addrs else None

        async def route_of(topic: str) -> TopicRouteData | None:
            return await namesrv.get_route(topic) if namesrv is not None else None

        self.assignment = QueryAssignmentProcessor(
            self.modes,
            topics,
            groups,
            consumers,
            broker_name=config.broker_name,
            route_of=route_of,
            default_mode=settings.default_message_request_mode,
            default_pop_share_queue_num=settings.default_pop_share_queue_num,
        )
        send_store.timer = TimerRewrite(
            broker_name=config.broker_name,
            enabled=settings.timer_wheel_enable,
            max_delay_sec=settings.timer_max_delay_sec,
            precision_ms=settings.timer_precision_ms,
        )
        self.timer = TimerService(store, offsets, store_host=store_host)
        self.recall = RecallMessageProcessor(
            send_store,
            topics,
            broker_name=config.broker_name,
            enabled=lambda: settings.recall_message_enable,
            max_delay_sec=settings.timer_max_delay_sec,
            broker_permission=lambda: config.broker_permission,
            store_host=store_host,
            is_slave=is_slave,
        )
        self.config_get = ConfigGetProcessor(topics, groups)
        self._started = False

    def register(self, server: RemotingServer) -> None:
        self.pop_processor.register_to(server)
        self.ack_processor.register_to(server)
        self.assignment.register_to(server)
        self.recall.register_to(server)
        # what the 5.x proxy reads of a topic (message.type) and of a group (retry, orderly)
        self.config_get.register_to(server)

    async def start(self) -> None:
        self.modes.load()
        if self.is_slave():
            return
        await self.promote()

    async def promote(self) -> None:
        """This broker became (or starts as) the master: replay, then revive and deliver."""
        if self._started:
            return
        await self.pop.start()
        if self.settings.timer_wheel_enable:
            # a system topic as upstream's TopicConfigManager makes it (admin tools list it)
            if self.topics.get(TIMER_TOPIC) is None:
                self.topics.update(
                    TopicConfig(topic_name=TIMER_TOPIC, read_queue_nums=1, write_queue_nums=1)
                )
                self.on_topic_created(TIMER_TOPIC)
            await self.timer.start()
        self._started = True

    async def shutdown(self) -> None:
        """Stop redelivery and timers (at shutdown, or demoted to slave); the progress offsets
        are committed for the final save."""
        await self.assignment.flush()
        if not self._started:
            return
        self._started = False
        await self.pop.shutdown()
        if self.settings.timer_wheel_enable:
            await self.timer.shutdown()
