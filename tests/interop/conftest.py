"""Fixtures of the interop tests: Apache RocketMQ 5.4.0 (the oracle) and ferrymq, each as processes
on 127.0.0.1, and ``target``, the same interface over both, for differential tests.

Both clusters live for the whole session (an Apache JVM takes tens of seconds to start on a loaded
2-core machine); a test that restarts or kills a broker leaves it running again.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from ferrymq.broker.local_cluster import LocalCluster

from .java_runner import CLIENTS, JavaRunners, JavaScenarios
from .reference import TARGETS, ApacheCluster, Target, ferrymq_cluster

# Broker settings both clusters get: SQL92 filtering on (upstream's default is off), the trace
# topic created (off by default), and the transaction check-back after 3 s instead of upstream's
# 6 s timeout and 30 s (ferrymq 60 s) period.
BROKER_CONF = {
    "enablePropertyFilter": "true",
    "traceTopicEnable": "true",
    "transactionTimeOut": "3000",
    "transactionCheckInterval": "1000",
}


@pytest.fixture(scope="session")
def apache_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApacheCluster]:
    """One Apache NameServer and one broker (broker-a)."""
    with ApacheCluster(tmp_path_factory.mktemp("apache"), broker_conf=BROKER_CONF) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def ferrymq_processes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """One ferrymq NameServer and one broker (broker-a), as processes."""
    with ferrymq_cluster(tmp_path_factory.mktemp("ferrymq"), broker_conf=BROKER_CONF) as cluster:
        yield cluster


@pytest.fixture(params=TARGETS)
def target(request: pytest.FixtureRequest) -> Target:
    """Apache, then ferrymq: a differential test runs once against each."""
    name: str = request.param
    fixture = "apache_cluster" if name == "apache" else "ferrymq_processes"
    return Target(name, request.getfixturevalue(fixture))


@pytest.fixture
def targets(apache_cluster: ApacheCluster, ferrymq_processes: LocalCluster) -> list[Target]:
    """Both, for a test that compares them itself: the oracle first."""
    return [Target("apache", apache_cluster), Target("ferrymq", ferrymq_processes)]


@pytest.fixture(scope="session")
def java_runners(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JavaRunners]:
    """The scenario JVMs (rocketmq-client 4.9.8 and 5.4.0), built and started once per session."""
    runners = JavaRunners(tmp_path_factory.mktemp("java"))
    try:
        yield runners
    finally:
        runners.close()


# rocketmq-client 4.9.8 (what most applications run) in the default run; 5.4.0's remoting client
# in the slow run: both versions made the default run longer than its 60 minutes (CI: 64 min).
CLIENT_PARAMS = [
    pytest.param(client, marks=pytest.mark.slow) if client != "4.9.8" else client
    for client in sorted(CLIENTS)
]


@pytest.fixture(scope="session", params=CLIENT_PARAMS)
def java_client(request: pytest.FixtureRequest, java_runners: JavaRunners) -> JavaScenarios:
    """The scenario JVM on rocketmq-client 4.9.8, then on 5.4.0 (slow run)."""
    client: str = request.param
    return java_runners.get(client)


@pytest.fixture(scope="module", params=CLIENT_PARAMS)
def module_java_client(request: pytest.FixtureRequest, java_runners: JavaRunners) -> JavaScenarios:
    """The same JVMs for a module with clusters of its own (test_java_acl.py, test_java_tls.py):
    pytest orders session-scoped parameters across modules, which would split such a module by
    client version and start its clusters twice; with this one its tests stay together."""
    client: str = request.param
    return java_runners.get(client)
