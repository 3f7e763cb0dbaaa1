"""A live NameServer + broker in this process, on 127.0.0.1 port 0, with a small store in tmp_path."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from broker_helpers import broker_configs
from ferrymq.broker.app import BrokerApp
from ferrymq.namesrv.app import NamesrvApp
from ferrymq.namesrv.config import NamesrvConfig
from ferrymq.remoting.client import RemotingClient


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
