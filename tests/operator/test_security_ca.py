"""The cluster CA and server certificates: issuing, SANs, renewal decisions, and a real TLS
handshake on 127.0.0.1 with what the operator issues (Python's ssl, as the broker uses)."""

from __future__ import annotations

import datetime
import socket
import ssl
import threading
from pathlib import Path

import pytest
from ferrymq_operator.builders.names import Owner
from ferrymq_operator.models import TlsSpec
from ferrymq_operator.security import builders, ca, decisions

NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
DAY = datetime.timedelta(days=1)


@pytest.fixture(scope="module")
def authority() -> ca.CertPair:
    return ca.new_ca("orders ferrymq cluster CA", NOW, 730)


def test_server_cert_is_signed_by_the_ca_and_names_the_services(
    authority: ca.CertPair, broker_owner: Owner
) -> None:
    names = builders.server_names(
        broker_owner, builders.service_names(broker_owner, "broker"), "cluster.local"
    )
    pair = ca.issue(authority, "orders broker", names, NOW, 365)
    info = ca.info(pair.cert_pem)
    assert "*.orders-broker-hs.prod.svc.cluster.local" in info.names
    assert "127.0.0.1" in info.names and "localhost" in info.names
    assert info.not_after == NOW + 365 * DAY
    assert ca.signed_by(pair.cert_pem, authority.cert_pem)
    other = ca.new_ca("someone else", NOW, 730)
    assert not ca.signed_by(pair.cert_pem, other.cert_pem)


def test_server_cert_never_outlives_its_ca(authority: ca.CertPair) -> None:
    pair = ca.issue(authority, "b", ["localhost"], NOW + 700 * DAY, 365)
    assert ca.info(pair.cert_pem).not_after == ca.info(authority.cert_pem).not_after


def test_renewal_window() -> None:
    expiry = NOW + 40 * DAY
    assert not ca.needs_renewal(expiry, NOW, 30)
    assert ca.needs_renewal(expiry, NOW + 10 * DAY, 30)
    assert ca.needs_renewal(expiry, NOW + 50 * DAY, 30)  # expired


def test_plan_ca_keeps_a_valid_ca_and_renews_near_expiry(authority: ca.CertPair) -> None:
    tls = TlsSpec(validity_days=365, renew_before_days=30)
    data = {builders.CA_CERT_KEY: authority.cert_pem, builders.CA_KEY_KEY: authority.key_pem}
    assert decisions.plan_ca(data, tls, "orders", NOW + DAY) is None
    renewed = decisions.plan_ca(data, tls, "orders", NOW + 710 * DAY)
    assert renewed is not None and renewed.cert_pem != authority.cert_pem
    assert decisions.plan_ca(None, tls, "orders", NOW) is not None
    broken = {builders.CA_CERT_KEY: "not a pem", builders.CA_KEY_KEY: "x"}
    assert decisions.plan_ca(broken, tls, "orders", NOW) is not None


def test_plan_server_cert_reissues_for_new_ca_missing_names_or_expiry(
    authority: ca.CertPair,
) -> None:
    tls = TlsSpec(validity_days=100, renew_before_days=10)
    names = ["a.svc", "127.0.0.1"]
    first = decisions.plan_server_cert(None, authority, tls, "orders", names, NOW)
    assert first is not None and first[builders.TLS_CA_KEY] == authority.cert_pem
    assert decisions.plan_server_cert(first, authority, tls, "orders", names, NOW + DAY) is None
    # inside the renewal window
    assert decisions.plan_server_cert(first, authority, tls, "orders", names, NOW + 95 * DAY)
    # a name the certificate lacks
    assert decisions.plan_server_cert(first, authority, tls, "orders", [*names, "b.svc"], NOW)
    # the CA was renewed: the old certificate no longer chains to the CA in the Secret
    new_ca = ca.new_ca("renewed", NOW, 730)
    again = decisions.plan_server_cert(first, new_ca, tls, "orders", names, NOW)
    assert again is not None and ca.signed_by(again[builders.TLS_CERT_KEY], new_ca.cert_pem)


