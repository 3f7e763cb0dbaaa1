"""TLS on the remoting port, over real sockets with certificates made in the test.

enforcing refuses plaintext (with a log line) and keeps serving TLS clients; permissive serves
both on one port; a client that requires TLS fails clearly against a plaintext server; mutual TLS
with tls.server.need.client.auth=require; certificates reloaded for new connections; settings
from broker.conf and tls.config.file; a broker serving a producer over TLS, with expiry metrics.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from ferrymq.acl.metrics import SecurityCollector
from ferrymq.broker.app import BrokerApp
from ferrymq.broker.config import BrokerConfig
from ferrymq.client.credentials import ClientSecurity
from ferrymq.client.instance import ClientInstance
from ferrymq.client.producer import Producer
from ferrymq.message import Message
from ferrymq.namesrv.app import NamesrvApp
from ferrymq.namesrv.config import NamesrvConfig
from ferrymq.properties import ConfigError
from ferrymq.remoting.blocking import BlockingConnection
from ferrymq.remoting.channel import Channel
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.errors import RemotingConnectError, RemotingError
from ferrymq.remoting.server import RemotingServer
from ferrymq.remoting.tls import ClientTls, ServerTls, TlsMode, TlsSettings, load_tls_settings
from ferrymq.store.config import MessageStoreConfig
from prometheus_client import CollectorRegistry, generate_latest
from security_helpers import CertFiles, make_ca, make_cert

ECHO = 9999


def echo(channel: Channel, request: RemotingCommand) -> RemotingCommand:
    return request.response(0, "ok", body=request.body_bytes())


@pytest.fixture
def pki(tmp_path: Path) -> dict[str, CertFiles]:
    ca = make_ca(tmp_path)
    other_ca = make_ca(tmp_path, "other-ca")
    return {
        "ca": ca,
        "server": make_cert(tmp_path, ca, "server"),
        "client": make_cert(tmp_path, ca, "client", server=False),
        "stranger": make_cert(tmp_path, other_ca, "stranger", server=False),
    }


def tls_settings(pki: dict[str, CertFiles], mode: str, **extra: object) -> TlsSettings:
    return TlsSettings.model_validate(
        {
            "tls.server.mode": mode,
            "tls.server.certPath": str(pki["server"].cert),
            "tls.server.keyPath": str(pki["server"].key),
            **extra,
        }
    )


async def start_server(tls: ServerTls | None) -> RemotingServer:
    server = RemotingServer("127.0.0.1", 0, name="tls-test", tls=tls)
    server.register(ECHO, echo)
    await server.start()
    return server


async def echo_call(client: RemotingClient, server: RemotingServer) -> RemotingCommand:
    return await client.invoke(
        f"127.0.0.1:{server.port}", RemotingCommand.request(ECHO, body=b"ping"), timeout=5
    )


@pytest.fixture
async def clients(pki: dict[str, CertFiles]) -> AsyncIterator[dict[str, RemotingClient]]:
    trust = ClientTls(trust_cert_path=pki["ca"].cert, auth_server=True)
    mutual = ClientTls(
        trust_cert_path=pki["ca"].cert,
        auth_server=True,
        cert_path=pki["client"].cert,
        key_path=pki["client"].key,
    )
    stranger = ClientTls(cert_path=pki["stranger"].cert, key_path=pki["stranger"].key)
    made = {
        "plain": RemotingClient(),
        "tls": RemotingClient(ssl_context=trust.context()),
        "mutual": RemotingClient(ssl_context=mutual.context()),
        "stranger": RemotingClient(ssl_context=stranger.context()),
    }
    yield made
    for c in made.values():
        await c.close()


async def test_enforcing_refuses_plaintext_and_keeps_serving(
    pki: dict[str, CertFiles],
    clients: dict[str, RemotingClient],
    caplog: pytest.LogCaptureFixture,
) -> None:
    tls = ServerTls(tls_settings(pki, "enforcing"))
    server = await start_server(tls)
    try:
        assert (await echo_call(clients["tls"], server)).body_bytes() == b"ping"
        with caplog.at_level(logging.WARNING), pytest.raises(RemotingError):
            await echo_call(clients["plain"], server)
        assert any(
            "refused a plaintext connection" in r.getMessage()
            and "tls.server.mode=enforcing" in r.getMessage()
            for r in caplog.records
        )
        assert tls.plaintext_refused == 1
        # the TLS client is still served, on its connection and on a new one
        assert (await echo_call(clients["tls"], server)).body_bytes() == b"ping"
        await clients["tls"].close()
        assert (await echo_call(clients["tls"], server)).body_bytes() == b"ping"
    finally:
        await server.stop()


def plaintext_request_then_read(port: int) -> bytes:
    """A whole plaintext request in one write, then what the server sends back until it closes
    (ConnectionResetError when it resets)."""
    frame = RemotingCommand.request(ECHO, body=b"ping").to_bytes()
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(frame)
        return sock.recv(1024)


async def test_enforcing_closes_a_plaintext_connection_after_reading_it(
    pki: dict[str, CertFiles],
) -> None:
    """As upstream (Netty reads, then closes): the client sees an orderly close (FIN), not a
    reset, so rocketmq-client 4.9.8 reports the same error as against Apache RocketMQ 5.4.0."""
    server = await start_server(ServerTls(tls_settings(pki, "enforcing")))
    try:
        for _ in range(3):
            assert await asyncio.to_thread(plaintext_request_then_read, server.port) == b""
    finally:
        await server.stop()


async def test_permissive_serves_plaintext_and_tls_on_one_port(
    pki: dict[str, CertFiles], clients: dict[str, RemotingClient]
) -> None:
    server = await start_server(ServerTls(tls_settings(pki, "permissive")))
    try:
        for name in ("plain", "tls", "plain", "tls"):
            assert (await echo_call(clients[name], server)).body_bytes() == b"ping", name
        channel = clients["tls"].open_channel(f"127.0.0.1:{server.port}")
        assert channel is not None and channel._transport is not None
        assert channel._transport.get_extra_info("ssl_object") is not None
    finally:
        await server.stop()


async def test_client_requiring_tls_fails_clearly_against_a_disabled_server(
    clients: dict[str, RemotingClient], pki: dict[str, CertFiles]
) -> None:
    server = await start_server(None)
    try:
        assert (await echo_call(clients["plain"], server)).body_bytes() == b"ping"
        with pytest.raises(RemotingConnectError, match="TLS") as info:
            await echo_call(clients["tls"], server)
        assert f"127.0.0.1:{server.port}" in str(info.value)
        # the blocking transport (SyncProducer) says the same
        ctx = ClientTls(trust_cert_path=pki["ca"].cert, auth_server=True).context()
        conn = BlockingConnection(f"127.0.0.1:{server.port}", ssl_context=ctx)
        with pytest.raises(RemotingConnectError, match="TLS handshake"):
            await asyncio.to_thread(conn.invoke, RemotingCommand.request(ECHO), 5.0)
        # and the server still serves plaintext clients
        assert (await echo_call(clients["plain"], server)).body_bytes() == b"ping"
    finally:
        await server.stop()


async def test_mutual_tls_requires_a_client_certificate_from_the_trusted_ca(
    pki: dict[str, CertFiles], clients: dict[str, RemotingClient]
) -> None:
    tls = ServerTls(
        tls_settings(
            pki,
            "enforcing",
            **{
                "tls.server.need.client.auth": "require",
                "tls.server.trustCertPath": str(pki["ca"].cert),
            },
        )
    )
    server = await start_server(tls)
    try:
        assert (await echo_call(clients["mutual"], server)).body_bytes() == b"ping"
        for name in ("tls", "stranger"):  # no certificate; one from another CA
            with pytest.raises(RemotingError):
                await echo_call(clients[name], server)
        assert (await echo_call(clients["mutual"], server)).body_bytes() == b"ping"
    finally:
        await server.stop()


async def test_client_that_verifies_refuses_an_untrusted_server(
    tmp_path: Path, pki: dict[str, CertFiles], clients: dict[str, RemotingClient]
) -> None:
    rogue_ca = make_ca(tmp_path, "rogue-ca")
    rogue = make_cert(tmp_path, rogue_ca, "rogue")
    settings = TlsSettings.model_validate(
        {
            "tls.server.mode": "enforcing",
            "tls.server.certPath": str(rogue.cert),
            "tls.server.keyPath": str(rogue.key),
        }
    )
    server = await start_server(ServerTls(settings))
    try:
        with pytest.raises(RemotingConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            await echo_call(clients["tls"], server)
    finally:
        await server.stop()


async def test_certificate_change_reaches_new_connections(
    tmp_path: Path, pki: dict[str, CertFiles], clients: dict[str, RemotingClient]
) -> None:
    tls = ServerTls(tls_settings(pki, "enforcing"), recheck_s=0.0)
    server = await start_server(tls)
    addr = f"127.0.0.1:{server.port}"

    def peer_cert() -> bytes:
        channel = clients["tls"].open_channel(addr)
        assert channel is not None and channel._transport is not None
        ssl_object = channel._transport.get_extra_info("ssl_object")
        der = ssl_object.getpeercert(binary_form=True)
        assert der is not None
        return bytes(der)

    try:
        await echo_call(clients["tls"], server)
        first = peer_cert()
        renewed = make_cert(tmp_path / ".." / tmp_path.name, pki["ca"], "server-renewed")
        pki["server"].cert.write_bytes(renewed.cert.read_bytes())
        pki["server"].key.write_bytes(renewed.key.read_bytes())
        # the established connection keeps working (and keeps its certificate)
        assert (await echo_call(clients["tls"], server)).body_bytes() == b"ping"
        assert peer_cert() == first
        await clients["tls"].close()
        await echo_call(clients["tls"], server)
        assert peer_cert() == ssl.PEM_cert_to_DER_cert(renewed.cert.read_text())
        assert tls.reloads == 1
        # a broken replacement keeps the working certificate
        pki["server"].cert.write_text("not a certificate")
        await clients["tls"].close()
        assert (await echo_call(clients["tls"], server)).body_bytes() == b"ping"
        assert tls.reloads == 1
    finally:
        await server.stop()


def test_settings_from_broker_conf_and_tls_config_file(
    tmp_path: Path, pki: dict[str, CertFiles]
) -> None:
    tls_file = tmp_path / "tls.properties"
    tls_file.write_text(
        f"tls.server.certPath={pki['server'].cert}\n"
        f"tls.server.keyPath={pki['server'].key}\n"
        "tls.server.need.client.auth=optional\n"
    )
    conf = tmp_path / "broker.conf"
    conf.write_text(
        f"brokerName=b\ntls.server.mode=permissive\ntls.config.file={tls_file}\n"
        "tls.server.need.client.auth=none\n"
    )
    settings = load_tls_settings(conf, env={})
    assert settings.server_mode is TlsMode.PERMISSIVE
    assert settings.server_cert_path == pki["server"].cert
    assert settings.server_need_client_auth.value == "optional"  # the tls file wins

    conf.write_text("tls.server.mode=enforcing\n")
    with pytest.raises(ConfigError, match=r"tls\.server\.certPath"):
        load_tls_settings(conf, env={})
    conf.write_text("tls.server.mode=sometimes\n")
    with pytest.raises(ConfigError, match=r"tls\.server\.mode"):
        load_tls_settings(conf, env={})
    bad = tls_settings(pki, "enforcing")
    bad = bad.model_copy(update={"server_key_path": tmp_path / "missing.key"})
    with pytest.raises(ConfigError, match=r"missing\.key"):
        ServerTls(bad)


async def test_broker_serves_a_producer_over_tls_and_reports_expiry(
    tmp_path: Path, pki: dict[str, CertFiles]
) -> None:
    namesrv = NamesrvApp(
        NamesrvConfig(listen_port=0, bind_address="127.0.0.1", kv_config_path=tmp_path / "kv.json"),
        tls_settings=tls_settings(pki, "permissive"),
    )
    await namesrv.start()
    cfg = BrokerConfig(
        broker_cluster_name="TestCluster",
        broker_name="broker-tls",
        broker_ip1="127.0.0.1",
        bind_address="127.0.0.1",
        listen_port=0,
        namesrv_addr=namesrv.addr,
    )
    store = MessageStoreConfig(
        store_path_root_dir=tmp_path / "store",
        mapped_file_size_commit_log=1024 * 1024,
        mapped_file_size_consume_queue=20 * 1000,
    )
    broker = BrokerApp(cfg, store, tls_settings=tls_settings(pki, "enforcing"))
    await broker.start()
    instance = ClientInstance(
        namesrv.addr,
        security=ClientSecurity(tls=ClientTls(trust_cert_path=pki["ca"].cert, auth_server=True)),
    )
    producer = Producer("pg", instance=instance)
    await producer.start()
    try:
        result = await producer.send(Message("TlsTopic", b"secret"))
        assert result.msg_id
        assert broker.server_tls is not None
        registry = CollectorRegistry()
        registry.register(
            SecurityCollector({"broker": "broker-tls"}, broker.acl, broker.server_tls)
        )
        text = generate_latest(registry).decode()
        line = next(
            ln for ln in text.splitlines() if ln.startswith("ferrymq_tls_certificate_expiry_days{")
        )
        days = float(line.rsplit(" ", 1)[1])
        assert 9.9 < days <= 10.0
    finally:
        await producer.shutdown()
        await instance.shutdown()
        await broker.stop()
        await namesrv.stop()


async def test_silent_and_vanishing_peers_do_not_block_the_port(
    pki: dict[str, CertFiles], clients: dict[str, RemotingClient]
) -> None:
    server = await start_server(ServerTls(tls_settings(pki, "permissive")))
    try:
        # one peer connects and says nothing, another connects and leaves at once
        _, silent = await asyncio.open_connection("127.0.0.1", server.port)
        _, gone = await asyncio.open_connection("127.0.0.1", server.port)
        gone.close()
        for name in ("plain", "tls"):
            assert (await echo_call(clients[name], server)).body_bytes() == b"ping", name
        silent.close()
        # a TLS record that is not a handshake a server can finish: refused, port still serving
        _, garbage = await asyncio.open_connection("127.0.0.1", server.port)
        garbage.write(b"\x16\x03\x01\x00\x05hello")
        await garbage.drain()
        garbage.close()
        assert (await echo_call(clients["tls"], server)).body_bytes() == b"ping"
    finally:
        await server.stop()
