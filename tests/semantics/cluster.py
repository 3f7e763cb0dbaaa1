"""A real NameServer and broker on 127.0.0.1 (port 0) in the test's loop, with short delay levels
and fast transaction checks, for the semantics tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from ferrymq.broker.app import BrokerApp
from ferrymq.broker.config import BrokerConfig
from ferrymq.broker.semantics_config import SemanticsConfig
from ferrymq.client.admin import AdminClient
from ferrymq.client.instance import ClientInstance
from ferrymq.namesrv.app import NamesrvApp
from ferrymq.namesrv.config import NamesrvConfig
from ferrymq.store.config import MessageStoreConfig
from polling import wait_for

FAST_LEVELS = " ".join(["1s"] * 18)


@dataclass
class SemanticsCluster:
    root: Path
    namesrv: NamesrvApp
    broker: BrokerApp

    async def restart_broker(self) -> None:
        """Graceful stop, then a new broker on the same store (progress files reload). It gets a
        fresh port: reusing the old one races with other processes on a shared machine; clients
        find the new address through the NameServer."""
        old = self.broker
        await old.stop()
        old.config.listen_port = 0
        self.broker = BrokerApp(old.config, old.store_config, old.semantics_config)
        await self.broker.start()

    @property
    def namesrv_addr(self) -> str:
        return self.namesrv.addr

    @property
    def broker_addr(self) -> str:
        return f"127.0.0.1:{self.broker.port}"

    def instance(self, **options: float) -> ClientInstance:
        """A client instance with quick rebalances and offset persists (tests, not defaults)."""
        options.setdefault("rebalance_interval", 1.0)
        options.setdefault("persist_offset_interval", 0.5)
        # the retry topic is created by the first heartbeat; learn its route quickly
        options.setdefault("poll_namesrv_interval", 1.0)
        return ClientInstance(self.namesrv_addr, **options)

    async def create_topic(self, topic: str, queues: int = 4, order: bool = False) -> None:
        async with AdminClient(self.namesrv_addr) as admin:
            await admin.create_topic(topic, read_queue_nums=queues, write_queue_nums=queues)

            async def routed() -> bool:
                route = await admin.instance.namesrv.get_route(topic)
                return route is not None and bool(route.queue_datas)

            await wait_for(routed, 10, f"route of {topic}")


@asynccontextmanager
async def semantics_cluster(
    root: Path,
    *,
    delay_levels: str = FAST_LEVELS,
    semantics: SemanticsConfig | None = None,
    **broker_options: object,
) -> AsyncIterator[SemanticsCluster]:
    namesrv = NamesrvApp(
        NamesrvConfig(listen_port=0, bind_address="127.0.0.1", kv_config_path=root / "kv.json")
    )
    await namesrv.start()
    config = BrokerConfig(
        broker_cluster_name="SemCluster",
        broker_name="broker-s",
        broker_ip1="127.0.0.1",
        bind_address="127.0.0.1",
        listen_port=0,
        namesrv_addr=namesrv.addr,
        **broker_options,  # type: ignore[arg-type]
    )
    store = MessageStoreConfig.model_validate(
        {
            "storePathRootDir": str(root / "broker-s"),
            "mappedFileSizeCommitLog": 4 * 1024 * 1024,
            "mappedFileSizeConsumeQueue": 20 * 2000,
            "messageDelayLevel": delay_levels,
            "maxHashSlotNum": 1000,
            "maxIndexNum": 4000,
        }
    )
    broker = BrokerApp(config, store, semantics or SemanticsConfig())
    await broker.start()
    cluster = SemanticsCluster(root, namesrv, broker)
    try:

        async def registered() -> bool:
            async with AdminClient(namesrv.addr) as admin:
                info = await admin.cluster_info()
            return "broker-s" in info.broker_addr_table

        await wait_for(registered, 10, "broker registered")
        yield cluster
    finally:
        await cluster.broker.stop()
        await namesrv.stop()