def test_issued_certificate_serves_tls_with_hostname_check(
    authority: ca.CertPair, tmp_path: Path
) -> None:
    pair = ca.issue(
        authority, "b", ["localhost", "127.0.0.1"], datetime.datetime.now(datetime.UTC), 2
    )
    (tmp_path / "tls.crt").write_text(pair.cert_pem)
    (tmp_path / "tls.key").write_text(pair.key_pem)
    (tmp_path / "ca.crt").write_text(authority.cert_pem)
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    client_ctx = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(10)
        port = listener.getsockname()[1]
        received: list[bytes] = []

        def serve() -> None:
            conn, _ = listener.accept()
            with server_ctx.wrap_socket(conn, server_side=True) as tls_conn:
                received.append(tls_conn.recv(5))
                tls_conn.sendall(b"pong")

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        with (
            socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
            client_ctx.wrap_socket(raw, server_hostname="localhost") as conn,
        ):
            conn.sendall(b"ping!")
            assert conn.recv(4) == b"pong"
        thread.join(timeout=10)
    assert received == [b"ping!"]
    # the same certificate is refused for a name it does not carry
    wrong = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(10)
        port = listener.getsockname()[1]

        def serve_once() -> None:
            conn, _ = listener.accept()
            try:
                with server_ctx.wrap_socket(conn, server_side=True):
                    pass
            except (ssl.SSLError, OSError):
                pass  # the client aborts the handshake

        thread = threading.Thread(target=serve_once, daemon=True)
        thread.start()
        with (
            socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
            pytest.raises(ssl.SSLCertVerificationError),
        ):
            wrong.wrap_socket(raw, server_hostname="elsewhere.example")
        thread.join(timeout=10)


def test_ca_renewal_keeps_the_key_so_old_and_new_certificates_stay_trusted(
    authority: ca.CertPair,
) -> None:
    tls = TlsSpec(validity_days=365, renew_before_days=30)
    data = {builders.CA_CERT_KEY: authority.cert_pem, builders.CA_KEY_KEY: authority.key_pem}
    before = ca.issue(authority, "b", ["localhost"], NOW, 365)
    renewed = decisions.plan_ca(data, tls, "orders", NOW + 710 * DAY)
    assert renewed is not None and renewed.key_pem == authority.key_pem
    assert ca.info(renewed.cert_pem).not_after > ca.info(authority.cert_pem).not_after
    after = ca.issue(renewed, "b", ["localhost"], NOW + 710 * DAY, 365)
    assert ca.signed_by(before.cert_pem, renewed.cert_pem)  # issued before, trusted after
    assert ca.signed_by(after.cert_pem, authority.cert_pem)  # old trust accepts the new one
    # the broker's certificate is still re-issued, to carry the renewed CA in ca.crt
    issued = decisions.plan_server_cert(None, authority, tls, "orders", ["localhost"], NOW)
    assert issued is not None
    again = decisions.plan_server_cert(issued, renewed, tls, "orders", ["localhost"], NOW)
    assert again is not None and again[builders.TLS_CA_KEY] == renewed.cert_pem


def test_trust_bundle_keeps_the_former_component_ca_during_the_migration(
    authority: ca.CertPair,
) -> None:
    """An existing per-component CA (before the cluster CA) stays in ca.crt while valid: a pod
    still presenting a certificate from it is accepted by pods that already trust the bundle."""
    tls = TlsSpec(validity_days=90, renew_before_days=30)
    old = ca.new_ca("orders old CA", NOW, 180)
    legacy = {builders.CA_CERT_KEY: old.cert_pem, builders.CA_KEY_KEY: old.key_pem}
    bundle = decisions.trust_bundle(authority, legacy, NOW)
    assert bundle.startswith(authority.cert_pem) and old.cert_pem in bundle
    assert decisions.trust_bundle(authority, None, NOW) == authority.cert_pem
    assert decisions.trust_bundle(authority, legacy, NOW + 200 * DAY) == authority.cert_pem
    own = {builders.CA_CERT_KEY: authority.cert_pem, builders.CA_KEY_KEY: authority.key_pem}
    assert decisions.trust_bundle(authority, own, NOW) == authority.cert_pem
    # a certificate of the former CA is re-issued from the cluster CA, ca.crt the bundle
    before = ca.issue(old, "orders", ["localhost"], NOW, 90)
    existing = {
        builders.TLS_CERT_KEY: before.cert_pem,
        builders.TLS_KEY_KEY: before.key_pem,
        builders.TLS_CA_KEY: old.cert_pem,
    }
    issued = decisions.plan_server_cert(
        existing, authority, tls, "orders", ["localhost"], NOW, bundle
    )
    assert issued is not None and issued[builders.TLS_CA_KEY] == bundle
    assert ca.signed_by(issued[builders.TLS_CERT_KEY], authority.cert_pem)
    kept = decisions.plan_server_cert(issued, authority, tls, "orders", ["localhost"], NOW, bundle)
    assert kept is None
    # once the former CA has expired the bundle shrinks, and ca.crt follows
    later = decisions.trust_bundle(authority, legacy, NOW + 200 * DAY)
    shrunk = decisions.plan_server_cert(
        issued, authority, tls, "orders", ["localhost"], NOW + DAY, later
    )
    assert shrunk is not None and shrunk[builders.TLS_CA_KEY] == authority.cert_pem
