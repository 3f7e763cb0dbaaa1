"""Fixtures of the interop tests: Apache RocketMQ 5.4.0 (the oracle) and ferrymq, each as processes
on 127.0.0.1, and ``target``, the same interface over both, for differential tests.

Both clusters live for the whole session (an Apache JVM takes tens of seconds to start on a loaded
2-core machine); a test that restarts or kills a broker leaves it running again.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from ferrymq.broker.local_cluster import LocalCluster

from .reference import TARGETS, ApacheCluster, Target, ferrymq_cluster


@pytest.fixture(scope="session")
def apache_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApacheCluster]:
    """One Apache NameServer and one broker (broker-a)."""
    with ApacheCluster(tmp_path_factory.mktemp("apache")) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def ferrymq_processes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """One ferrymq NameServer and one broker (broker-a), as processes."""
    with ferrymq_cluster(tmp_path_factory.mktemp("ferrymq")) as cluster:
        yield cluster


@pytest.fixture(params=TARGETS)
def target(request: pytest.FixtureRequest) -> Target:
    """Apache, then ferrymq: a differential test runs once against each."""
    name: str = request.param
    fixture = "apache_cluster" if name == "apache" else "ferrymq_processes"
    return Target(name, request.getfixturevalue(fixture))
