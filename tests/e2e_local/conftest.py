"""A real cluster (NameServer + brokers as child processes on 127.0.0.1) for end-to-end tests."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator

import pytest
from ferrymq.broker.local_cluster import LocalCluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(
        tmp_path_factory.mktemp("e2e"),
        groups=2,
        namesrv_port=0,
        broker_port=0,
        mapped_file_size_commit_log=16 * 1024 * 1024,
    ) as running:
        yield running


async def wait_for(check: Callable[[], bool | Awaitable[bool]], timeout: float, what: str) -> None:
    """Poll ``check`` until true; fail naming ``what`` after ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        result = check()
        if not isinstance(result, bool):
            result = await result
        if result:
            return
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        await asyncio.sleep(0.05)
