"""Fixtures of the client tests: a real NameServer and two real brokers on 127.0.0.1."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from .cluster import LocalCluster, start_cluster


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[LocalCluster]:
    c = await start_cluster(tmp_path)
    try:
        yield c
    finally:
        await c.stop()
