"""Helpers of the security tests: certificates made here with ``cryptography`` (a CA, server
and client certificates signed by it), ACL files, and a deadline poll."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass
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


def make_ca(directory: Path, name: str = "ferrymq-test-ca", days: int = 30) -> CertFiles:
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
    directory: Path, ca: CertFiles, name: str, *, days: int = 10, server: bool = True
) -> CertFiles:
    ca_key = serialization.load_pem_private_key(ca.key.read_bytes(), None)
    ca_cert = x509.load_pem_x509_certificate(ca.cert.read_bytes())
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
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
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
    cert = builder.sign(ca_key, hashes.SHA256())
    files = CertFiles(directory / f"{name}.crt", directory / f"{name}.key")
    files.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(key, files.key)
    return files


ADMIN_AK = "adminKey01"
ADMIN_SK = "adminSecret01"
APP_AK = "appKey0001"
APP_SK = "appSecret001"

PLAIN_ACL = f"""\
globalWhiteRemoteAddresses:
  - 127.0.0.2

accounts:
  - accessKey: {APP_AK}
    secretKey: {APP_SK}
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - allowed=PUB|SUB
      - pubOnly=PUB
      - subOnly=SUB
    groupPerms:
      - deniedGroup=DENY
  - accessKey: {ADMIN_AK}
    secretKey: {ADMIN_SK}
    admin: true
"""


async def wait_for(check: Callable[[], bool], timeout: float = 10.0, what: str = "") -> None:
    """Poll ``check`` until true, failing after ``timeout`` seconds (no fixed sleeps)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not check():
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or check}")
        await asyncio.sleep(0.05)
