"""Fixtures of the observability tests: a real NameServer and broker on 127.0.0.1 with /metrics
and a fast lag sampler, scraped by a real Prometheus server."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from ferrymq.broker.app import BrokerApp
from ferrymq.broker.config import BrokerConfig
from ferrymq.broker.lag.config import LagConfig
from ferrymq.broker.local_cluster import pick_free_port
from ferrymq.client.admin import AdminClient
from ferrymq.namesrv.app import NamesrvApp
from ferrymq.namesrv.config import NamesrvConfig
from ferrymq.store.config import MessageStoreConfig

from .obs_helpers import ObsCluster, wait_for
from .prometheus import PROMETHEUS, Prometheus

# the default run's window; the 5-minute variant of the "healthy group" test is marked slow
FAST_LAG = LagConfig(
    consumer_lag_sample_interval=250,
    consumer_lag_window=4_000,
    consumer_lag_eta_window=3_000,
    consumer_lag_per_queue_metrics=True,
)


@pytest.fixture
def lag_config() -> LagConfig:
    return FAST_LAG


@pytest.fixture
async def obs_cluster(tmp_path: Path, lag_config: LagConfig) -> AsyncIterator[ObsCluster]:
    namesrv = NamesrvApp(
        NamesrvConfig(listen_port=0, bind_address="127.0.0.1", rocketmq_home=tmp_path / "ns")
    )
    await namesrv.start()
    metrics_port = pick_free_port("127.0.0.1")
    config = BrokerConfig(
        broker_cluster_name="ObsCluster",
        broker_name="broker-a",
        broker_ip1="127.0.0.1",
        bind_address="127.0.0.1",
        listen_port=0,
        namesrv_addr=namesrv.addr,
        metrics_port=metrics_port,
    )
    store = MessageStoreConfig(
        store_path_root_dir=tmp_path / "broker-a", mapped_file_size_commit_log=8 * 1024 * 1024
    )
    broker = BrokerApp(config, store, lag_config=lag_config)
    await broker.start()
    cluster = ObsCluster(namesrv, broker, metrics_port)
    try:

        async def registered() -> bool:
            async with AdminClient(namesrv.addr) as admin:
                info = await admin.cluster_info()
            return "broker-a" in info.broker_addr_table

        await wait_for(registered, what="broker registered")
        yield cluster
    finally:
        await broker.stop()
        await namesrv.stop()


@pytest.fixture
def prometheus(tmp_path: Path, obs_cluster: ObsCluster) -> Iterator[Prometheus]:
    if shutil.which("prometheus") is None and not Path(PROMETHEUS).exists():
        pytest.fail("prometheus is not installed (apt-get install prometheus; scripts/setup.sh)")
    prom = Prometheus(tmp_path / "prom", [f"127.0.0.1:{obs_cluster.metrics_port}"])
    prom.start()
    try:
        yield prom
    finally:
        prom.stop()
