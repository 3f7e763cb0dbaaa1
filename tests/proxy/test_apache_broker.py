"""The Java 5.x client (rocketmq-client-java 5.0.8) through Apache's proxy and through ferrymq's
proxy, both in front of the same Apache RocketMQ 5.4.0 broker: the same scenarios, the same
observable results (tests/proxy/scenarios.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from interop.reference import ApacheCluster

from proxy import scenarios
from proxy.conftest import (
    RENEWAL_CONFIG,
    Endpoint,
    create_topics_and_groups,
    start_ferrymq_proxy,
)

PROXIES = ("apache", "ferrymq")


# cluster start-up (JVMs) and the clients' first installs (npm ci, a venv from PyPI) on a
# loaded 2-core machine: far above the default 300 s; the scenarios bound their own waits
pytestmark = pytest.mark.timeout(1500)


@pytest.fixture(scope="module")
def endpoints(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Endpoint]]:
    with ApacheCluster(tmp_path_factory.mktemp("apache-v5")) as cluster:
        eps = {
            "apache": Endpoint("apache", "apache", ""),
            "ferrymq": Endpoint("ferrymq", "apache", ""),
        }
        create_topics_and_groups(cluster.namesrv_addr, [ep.tag for ep in eps.values()])
        _, _, grpc_port = cluster.start_proxy(extra=RENEWAL_CONFIG)
        ours = start_ferrymq_proxy(cluster.data_dir / "ferrymq-proxy", cluster.namesrv_addr)
        port = next(ours).port
        try:
            yield {
                "apache": Endpoint("apache", "apache", f"127.0.0.1:{grpc_port}"),
                "ferrymq": Endpoint("ferrymq", "apache", f"127.0.0.1:{port}"),
            }
        finally:
            ours.close()


# The renewal scenario holds a message 11 s through each proxy: in the default run it goes through
# ferrymq's proxy and broker (test_ferrymq_broker.py), and both proxies here are compared at the
# wire by test_renewed_handle_acks_match_apache; the Java client through both here: slow run.
# (The retry-to-DLQ scenario ran only in the slow run until Apache's broker was given enough direct
# memory: reference/java.DEFAULT_JVM_OPTS.)
SLOW_HERE = {"renew": pytest.mark.slow}


@pytest.mark.parametrize("proxy", PROXIES)
@pytest.mark.parametrize(
    "scenario",
    [
        pytest.param(name, marks=SLOW_HERE[name]) if name in SLOW_HERE else name
        for name in scenarios.SCENARIOS
    ],
)
def test_java5_scenario(
    scenario: str,
    proxy: str,
    endpoints: dict[str, Endpoint],
    java5_classpath: str,
    tmp_path: Path,
) -> None:
    scenarios.SCENARIOS[scenario](java5_classpath, endpoints[proxy], tmp_path)


@pytest.mark.parametrize("proxy", PROXIES)
def test_node5_client(proxy: str, endpoints: dict[str, Endpoint], tmp_path: Path) -> None:
    scenarios.node_client(endpoints[proxy], tmp_path)


async def test_renewed_handle_acks_match_apache(endpoints: dict[str, Endpoint]) -> None:
    apache = await scenarios.renewed_ack(endpoints["apache"].address, "a")
    ours = await scenarios.renewed_ack(endpoints["ferrymq"].address, "f")
    assert ours == apache
    assert apache == {"attempt": 1, "redelivered_meanwhile": False, "ack": (20000, 20000)}


# --- bad input, as the server answers it (Status in-band), compared between the two proxies ------
async def test_bad_input_answers_match_apache(endpoints: dict[str, Endpoint]) -> None:
    apache = await scenarios.bad_answers(endpoints["apache"].address, "a")
    ours = await scenarios.bad_answers(endpoints["ferrymq"].address, "f")
    assert ours == apache
    # and they are the answers recorded in shared/evidence/v5-reference.md
    assert apache["send_unknown_topic"] == (
        40014,
        "TopicMessageType validate failed, the expected type is UNSPECIFIED, but actual type is NORMAL",
    )
    assert apache["fifo_to_normal"][0] == 40014
    assert apache["receive_invisible_5s"] == (40011, "the invisibleTime is too small. min is 10000")
    assert apache["receive_invisible_13h"] == (
        40011,
        "the invisibleTime is too large. max is 43200000",
    )
    assert apache["ack_forged"] == (50001, "INTERNAL_SERVER_ERROR")
    assert apache["ack_forged_entry"] == (50001, "Parse failed, dataList size 1")
    assert apache["ack_expired"][0] == 40013
    assert apache["route_unknown_topic"][0] == 40402
