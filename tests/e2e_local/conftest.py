"""A real cluster (NameServer + brokers as child processes on 127.0.0.1) for end-to-end tests."""

from __future__ import annotations

from collections.abc import Iterator

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
