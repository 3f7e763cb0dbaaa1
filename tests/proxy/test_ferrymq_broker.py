"""The Java 5.x client (rocketmq-client-java 5.0.8) through ferrymq's proxy in front of ferrymq's
own brokers (POP over remoting): the scenarios that test_apache_broker.py runs against Apache's
proxy, with the same checks (tests/proxy/scenarios.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from interop.reference import ferrymq_cluster

from proxy import scenarios
from proxy.conftest import Endpoint, create_topics_and_groups, start_ferrymq_proxy


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Endpoint]:
    data = tmp_path_factory.mktemp("ferrymq-v5")
    with ferrymq_cluster(data / "cluster") as cluster:
        ep = Endpoint("ferrymq", "ferrymq", "")
        create_topics_and_groups(cluster.namesrv_addr, [ep.tag])
        ours = start_ferrymq_proxy(data / "proxy", cluster.namesrv_addr)
        port = next(ours).port
        try:
            yield Endpoint("ferrymq", "ferrymq", f"127.0.0.1:{port}")
        finally:
            ours.close()


@pytest.mark.parametrize("scenario", list(scenarios.SCENARIOS))
def test_java5_scenario(
    scenario: str, endpoint: Endpoint, java5_classpath: str, tmp_path: Path
) -> None:
    scenarios.SCENARIOS[scenario](java5_classpath, endpoint, tmp_path)


async def test_bad_input_answers(endpoint: Endpoint) -> None:
    """The server's answers to bad requests are Apache's (as recorded in v5-reference.md)."""
    got = await scenarios.bad_answers(endpoint.address, "x")
    assert got["send_unknown_topic"] == (
        40014,
        "TopicMessageType validate failed, the expected type is UNSPECIFIED, but actual type is NORMAL",
    )
    assert got["fifo_to_normal"] == (
        40014,
        "TopicMessageType validate failed, the expected type is NORMAL, but actual type is FIFO",
    )
    assert got["receive_invisible_5s"] == (40011, "the invisibleTime is too small. min is 10000")
    assert got["receive_invisible_13h"] == (
        40011,
        "the invisibleTime is too large. max is 43200000",
    )
    assert got["ack_forged"] == (50001, "INTERNAL_SERVER_ERROR")
    assert got["ack_forged_entry"] == (50001, "Parse failed, dataList size 1")
    assert got["ack_expired"] == (40013, "INVALID_RECEIPT_HANDLE")
    assert got["change_forged"] == (50001, "Parse failed, dataList size 1")
    assert got["change_13h"] == (40011, "the invisibleTime is too large. max is 43200000")
    assert got["route_unknown_topic"][0] == 40402
