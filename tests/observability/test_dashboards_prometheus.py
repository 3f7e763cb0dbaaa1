"""Every panel query of the shipped Grafana dashboards returns data from a real Prometheus server
scraping a live master/slave broker group with a producer and a consumer group at work."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from ferrymq.broker.app import BrokerApp
from ferrymq.broker.config import BrokerConfig
from ferrymq.broker.local_cluster import pick_free_port
from ferrymq.client import Producer
from ferrymq.client.admin import AdminClient
from ferrymq.ha.config import HASettings
from ferrymq.namesrv.app import NamesrvApp
from ferrymq.namesrv.config import NamesrvConfig
from ferrymq.store.config import BrokerRole, FlushDiskType, MessageStoreConfig

from .conftest import FAST_LAG
from .obs_helpers import Consumer, ObsCluster, produce, wait_for
from .prometheus import Prometheus

pytestmark = pytest.mark.timeout(240)

CHART = Path(__file__).resolve().parents[2] / "charts" / "ferrymq-operator"
VARIABLES = {"$cluster": ".*", "$group": ".*", "$__rate_interval": "5s", "$__interval": "1s"}


def panel_queries() -> list[tuple[str, str, str]]:
    out = []
    for path in sorted((CHART / "dashboards").glob("*.json")):
        board: dict[str, Any] = json.loads(path.read_text())
        for panel in board["panels"]:
            for target in panel["targets"]:
                out.append((path.stem, panel["title"], target["expr"]))
    return out


def substitute(expr: str) -> str:
    for name, value in VARIABLES.items():
        expr = expr.replace(name, value)
    assert not re.search(r"\$\w", expr), f"unknown variable in {expr}"
    return expr


def make_broker(root: Path, namesrv: str, broker_id: int, role: BrokerRole) -> BrokerApp:
    config = BrokerConfig(
        broker_cluster_name="DashCluster",
        broker_name="broker-d",
        broker_id=broker_id,
        broker_ip1="127.0.0.1",
        bind_address="127.0.0.1",
        listen_port=0,
        namesrv_addr=namesrv,
        metrics_port=pick_free_port("127.0.0.1"),
    )
    store = MessageStoreConfig(
        store_path_root_dir=root,
        mapped_file_size_commit_log=1024 * 1024,
        broker_role=role,
        flush_disk_type=FlushDiskType.SYNC_FLUSH,
    )
    ha = HASettings(ha_listen_port=0, ha_slave_sync_interval=200)
    return BrokerApp(config, store, ha_settings=ha, lag_config=FAST_LAG)


@pytest.fixture
async def ha_group(tmp_path: Path) -> AsyncIterator[tuple[ObsCluster, BrokerApp]]:
    namesrv = NamesrvApp(
        NamesrvConfig(listen_port=0, bind_address="127.0.0.1", rocketmq_home=tmp_path / "ns")
    )
    await namesrv.start()
    master = make_broker(tmp_path / "m", namesrv.addr, 0, BrokerRole.SYNC_MASTER)
    slave = make_broker(tmp_path / "s", namesrv.addr, 1, BrokerRole.SLAVE)
    await master.start()
    await slave.start()
    try:

        async def both_registered() -> bool:
            async with AdminClient(namesrv.addr) as admin:
                info = await admin.cluster_info()
            data = info.broker_addr_table.get("broker-d")
            return data is not None and set(data.broker_addrs) == {0, 1}

        await wait_for(both_registered, what="master and slave registered")
        yield ObsCluster(namesrv, master, master.config.metrics_port), slave
    finally:
        await slave.stop()
        await master.stop()
        await namesrv.stop()


async def test_every_dashboard_panel_returns_data(
    tmp_path: Path, ha_group: tuple[ObsCluster, BrokerApp]
) -> None:
    cluster, slave = ha_group
    queries = panel_queries()
    assert len(queries) >= 25
    prom = Prometheus(
        tmp_path / "prom",
        [f"127.0.0.1:{cluster.metrics_port}", f"127.0.0.1:{slave.config.metrics_port}"],
    )
    prom.start()
    consumer = Consumer(cluster, "dash-g", "DashT")
    try:
        await cluster.create_topic("DashT", queues=2)
        await consumer.start()
        async with Producer("dash-p", cluster.namesrv_addr) as producer:
            for _ in range(8):
                await produce(producer, "DashT", 25)
                await wait_for(
                    lambda: prom.value('count(up{job="ferrymq"} == 1)') == 2, what="both scraped"
                )
        await wait_for(lambda: consumer.count >= 200, what="consumed")

        missing: list[str] = []
        for board, title, expr in queries:
            promql = substitute(expr)
            try:
                await wait_for(lambda q=promql: bool(prom.query(q)), timeout=20, what=promql)
            except AssertionError:
                missing.append(f"{board} / {title}: {promql}")
        assert not missing, "panels without data:\n" + "\n".join(missing)
        # only the master publishes lag (a slave's copy would double every sum)
        for metric in ("rocketmq_consumer_lag_messages", "rocketmq_throughput_in_total"):
            instances = prom.query(f"count by (instance) ({metric})")
            master = f"127.0.0.1:{cluster.metrics_port}"
            assert [s["metric"]["instance"] for s in instances] == [master], metric
    finally:
        await consumer.stop()
        prom.stop()
