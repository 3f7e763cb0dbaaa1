"""The cluster CA and the server certificates it signs, as pure functions (``cryptography``).

As Strimzi does, the operator keeps one CA per cluster in a Secret and issues the brokers' server
certificate from it; both are renewed when within ``renewBeforeDays`` of expiry. Keys are ECDSA
P-256: small, fast to make on every renewal, and accepted by Python's ``ssl`` and upstream clients.
Time is a parameter (``now``), so renewal decisions are testable without waiting for a clock.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# Certificates are valid from a little before "now": clocks of nodes and clients differ.
BACKDATE = datetime.timedelta(minutes=5)
CA_VALIDITY_FACTOR = 2  # the CA outlives two server certificates, so a renewal never needs both


@dataclass(frozen=True)
class CertPair:
    """A PEM certificate and its PEM (PKCS#8, unencrypted) private key."""

    cert_pem: str
    key_pem: str


@dataclass(frozen=True)
class CertInfo:
    subject: str
    not_after: datetime.datetime
    # DNS names and IP addresses of the subjectAltName
    names: tuple[str, ...]


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()


def _load_ec_key(key_pem: str) -> ec.EllipticCurvePrivateKey:
    key = serialization.load_pem_private_key(key_pem.encode(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError("the CA key is not an EC key made by this operator")
    return key


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "ferrymq"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name[:64]),
        ]
    )


def new_ca(
    common_name: str, now: datetime.datetime, days: int, key_pem: str | None = None
) -> CertPair:
    """A self-signed CA certificate valid for ``days`` from ``now``.

    With ``key_pem`` (renewal) the CA keeps its key and subject, as Strimzi renews its CA
    certificates: certificates issued before still chain to the renewed CA certificate, and
    clients that still trust the old CA certificate accept certificates issued after.
    """
    key = _load_ec_key(key_pem) if key_pem is not None else _key()
    name = _name(common_name)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return CertPair(cert.public_bytes(serialization.Encoding.PEM).decode(), _key_pem(key))


def _san(names: Sequence[str]) -> x509.SubjectAlternativeName:
    entries: list[x509.GeneralName] = []
    for name in names:
        try:
            entries.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            entries.append(x509.DNSName(name))
    return x509.SubjectAlternativeName(entries)


def issue(
    ca: CertPair, common_name: str, names: Sequence[str], now: datetime.datetime, days: int
) -> CertPair:
    """A certificate signed by ``ca`` for ``names`` (DNS names or IP addresses), valid ``days``
    but never beyond the CA. Usable as server and as client certificate (mutual TLS, probes)."""
    if not names:
        raise ValueError("a server certificate needs at least one DNS name")
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem.encode())
    ca_key = _load_ec_key(ca.key_pem)
    key = _key()
    not_after = min(now + datetime.timedelta(days=days), ca_cert.not_valid_after_utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_san(names), critical=False)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    return CertPair(cert.public_bytes(serialization.Encoding.PEM).decode(), _key_pem(key))


def info(cert_pem: str) -> CertInfo:
    """Subject, expiry and SAN names of a PEM certificate (ValueError when it is not one)."""
    cert = x509.load_pem_x509_certificate(cert_pem.encode())
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        found = [*san.get_values_for_type(x509.DNSName)]
        found += [str(ip) for ip in san.get_values_for_type(x509.IPAddress)]
    except x509.ExtensionNotFound:
        found = []
    return CertInfo(cert.subject.rfc4514_string(), cert.not_valid_after_utc, tuple(found))


def signed_by(cert_pem: str, ca_pem: str) -> bool:
    """Was ``cert_pem`` issued by the CA in ``ca_pem`` (signature checked)?"""
    cert = x509.load_pem_x509_certificate(cert_pem.encode())
    ca_cert = x509.load_pem_x509_certificate(ca_pem.encode())
    try:
        cert.verify_directly_issued_by(ca_cert)
    except (InvalidSignature, ValueError, TypeError):
        return False
    return True


def key_matches(cert_pem: str, key_pem: str) -> bool:
    """Is ``key_pem`` (PEM, unencrypted) the private key of ``cert_pem``? ValueError when the
    key cannot be read."""
    cert = x509.load_pem_x509_certificate(cert_pem.encode())
    try:
        key = serialization.load_pem_private_key(key_pem.encode(), password=None)
    except TypeError as error:  # encrypted: the broker would need tls.server.keyPassword
        raise ValueError(f"the key is encrypted ({error})") from None
    public = serialization.PublicFormat.SubjectPublicKeyInfo
    encoding = serialization.Encoding.DER
    return bool(
        key.public_key().public_bytes(encoding, public)
        == cert.public_key().public_bytes(encoding, public)
    )


def needs_renewal(not_after: datetime.datetime, now: datetime.datetime, renew_days: int) -> bool:
    """Inside the renewal window (or expired)."""
    return not_after - now <= datetime.timedelta(days=renew_days)
