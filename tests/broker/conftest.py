"""A live NameServer + broker in this process, on 127.0.0.1 port 0, with a small store in tmp_path."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from ferrymq.broker.app import BrokerApp
from ferrymq.broker.config import BrokerConfig
from ferrymq.namesrv.app import NamesrvApp
from ferrymq.namesrv.config import NamesrvConfig
from ferrymq.remoting.client import RemotingClient
from ferrymq.store.config import MessageStoreConfig


def broker_configs(
    root: Path, namesrv_addr: str | None, name: str = "broker-a", **extra: object
) -> tuple[BrokerConfig, MessageStoreConfig]:
    broker = BrokerConfig(
        broker_cluster_name="TestCluster",
        broker_name=name,
        broker_ip1="127.0.0.1",
        bind_address="127.0.0.1",
        listen_port=0,
        namesrv_addr=namesrv_addr,
        **extra,  # type: ignore[arg-type]
    )
    store = MessageStoreConfig(
        store_path_root_dir=root,
        mapped_file_size_commit_log=1024 * 1024,
        mapped_file_size_consume_queue=20 * 1000,
    )
    return broker, store


@pytest.fixture
async def namesrv(tmp_path: Path) -> AsyncIterator[NamesrvApp]:
    app = NamesrvApp(
        NamesrvConfig(listen_port=0, bind_address="127.0.0.1", kv_config_path=tmp_path / "kv.json")
    )
    await app.start()
    yield app
    await app.stop()


@pytest.fixture
async def broker(tmp_path: Path, namesrv: NamesrvApp) -> AsyncIterator[BrokerApp]:
    cfg, store_cfg = broker_configs(tmp_path / "broker-a", namesrv.addr)
    app = BrokerApp(cfg, store_cfg)
    await app.start()
    yield app
    await app.stop()


@pytest.fixture
async def client() -> AsyncIterator[RemotingClient]:
    c = RemotingClient()
    yield c
    await c.close()
