"""Certificates for TLS set-ups without a PKI at hand: a self-signed CA and certificates it signs
(EC P-256, SHA-256), written as PEM files. Used by the tests and benchmarks, and by anyone trying
TLS locally (``tls.server.certPath``/``keyPath``, ``tls.server.trustCertPath``). The
``cryptography`` package does the work; nothing here is hand-written crypto."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass(frozen=True, slots=True)
class CertFiles:
    cert: Path
    key: Path


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def make_ca(directory: Path, name: str = "ferrymq-ca", days: int = 365) -> CertFiles:
    """A self-signed CA certificate and key, ``<name>.crt`` and ``<name>.key`` in ``directory``."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    files = CertFiles(directory / f"{name}.crt", directory / f"{name}.key")
    files.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(key, files.key)
    return files


def make_cert(
    directory: Path,
    ca: CertFiles,
    name: str,
    *,
    days: int = 90,
    hosts: tuple[str, ...] = ("localhost", "127.0.0.1"),
) -> CertFiles:
    """A certificate for ``name`` signed by ``ca``, valid for ``hosts`` (DNS names or IPs;
    empty for a client certificate)."""
    ca_key = serialization.load_pem_private_key(ca.key.read_bytes(), None)
    ca_cert = x509.load_pem_x509_certificate(ca.cert.read_bytes())
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ValueError(f"{ca.key}: not an EC private key")
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
    )
    if hosts:
        names: list[x509.GeneralName] = []
        for host in hosts:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                names.append(x509.DNSName(host))
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    files = CertFiles(directory / f"{name}.crt", directory / f"{name}.key")
    files.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(key, files.key)
    return files
