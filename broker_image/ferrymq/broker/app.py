"""Broker wiring (upstream BrokerController, without the god object): builds the store, the
metadata managers, the processors (each gets only its dependencies), registration, housekeeping
and metrics; runs until SIGTERM/SIGINT and then shuts down gracefully: unregister from every
NameServer, answer held pulls, stop serving, save metadata, flush the store and remove its abort file.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ferrymq.acl.metrics import SecurityCollector
from ferrymq.acl.service import AclService
from ferrymq.acl.settings import AclSettings
from ferrymq.broker.broker_conf import BrokerConf, kept_broker_conf, load_broker_conf
from ferrymq.broker.client_registry import ConsumerManager, ProducerManager
from ferrymq.broker.config import BrokerConfig, config_dir, role_problem
from ferrymq.broker.config_file import ConfigFile
from ferrymq.broker.consumer_offsets import ConsumerOffsetManager
from ferrymq.broker.controller_mode_config import ControllerModeSettings
from ferrymq.broker.lag.config import LagConfig
from ferrymq.broker.lag.sampler import ConsumerLagSampler
from ferrymq.broker.long_polling import PullRequestHoldService
from ferrymq.broker.metrics import (
    BrokerCollector,
    BrokerFigures,
    DiskCollector,
    LagCollector,
    MetricsServer,
    TopicInCounter,
)
from ferrymq.broker.pop.settings import PopTimerSettings
from ferrymq.broker.pop.wiring import PopTimerServices
from ferrymq.broker.processors.admin_broker import AdminBrokerProcessor
from ferrymq.broker.processors.admin_consumer import AdminConsumerProcessor
from ferrymq.broker.processors.admin_offset import AdminOffsetProcessor
from ferrymq.broker.processors.admin_stats import AdminStatsProcessor, StoreConsumeQueues
from ferrymq.broker.processors.admin_topic import AdminTopicProcessor
from ferrymq.broker.processors.client_manage import ClientManageProcessor
from ferrymq.broker.processors.consumer_manage import ConsumerManageProcessor
from ferrymq.broker.processors.pull import PullMessageProcessor
from ferrymq.broker.processors.query_message import QueryMessageProcessor
from ferrymq.broker.processors.queue_offsets import QueueOffsetProcessor
from ferrymq.broker.processors.reply import ReplyMessageProcessor
from ferrymq.broker.processors.send import SendMessageProcessor
from ferrymq.broker.register import BrokerRegistration, RegisterOutcome
from ferrymq.broker.role_switch import ControllerMode
from ferrymq.broker.semantics import SemanticsServices
from ferrymq.broker.semantics_config import SemanticsConfig
from ferrymq.broker.stats_manager import BrokerStatsManager
from ferrymq.broker.subscription_groups import SubscriptionGroupManager
from ferrymq.broker.sync_state_watch import SyncStateCollector
from ferrymq.broker.topic_config import TopicConfigManager
from ferrymq.client.credentials import ClientSecurity, SessionCredentials
from ferrymq.ha.broker_ha import BrokerHA, ManagerSyncTargets
from ferrymq.ha.config import HASettings, Role
from ferrymq.ha.metrics import HACollector, ha_figures
from ferrymq.remoting.bodies import PERM_READ, TopicConfig
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.eventloop import GracefulShutdown, serve_until_shutdown
from ferrymq.remoting.server import RemotingServer
from ferrymq.remoting.tls import ServerTls, TlsSettings, ha_contexts
from ferrymq.store.config import BrokerRole, MessageStoreConfig
from ferrymq.store.message_store import MessageStore
from ferrymq.tasks import Periodic

if TYPE_CHECKING:
    from ferrymq.proxy.app import ProxyApp

log = logging.getLogger(__name__)


class BrokerApp:
    def __init__(
        self,
        config: BrokerConfig,
        store_config: MessageStoreConfig,
        semantics_config: SemanticsConfig | None = None,
        ha_settings: HASettings | None = None,
        acl_settings: AclSettings | None = None,
        tls_settings: TlsSettings | None = None,
        controller_mode: ControllerModeSettings | None = None,
        lag_config: LagConfig | None = None,
        pop_settings: PopTimerSettings | None = None,
    ) -> None:
        self.config = config
        # RocketMQ 5 POP and timer messages (broker/pop, broker/timer): reviveQueueNum, timer* keys
        self.pop_settings = pop_settings or load_broker_conf(config.broker_config_path).pop
        self.rocket5: PopTimerServices | None = None
        # consumerLag* keys of the same broker.conf (and FERRYMQ_* environment)
        self.lag_config = lag_config or load_broker_conf(config.broker_config_path).lag
        self.lag: ConsumerLagSampler | None = None
        # enableGrpcProxy: the 5.x gRPC proxy in this process (ferrymq.proxy.local)
        self.grpc_proxy: ProxyApp | None = None
        self.inflow = TopicInCounter()
        self.stats_manager: BrokerStatsManager | None = None
        # security (issue 22): ACL guard on every request; TLS on the remoting port(s)
        self.acl = (
            AclService(
                acl_settings.files,
                name="broker",
                check_interval=acl_settings.acl_reload_interval,
            )
            if acl_settings is not None and acl_settings.acl_enable
            else None
        )
        tls_settings = tls_settings or TlsSettings()
        self.server_tls = ServerTls(tls_settings) if tls_settings.server_enabled else None
        self.ha_tls = ha_contexts(tls_settings)
        # haListenPort defaults to the configured listenPort + 1 (upstream BrokerStartup)
        self.ha_settings = (ha_settings or HASettings()).with_default_port(config.listen_port)
        self.ha: BrokerHA | None = None
        # transaction/delay settings outside BrokerConfig: FERRYMQ_* environment when not given
        self.semantics_config = semantics_config or load_broker_conf(None).semantics
        self.semantics: SemanticsServices | None = None
        self.store_config = store_config
        problem = role_problem(config.broker_id, store_config.broker_role.value)
        # in controller mode the controller decides the role (and so the id the master uses)
        if problem is not None and not (controller_mode and controller_mode.enable_controller_mode):
            raise ValueError(problem)
        limits = config.server_limits()
        self.server = RemotingServer(
            config.bind_address,
            config.listen_port,
            name="broker",
            limits=limits,
            tls=self.server_tls,
        )
        # the VIP channel serves the very same processor table on listenPort - 2
        fast_port = config.fast_listen_port
        self.fast_server = (
            RemotingServer(
                config.bind_address,
                fast_port,
                processors=self.server.processors,
                name="broker-fast",
                limits=limits,
                tls=self.server_tls,
            )
            if fast_port is not None
            else None
        )
        cfg_dir = config_dir(store_config.store_path_root_dir)
        self.topics_file = ConfigFile(cfg_dir / "topics.json")
        self.offsets_file = ConfigFile(cfg_dir / "consumerOffset.json")
        self.groups_file = ConfigFile(cfg_dir / "subscriptionGroup.json")
        self.topics = TopicConfigManager(
            cluster_name=config.broker_cluster_name,
            broker_name=config.broker_name,
            auto_create_topic_enable=config.auto_create_topic_enable,
            default_topic_queue_nums=config.default_topic_queue_nums,
            cluster_topic_enable=config.cluster_topic_enable,
            broker_topic_enable=config.broker_topic_enable,
            trace_topic=config.msg_trace_topic_name if config.trace_topic_enable else None,
        )
        self.offsets = ConsumerOffsetManager()
        self.groups = SubscriptionGroupManager(auto_create=config.auto_create_subscription_group)
        self.consumers = ConsumerManager(
            channel_expired_ms=config.channel_expired_timeout,
            notify_enabled=config.notify_consumer_ids_changed_enable,
        )
        self.producers = ProducerManager(channel_expired_ms=config.channel_expired_timeout)
        self.hold = PullRequestHoldService()
        # the broker's own calls (NameServer registration, slave sync) sign with the
        # FERRYMQ_ACCESS_KEY/_SECRET_KEY credentials and use tls.enable/tls.client.* when set
        outer = ClientSecurity.from_env()
        inner = acl_settings.inner_credentials() if acl_settings is not None else None
        if inner is not None:  # innerClientAuthenticationCredentials in broker.conf wins
            outer = ClientSecurity(SessionCredentials(*inner), outer.tls)
        client_tls = tls_settings.client_tls() or outer.tls
        self.client = RemotingClient(
            name="broker-outer",
            rpc_hook=outer.rpc_hook(),
            ssl_context=client_tls.context() if client_tls is not None else None,
        )
        self.registration = BrokerRegistration(
            config,
            self.client,
            lambda: self.topics.registration_wrapper(config.broker_permission),
            ha_server_addr=self._ha_server_addr,
            on_result=self._on_register_result,
            broker_role=store_config.broker_role.value,
            wants_master=self._wants_master,
        )
        self.store: MessageStore | None = None
        self.metrics: MetricsServer | None = None
        self.master_addr: str | None = None
        self.send: SendMessageProcessor | None = None
        self.pull: PullMessageProcessor | None = None
        self._saves: set[asyncio.Task[None]] = set()
        self.client_manage: ClientManageProcessor | None = None
        self._persisting: asyncio.Lock | None = None
        self._stopped = False
        # what start() started, stopped in reverse by stop() (upstream's start/shutdown pairs):
        # each step pushes its stop as it starts, so a start that fails half-way stops exactly
        # what it had started
        self._started = contextlib.AsyncExitStack()
        # controller mode (broker/role_switch.py): the controller decides the role at run time
        self.controller_mode_settings = controller_mode
        self.controller_mode = (
            ControllerMode(self, controller_mode)
            if controller_mode is not None and controller_mode.enable_controller_mode
            else None
        )

    # --- addresses --------------------------------------------------------------------------
    @property
    def port(self) -> int:
        return self.server.port

    @property
    def addr(self) -> str:
        return self.config.broker_addr

    @property
    def is_slave(self) -> bool:
        if self.controller_mode is not None and self.controller_mode.fenced:
            return True  # a slave, or a master without its controller lease: no writes
        return self.store_config.broker_role is BrokerRole.SLAVE

    def _ha_server_addr(self) -> str | None:
        if self.ha is not None:
            return self.ha.ha_server_addr()
        ha_port = getattr(self.store_config, "ha_listen_port", None)
        if ha_port is None:
            return None
        return f"{self.config.broker_ip2 or self.config.broker_ip1}:{ha_port}"

    def _wants_master(self) -> bool:
        """A slave that no NameServer has named a master to yet (controller mode: the
        controller names it)."""
        return (
            self.controller_mode is None
            and self.store_config.broker_role is BrokerRole.SLAVE
            and self.master_addr is None
        )

    def _on_register_result(self, outcome: RegisterOutcome) -> None:
        if self.controller_mode is not None:
            return  # the controller names the master; a NameServer's answer may be stale
        if self.ha is not None:
            self.ha.on_register_result(outcome.ha_server_addr, outcome.master_addr)
        if outcome.master_addr and outcome.master_addr != self.master_addr:
            log.info("master of %s is %s", self.config.broker_name, outcome.master_addr)
            self.master_addr = outcome.master_addr

    # --- lifecycle --------------------------------------------------------------------------
    async def start(self) -> None:
        """Initialise everything, then listen: no client connects to a broker that cannot serve.

        The ports are bound first (port 0: the OS's pick is published into the config, the
        store writes it as STOREHOST) but only listened on once the store is recovered and
        every processor is registered; a connect before that is refused by the kernel.
        """
        on_stop = self._started
        on_stop.push_async_callback(self.client.close)  # the broker's own calls: closed last
        self._persisting = asyncio.Lock()
        if self.acl is not None:
            await asyncio.to_thread(self.acl.load)  # AclConfigError: refuse to start
            self.server.processors.set_guard(self.acl.guard)
            self.acl.start()  # the reload check
            on_stop.push_async_callback(self.acl.stop)
        self.server.bind()
        if self.fast_server is not None:
            try:
                self.fast_server.bind()
            except OSError as exc:
                # a compatibility channel: clients fall back to the main port when it is absent
                log.error("fast channel on port %d not started: %s", self.fast_server.port, exc)
                self.fast_server = None
        if self.config.listen_port == 0:
            # port 0 (tests, local-cluster): publish the port the OS picked
            self.config.listen_port = self.server.port
        await asyncio.to_thread(self._load_metadata)
        cm = self.controller_mode
        self.store = MessageStore(
            self.store_config,
            (self.config.broker_ip1, self.config.listen_port),
            # reads only up to the saved confirm offset until the role is known
            hold_unconfirmed=cm is not None and cm.settings.all_ack_in_sync_state_set,
        )
        await self.store.start()
        on_stop.push_async_callback(self._shutdown_store)
        if self.controller_mode is not None:
            # settles the role (and may cut a divergent tail, restarting the store) first
            self.store = await self.controller_mode.join(self.store)
            self.controller_mode.register_to(self.server)
        if self.is_slave:
            self.topics.slave_view = self.slave_topic_view
        self._wire(self.store)
        on_stop.push_async_callback(self._save_metadata_last)
        assert self.semantics is not None
        await self.semantics.start()
        on_stop.push_async_callback(self.semantics.shutdown)
        assert self.rocket5 is not None
        await self.rocket5.start()
        on_stop.push_async_callback(self.rocket5.shutdown)
        self.store.add_dispatch_round_listener(self.hold.on_dispatch_round)
        self.store.add_dispatch_round_listener(self.inflow.on_dispatch_round)
        self.lag = ConsumerLagSampler(
            self.lag_config,
            self.store,
            self.topics,
            self.offsets,
            self.consumers,
            is_slave=lambda: self.is_slave,
        )
        self.lag.start()
        on_stop.push_async_callback(self.lag.stop)
        self.stats_manager = self._build_stats_manager(self.store, self.lag)
        self.stats_manager.start()
        on_stop.push_async_callback(self.stats_manager.stop)
        self._wire_monitoring(self.store, self.stats_manager)
        await self._start_ha(self.store)
        on_stop.push_async_callback(self._shutdown_ha)
        await self.server.start()
        on_stop.push_async_callback(self.server.stop)
        if self.fast_server is not None:
            await self.fast_server.start()
            on_stop.push_async_callback(self.fast_server.stop)
        on_stop.push_async_callback(self._answer_held_pulls)  # before the ports close
        self.registration.start()
        on_stop.push_async_callback(self._leave_namesrvs)
        if self.controller_mode is not None:
            self.controller_mode.start()
            on_stop.push_async_callback(self.controller_mode.stop)
        self._every(
            "persist-metadata", self.config.flush_consumer_offset_interval, self.persist_metadata
        )
        self._every("scan-channels", self.config.client_channel_scan_interval, self._scan_channels)
        if self.config.metrics_port:
            self._start_metrics()
        if self.config.enable_grpc_proxy:
            await self._start_grpc_proxy()
        log.info(
            "broker %s (%s, id %d) serving on %s",
            self.config.broker_name,
            self.config.broker_cluster_name,
            self.config.broker_id,
            self.addr,
        )

    def _wire(self, store: MessageStore) -> None:
        """Every processor registration of the broker, in one place (upstream registerProcessor)."""
        cfg = self.config
        self.semantics = SemanticsServices(
            store=store,
            store_host=(cfg.broker_ip1, cfg.listen_port),
            config_dir=config_dir(self.store_config.store_path_root_dir),
            delay_levels_ms=self.store_config.delay_levels_ms,
            find_group=self.groups.find,
            create_topic_in_send_back=self._create_topic_in_send_back,
            producer_channels=self.producers.channels_of,
            broker_writable=lambda: bool(cfg.broker_permission & 0x2) and not self.is_slave,
            enable_property_filter=lambda: cfg.enable_property_filter,
            reject_transaction_message=lambda: cfg.reject_transaction_message,
            is_slave=lambda: self.is_slave,
            config=self.semantics_config,
        )
        self.semantics.register(self.server)
        self.rocket5 = PopTimerServices(
            config=cfg,
            settings=self.pop_settings,
            store=store,
            send_store=self.semantics.send_store,
            offsets=self.offsets,
            topics=self.topics,
            groups=self.groups,
            consumers=self.consumers,
            client=self.client,
            config_dir=config_dir(self.store_config.store_path_root_dir),
            is_slave=lambda: self.is_slave,
            on_topic_created=lambda topic: self.topics_changed(),
        )
        self.rocket5.register(self.server)
        self.send = SendMessageProcessor(
            cfg,
            self.semantics.send_store,
            self.topics,
            self.groups,
            max_message_size=self.store_config.max_message_size,
            on_topic_created=lambda topic: self.topics_changed(),
            is_slave=lambda: self.is_slave,
        )
        self.send.register_to(self.server)
        ReplyMessageProcessor(
            self.send,
            self.producers,
            store_host=f"{cfg.broker_ip1}:{cfg.listen_port}",
            store_reply_message_enable=cfg.store_reply_message_enable,
        ).register_to(self.server)
        self.pull = PullMessageProcessor(
            cfg,
            store,
            self.topics,
            self.groups,
            self.consumers,
            self.offsets,
            self.hold,
            is_master=lambda: not self.is_slave,
            offset_check_in_slave=self.store_config.offset_check_in_slave,
        )
        self.pull.register_to(self.server)
        self.client_manage = client_manage = ClientManageProcessor(
            self.consumers,
            self.producers,
            self.groups,
            self.topics,
            enable_property_filter=cfg.enable_property_filter,
            on_topic_created=lambda topic: self.topics_changed(),
        )
        client_manage.register_to(self.server)
        ConsumerManageProcessor(self.consumers, self.offsets, store).register_to(self.server)
        QueueOffsetProcessor(store).register_to(self.server)
        QueryMessageProcessor(store).register_to(self.server)
        AdminTopicProcessor(
            cfg, self.topics, self.offsets, store, on_topics_changed=self.topics_saved
        ).register_to(self.server)
        AdminBrokerProcessor(
            cfg,
            store,
            store_config=self.store_config,
            other_configs=[
                self.ha_settings,
                self.semantics_config,
                self.lag_config,
                *([self.controller_mode_settings] if self.controller_mode_settings else []),
            ],
            kept_config=kept_broker_conf(cfg.broker_config_path),
            runtime_stats=self._runtime_stats,
            on_config_changed=self._broker_config_changed,
        ).register_to(self.server)
        AdminConsumerProcessor(
            cfg, store, self.topics, self.groups, self.offsets, self.consumers, self.producers
        ).register_to(self.server)

    def _build_stats_manager(
        self, store: MessageStore, lag: ConsumerLagSampler
    ) -> BrokerStatsManager:
        cluster = self.config.broker_cluster_name

        def put() -> int:
            return self.send.stats.put_messages if self.send else 0

        def got() -> int:
            return self.pull.stats.got_messages if self.pull else 0

        return BrokerStatsManager(
            put_total=put,
            get_transferred=got,
            # the store keeps its get counters as plain attributes (see MessageStore.runtime_info)
            get_found=lambda: int(getattr(store, "_get_found_total", 0)),
            get_miss=lambda: int(getattr(store, "_get_miss_total", 0)),
            items=self._stats_items(cluster),
        )

    def _stats_items(self, cluster: str) -> dict[str, Callable[[], dict[str, tuple[int, int]]]]:
        """VIEW_BROKER_STATS_DATA items as upstream counts them: (value, requests) per key, from
        the send, pull and send-back processors' own counters (read on the stats timer)."""

        def put(column: int) -> dict[str, tuple[int, int]]:
            topics = self.send.stats.topics if self.send else {}
            return {topic: (row[column], row[2]) for topic, row in topics.items()}

        def get(column: int) -> dict[str, tuple[int, int]]:
            if self.pull is None:
                return {}
            pulls = self.pull.stats.out_pulls
            return {
                f"{topic}@{group}": (row[column], pulls.get((topic, group), 0))
                for (topic, group), row in self.pull.stats.out.items()
            }

        def sent_back() -> dict[str, tuple[int, int]]:
            retry = self.semantics.retry if self.semantics else None
            return {key: (n, n) for key, n in (retry.sent_back if retry else {}).items()}

        def broker_put() -> dict[str, tuple[int, int]]:
            stats = self.send.stats if self.send else None
            return {cluster: (stats.put_messages, stats.put_requests) if stats else (0, 0)}

        def broker_get() -> dict[str, tuple[int, int]]:
            stats = self.pull.stats if self.pull else None
            return {cluster: (stats.got_messages, stats.got_requests) if stats else (0, 0)}

        return {
            "TOPIC_PUT_NUMS": lambda: put(0),
            "TOPIC_PUT_SIZE": lambda: put(1),
            "GROUP_GET_NUMS": lambda: get(0),
            "GROUP_GET_SIZE": lambda: get(1),
            "SNDBCK_PUT_NUMS": sent_back,
            "BROKER_PUT_NUMS": broker_put,
            "BROKER_GET_NUMS": broker_get,
        }

    def _wire_monitoring(self, store: MessageStore, stats: BrokerStatsManager) -> None:
        """Offset and monitoring admin codes (222, 223, 303, 305, 306, 309, 314-317, 321, 328)."""
        AdminOffsetProcessor(
            self.config, store, self.topics, self.groups, self.offsets, self.consumers
        ).register_to(self.server)
        AdminStatsProcessor(
            self.config,
            store,
            StoreConsumeQueues(store),
            self.topics,
            self.groups,
            self.offsets,
            self.consumers,
            self.producers,
            stats,
        ).register_to(self.server)

    async def _start_ha(self, store: MessageStore) -> None:
        """HA integration: replication service per brokerRole (see ferrymq.ha.broker_ha)."""
        self.ha = BrokerHA(
            store=store,
            settings=self.ha_settings,
            role=Role(self.store_config.broker_role.value),
            sync_flush_timeout_ms=self.store_config.sync_flush_timeout,
            bind_host=self.config.bind_address,
            # upstream's haServerAddr is brokerIP2 (replication may stay on an inner network
            # while brokerIP1 is a load balancer's address); brokerIP1 when it is unset
            advertised_ip=self.config.broker_ip2 or self.config.broker_ip1,
            client=self.client,
            tls=self.ha_tls,
            targets=ManagerSyncTargets(
                topics=self.topics,
                offsets=self.offsets,
                groups=self.groups,
                schedule=lambda: self.semantics.schedule if self.semantics else None,
                on_topics_changed=self.topics_changed,
            ),
        )
        await self.ha.start()
        if self.controller_mode is not None:
            self.controller_mode.on_ha_started(self.ha)

    async def restart_ha(self) -> None:
        """Controller mode: start the HA side of the (new) role; the old one is shut down."""
        assert self.store is not None
        await self._start_ha(self.store)

    def slave_topic_view(self, topic: str, config: TopicConfig | None) -> TopicConfig | None:
        """On a slave, a topic's config as far as its ConsumeQueues go: a topic (or queues of
        one) created on the master since the last sync is served read-only from the replicated
        messages instead of TOPIC_NOT_EXIST / an illegal queue id."""
        store = self.store
        queues = store.consume_queues.queues_of(topic) if store is not None else {}
        if not queues:
            return config
        nums = max(queues) + 1
        if config is None:
            return TopicConfig(
                topic_name=topic, read_queue_nums=nums, write_queue_nums=nums, perm=PERM_READ
            )
        if nums > config.read_queue_nums:
            return config.model_copy(update={"read_queue_nums": nums})
        return config

    def _create_topic_in_send_back(self, topic: str, queue_nums: int, perm: int) -> object:
        known = self.topics.get(topic) is not None
        config = self.topics.create_in_send_back(topic, queue_nums, perm)
        if not known:
            self.topics_changed()
        return config

    def _every(
        self, name: str, interval_ms: int, job: Callable[[], Awaitable[None] | None]
    ) -> None:
        loop = Periodic(name, job, interval_ms / 1000)
        loop.start()
        self._started.push_async_callback(loop.stop)

    def _scan_channels(self) -> None:
        now = int(time.time() * 1000)
        self.consumers.scan_not_active(now)
        self.producers.scan_not_active(now)

    # --- metadata ---------------------------------------------------------------------------
    def _load_metadata(self) -> None:
        for file, manager in (
            (self.topics_file, self.topics),
            (self.offsets_file, self.offsets),
            (self.groups_file, self.groups),
        ):
            data = file.read()
            if data is None:
                continue
            try:
                manager.restore(data)
            except ValueError as exc:
                backup = file.read_backup()
                if backup is None:
                    raise
                log.error("%s; loading %s instead", exc, file.backup)
                manager.restore(backup)

    def _broker_config_changed(self, keys: list[str]) -> None:
        if any(key.startswith("flush_") for key in keys) and self.store is not None:
            self.store.apply_flush_settings()
        if "broker_permission" in keys:
            # NameServers re-apply topic perms only on a new data version (upstream does this too)
            self.topics.next_version()
            self.topics_changed()
        else:
            self.registration.trigger()

    def topics_changed(self) -> None:
        """A topic was created/changed/deleted: save topics.json and re-register now."""
        self.topics_saved()

    def topics_saved(self) -> asyncio.Task[None]:
        """``topics_changed``, returning the save: an admin request answers after it, as
        upstream's (TopicConfigManager persists before the response)."""
        self.registration.trigger()
        task = asyncio.get_running_loop().create_task(
            self._save(self.topics_file, self.topics.snapshot())
        )
        self._saves.add(task)
        task.add_done_callback(self._saves.discard)
        return task

    async def _save(self, file: ConfigFile, data: bytes) -> None:
        assert self._persisting is not None
        async with self._persisting:
            await file.save(data)

    async def persist_metadata(self) -> None:
        # snapshots are taken on the loop (consistent), written in a thread (fsync off the loop)
        jobs = [(self.topics_file, self.topics.snapshot())]
        if self.offsets.dirty:
            self.offsets.dirty = False
            jobs.append((self.offsets_file, self.offsets.snapshot()))
        if self.groups.dirty:
            self.groups.dirty = False
            jobs.append((self.groups_file, self.groups.snapshot()))
        for file, data in jobs:
            await self._save(file, data)

    # --- stats ------------------------------------------------------------------------------
    def _runtime_stats(self) -> dict[str, str]:
        send = self.send.stats if self.send else None
        pull = self.pull.stats if self.pull else None
        return {
            "msgPutTotalTodayNow": str(send.put_messages if send else 0),
            "msgGetTotalTodayNow": str(pull.got_messages if pull else 0),
            "heldPullRequests": str(self.hold.held_count),
            "consumerGroups": str(len(self.consumers.table)),
            **(self.stats_manager.runtime_info() if self.stats_manager is not None else {}),
            **(self.ha.runtime_info() if self.ha is not None else {}),
            **(self.controller_mode.runtime_info() if self.controller_mode is not None else {}),
        }

    def figures(self) -> BrokerFigures:
        send = self.send.stats if self.send else None
        pull = self.pull.stats if self.pull else None
        store = self.store
        return BrokerFigures(
            put_messages=send.put_messages if send else 0,
            put_bytes=send.put_bytes if send else 0,
            put_failures=send.put_failures if send else 0,
            got_messages=pull.got_messages if pull else 0,
            got_bytes=pull.got_bytes if pull else 0,
            held_pulls=self.hold.held_count,
            consumer_groups=len(self.consumers.table),
            consumers=sum(len(g.channels) for g in self.consumers.table.values()),
            producers=sum(len(c) for c in self.producers.table.values()),
            topics=len(self.topics.table),
            commit_log_max_offset=store.max_phy_offset if store else 0,
            dispatch_behind_bytes=store.dispatch_behind_bytes() if store else 0,
            writable=self.config.is_writeable and not self.is_slave,
            store_corrupt_records_skipped=store.corrupt_records_skipped if store else 0,
        )

    def _start_metrics(self) -> None:
        labels = {"cluster": self.config.broker_cluster_name, "broker": self.config.broker_name}
        host = (
            "0.0.0.0" if self.config.bind_address in ("", "0.0.0.0") else self.config.bind_address
        )
        self.metrics = MetricsServer(
            host, self.config.metrics_port, BrokerCollector(labels, self.figures)
        )
        if self.ha is not None:
            ha_service = self.ha.service
            self.metrics.registry.register(HACollector(labels, lambda: ha_figures(ha_service)))
        if self.controller_mode is not None:
            watch = self.controller_mode.sync_watch
            self.metrics.registry.register(SyncStateCollector(labels, watch.figures))
        if self.lag is not None:
            pull = self.pull
            self.metrics.registry.register(
                LagCollector(
                    labels, self.lag, self.inflow, lambda: dict(pull.stats.out) if pull else {}
                )
            )
        store_config = self.store_config
        self.metrics.registry.register(
            DiskCollector(
                labels,
                lambda: str(store_config.commit_log_dir),
                lambda: store_config.disk_max_used_space_ratio / 100,
            )
        )
        if self.acl is not None or self.server_tls is not None:
            self.metrics.registry.register(SecurityCollector(labels, self.acl, self.server_tls))
        self.metrics.start()
        self._started.callback(self.metrics.stop)

    # --- shutdown ---------------------------------------------------------------------------
    async def _start_grpc_proxy(self) -> None:
        """enableGrpcProxy: the 5.x gRPC proxy in the broker process (ferrymq.proxy.local)."""
        from ferrymq.proxy.local import start_local_proxy

        self.grpc_proxy = await start_local_proxy(self.config)
        self._started.push_async_callback(self.grpc_proxy.stop)

    async def stop(self) -> None:
        """Stop what start() started, in reverse order: the 5.x proxy, metrics and periodic jobs
        first; then controller mode, the NameServer registrations (unregistered, so clients
        move on), held pulls answered, the ports closed; HA, the samplers, the semantics
        services; the metadata saved a last time; the store flushed; ACL and the outer client."""
        if self._stopped:
            return
        self._stopped = True
        log.info("broker %s shutting down", self.config.broker_name)
        await self._started.aclose()
        log.info("broker %s stopped", self.config.broker_name)

    async def _leave_namesrvs(self) -> None:
        await self.registration.stop()
        # a bounded share of the shutdown grace: unreachable NameServers expire us anyway
        await self.registration.unregister_all(budget=self.config.shutdown_grace_seconds * 0.3)

    async def _answer_held_pulls(self) -> None:
        self.hold.wake_all()
        # give woken pulls a chance to answer before their connections close
        deadline = asyncio.get_running_loop().time() + 2.0
        while self.hold.held_count and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        if self.client_manage is not None:
            self.client_manage.stop_watching()

    async def _shutdown_ha(self) -> None:
        if self.ha is not None:  # controller mode replaces it on every role change
            await self.ha.shutdown()

    async def _save_metadata_last(self) -> None:
        for task in list(self._saves):
            with contextlib.suppress(Exception):
                await task
        self.offsets.dirty = True
        self.groups.dirty = True
        await self.persist_metadata()

    async def _shutdown_store(self) -> None:
        if self.store is not None:  # controller mode may have restarted it
            await self.store.shutdown()


