"""A real NameServer and real brokers on 127.0.0.1 (port 0), in the test's event loop, for client tests."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ferrymq.broker.app import BrokerApp
from ferrymq.broker.config import BrokerConfig
from ferrymq.client.admin import AdminClient
from ferrymq.namesrv.app import NamesrvApp
from ferrymq.namesrv.config import NamesrvConfig
from ferrymq.store.config import MessageStoreConfig
from polling import wait_for


@dataclass
class LocalCluster:
    root: Path
    namesrv: NamesrvApp
    brokers: dict[str, BrokerApp] = field(default_factory=dict)

    @property
    def namesrv_addr(self) -> str:
        return self.namesrv.addr

    async def start_broker(self, name: str, port: int = 0, **overrides: object) -> BrokerApp:
        config = BrokerConfig(
            broker_cluster_name="TestCluster",
            broker_name=name,
            broker_ip1="127.0.0.1",
            bind_address="127.0.0.1",
            listen_port=port,
            namesrv_addr=self.namesrv_addr,
            **overrides,  # type: ignore[arg-type]
        )
        store = MessageStoreConfig(
            store_path_root_dir=self.root / name,
            mapped_file_size_commit_log=8 * 1024 * 1024,
        )
        app = BrokerApp(config, store)
        await app.start()
        self.brokers[name] = app
        return app

    async def stop_broker(self, name: str) -> None:
        app = self.brokers.pop(name)
        await app.stop()

    async def stop(self) -> None:
        for name in list(self.brokers):
            await self.stop_broker(name)
        await self.namesrv.stop()

    async def create_topic(self, topic: str, queues: int = 4) -> None:
        async with AdminClient(self.namesrv_addr) as admin:
            await admin.create_topic(topic, read_queue_nums=queues, write_queue_nums=queues)

            async def routed() -> bool:
                route = await admin.instance.namesrv.get_route(topic)
                return route is not None and {q.broker_name for q in route.queue_datas} == set(
                    self.brokers
                )

            await wait_for(routed, what=f"route of {topic} on every broker")


async def start_cluster(
    root: Path, broker_names: tuple[str, ...] = ("broker-a", "broker-b")
) -> LocalCluster:
    namesrv = NamesrvApp(
        NamesrvConfig(listen_port=0, bind_address="127.0.0.1", rocketmq_home=root / "namesrv")
    )
    await namesrv.start()
    cluster = LocalCluster(root, namesrv)
    for name in broker_names:
        await cluster.start_broker(name)

    async def registered() -> bool:
        async with AdminClient(cluster.namesrv_addr) as admin:
            info = await admin.cluster_info()
        return set(info.broker_addr_table) == set(broker_names)

    await wait_for(registered, what="brokers registered")
    return cluster
