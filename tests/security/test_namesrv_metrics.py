"""The NameServer's ``/metrics`` on ``metricsPort`` (real sockets): refused requests by code and
reason and certificate expiry days, with the broker's metric names; routes registered."""

from __future__ import annotations

import asyncio
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from ferrymq.acl.settings import AclSettings
from ferrymq.acl.signature import sign_fields
from ferrymq.broker.local_cluster import pick_free_port
from ferrymq.namesrv.app import NamesrvApp
from ferrymq.namesrv.config import NamesrvConfig
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.tls import TlsSettings
from prometheus_client.parser import text_string_to_metric_families
from security_helpers import ADMIN_AK, ADMIN_SK, PLAIN_ACL, make_ca, make_cert
from test_cli_security import Proc
from test_namesrv_registration_acl import register


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


@pytest.fixture
async def namesrv(tmp_path: Path) -> AsyncIterator[NamesrvApp]:
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(PLAIN_ACL)
    ca = make_ca(tmp_path)
    server = make_cert(tmp_path, ca, "server", days=20)
    app = NamesrvApp(
        NamesrvConfig(
            listen_port=0,
            bind_address="127.0.0.1",
            kv_config_path=tmp_path / "kv.json",
            metrics_port=pick_free_port("127.0.0.1"),
        ),
        acl_settings=AclSettings(acl_enable=True, acl_file_path=acl),
        tls_settings=TlsSettings.model_validate(
            {
                "tls.server.mode": "permissive",
                "tls.server.certPath": str(server.cert),
                "tls.server.keyPath": str(server.key),
            }
        ),
    )
    await app.start()
    yield app
    await app.stop()


async def test_refusals_and_certificate_expiry_on_metrics(namesrv: NamesrvApp) -> None:
    assert namesrv.metrics is not None
    port = namesrv.metrics.port
    before = await asyncio.to_thread(scrape, port)
    refused_key = (
        "ferrymq_acl_refused_requests_total",
        (("code", str(int(RequestCode.PUT_KV_CONFIG))), ("reason", "no_access_key")),
    )
    assert refused_key not in before

    client = RemotingClient()
    try:
        for _ in range(2):
            put = RemotingCommand.request(
                RequestCode.PUT_KV_CONFIG, {"namespace": "ns", "key": "k", "value": "v"}
            )
            answer = await client.invoke(namesrv.addr, put)
            assert answer.code == ResponseCode.NO_PERMISSION
        unsigned = await client.invoke(namesrv.addr, register("a", "127.0.0.1:1", namesrv.addr))
        assert unsigned.code == ResponseCode.NO_PERMISSION
        request = register("a", "127.0.0.1:10911", namesrv.addr)
        sign_fields(request.ext_fields, request.body_bytes(), ADMIN_AK, ADMIN_SK)
        assert (await client.invoke(namesrv.addr, request)).code == ResponseCode.SUCCESS
        # scraped while the registering connection is open (its close drops the broker)
        after = await asyncio.to_thread(scrape, port)
    finally:
        await client.close()

    assert after[refused_key] == 2
    register_key = (
        "ferrymq_acl_refused_requests_total",
        (("code", str(int(RequestCode.REGISTER_BROKER))), ("reason", "no_access_key")),
    )
    assert after[register_key] == 1
    expiry = {k: v for k, v in after.items() if k[0] == "ferrymq_tls_certificate_expiry_days"}
    tls = namesrv.server_tls
    assert tls is not None
    cert_key = (
        "ferrymq_tls_certificate_expiry_days",
        (("path", str(tls.settings.server_cert_path)),),
    )
    assert 19 < expiry[cert_key] <= 20
    assert after[("ferrymq_namesrv_brokers", (("broker", "a"), ("cluster", "Prod")))] == 1
    assert after[("ferrymq_tls_plaintext_refused_total", ())] == 0


def test_metrics_port_from_namesrv_conf(tmp_path: Path) -> None:
    port = pick_free_port("127.0.0.1")
    conf = tmp_path / "namesrv.conf"
    conf.write_text(f"metricsPort={port}\n")
    proc = Proc(["namesrv", "-c", str(conf), "--listen-port", "0", "--bind", "127.0.0.1"], tmp_path)
    try:
        proc.wait_line(r"NameServer ready on port (\d+)")
        found = scrape(port)
        assert ("ferrymq_namesrv_clusters", ()) in found
        # no ACL, no TLS: no security families
        assert not any(name.startswith(("ferrymq_acl", "ferrymq_tls")) for name, _ in found)
    finally:
        proc.stop()