async def serve(conf: BrokerConf) -> None:
    """Run a broker until SIGTERM or SIGINT, then shut it down gracefully.

    From the first signal the process has ``shutdownGraceSeconds`` to stop (a start still in
    progress finishes first: cancelling a store recovery half-way is not safe, and a forced exit
    leaves the abort file, so the next start recovers); a second signal or the grace running out
    forces it out with a log line naming what was still running (see GracefulShutdown).
    """
    config = conf.broker
    app = BrokerApp(
        config,
        conf.store,
        semantics_config=conf.semantics,
        ha_settings=conf.ha,
        acl_settings=conf.acl,
        tls_settings=conf.tls,
        controller_mode=conf.controller_mode,
        lag_config=conf.lag,
        pop_settings=conf.pop,
    )
    shutdown = GracefulShutdown(config.shutdown_grace_seconds, name=f"broker {config.broker_name}")

    def serving() -> None:
        # Everything start-up created (modules, classes, configs: ~60k objects) lives as long as
        # the process; frozen, a full collection walks only what serving allocates instead of
        # stalling the loop 40-60 ms (measured during the 2k msg/s latency case)
        gc.freeze()
        if not shutdown.requested.is_set():
            # the line a supervisor (local-cluster, tests) waits for
            print(f"Broker {config.broker_name} ready on port {app.port}", flush=True)

    await serve_until_shutdown(app, config.listen_port, shutdown, serving)


def store_root_of(store_config: MessageStoreConfig) -> Path:
    return store_config.store_path_root_dir
