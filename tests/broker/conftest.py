"""A live NameServer + broker in this process, on 127.0.0.1 port 0, with a small store in tmp_path."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from broker_helpers import broker_configs
from ferrymq.broker.app import BrokerApp
from ferrymq.namesrv.app import NamesrvApp
from ferrymq.remoting.client import RemotingClient


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
