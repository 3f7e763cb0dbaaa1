"""The Java 5.x client (rocketmq-client-java 5.0.8) through Apache's proxy and through ferrymq's
proxy, both in front of the same Apache RocketMQ 5.4.0 broker: the same scenarios, the same
observable results (tests/proxy/scenarios.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from interop.reference import ApacheCluster

from proxy import scenarios
from proxy.conftest import Endpoint, create_topics_and_groups, start_ferrymq_proxy

PROXIES = ("apache", "ferrymq")


@pytest.fixture(scope="module")
def endpoints(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Endpoint]]:
    with ApacheCluster(tmp_path_factory.mktemp("apache-v5")) as cluster:
        eps = {
            "apache": Endpoint("apache", "apache", ""),
            "ferrymq": Endpoint("ferrymq", "apache", ""),
        }
        create_topics_and_groups(cluster.namesrv_addr, [ep.tag for ep in eps.values()])
        _, _, grpc_port = cluster.start_proxy()
        ours = start_ferrymq_proxy(cluster.data_dir / "ferrymq-proxy", cluster.namesrv_addr)
        port = next(ours).port
        try:
            yield {
                "apache": Endpoint("apache", "apache", f"127.0.0.1:{grpc_port}"),
                "ferrymq": Endpoint("ferrymq", "apache", f"127.0.0.1:{port}"),
            }
        finally:
            ours.close()


SCENARIOS: dict[str, Callable[[str, Endpoint, Path], object]] = {
    "normal": scenarios.normal,
    "fifo": scenarios.fifo,
    "delay": scenarios.delay,
    "transaction": scenarios.transaction,
    "invisible": scenarios.invisible,
    "change_invisible": scenarios.change_invisible,
    "push_to_dlq": scenarios.push_to_dlq,
    "bad_input": scenarios.bad_input,
}


@pytest.mark.parametrize("proxy", PROXIES)
@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_java5_scenario(
    scenario: str,
    proxy: str,
    endpoints: dict[str, Endpoint],
    java5_classpath: str,
    tmp_path: Path,
) -> None:
    SCENARIOS[scenario](java5_classpath, endpoints[proxy], tmp_path)


# --- bad input, as the server answers it (Status in-band), compared between the two proxies ------
async def _bad_answers(address: str, tag: str) -> dict[str, tuple[int, str]]:
    """What a proxy answers to each bad request: (code, message) per case."""
    from proxy.raw_client import RawClient

    out: dict[str, tuple[int, str]] = {}
    group = f"raw_bad_{tag}"
    client = RawClient(address)
    try:
        r = await client.query_route("NoSuchTopicRaw")
        out["route_unknown_topic"] = (r.status.code, r.status.message.split("\n")[0][:60])
        s = await client.send("NoSuchTopicRaw")
        out["send_unknown_topic"] = (s.status.code, s.status.message.split("ProxyException: ")[-1])
        s = await client.send("V5Normal", group="g1")
        out["fifo_to_normal"] = (s.status.code, s.status.message.split("ProxyException: ")[-1])
        await client.consumer_settings(group, "V5Normal")
        for seconds, case in ((5, "receive_invisible_5s"), (13 * 3600, "receive_invisible_13h")):
            frames = await client.receive(group, "V5Normal", seconds)
            kinds = [f.WhichOneof("content") for f in frames]
            assert kinds == ["status", "delivery_timestamp"], (case, kinds)
            out[case] = (frames[0].status.code, frames[0].status.message)
        a = await client.ack(group, "V5Normal", "forged-handle")
        out["ack_forged"] = (a.status.code, a.status.message)
        out["ack_forged_entry"] = (a.entries[0].status.code, a.entries[0].status.message[:29])
        a = await client.ack(group, "V5Normal", "0 1000 1000 0 0 broker-a 0 0 0")
        out["ack_expired"] = (a.status.code, a.status.message)
        c = await client.change_invisible(group, "V5Normal", "forged-handle", 30)
        out["change_forged"] = (c.status.code, c.status.message[:29])
        c = await client.change_invisible(group, "V5Normal", "forged-handle", 13 * 3600)
        out["change_13h"] = (c.status.code, c.status.message)
    finally:
        await client.close()
    return out


async def test_bad_input_answers_match_apache(endpoints: dict[str, Endpoint]) -> None:
    apache = await _bad_answers(endpoints["apache"].address, "a")
    ours = await _bad_answers(endpoints["ferrymq"].address, "f")
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
