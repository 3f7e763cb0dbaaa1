"""Credentials and TLS of the operator's own admin calls to one cluster (topic copy, drain,
roll-out checks, config pushes, Topic/ConsumerGroup admin).

The reconcile of a NameServer or Broker sets them (``use``) once it knows the cluster's
spec.acl/spec.tls; the admin call sites read them (``current``) in the same asyncio task, through
a context variable, so each cluster's calls sign with its namespace's operator account without
threading a parameter through every layer. Unset, the clients behave as before (ferrymq's
``FERRYMQ_*`` environment, none in the operator's Deployment).

Mutual TLS (``needClientAuth`` optional/require): the operator presents the certificate of the
Secret the cluster's pods mount (issued by the cluster CA the operator keeps, by cert-manager, or
the user's), as the pods' probes do: it carries ``client auth`` and chains to the CA the brokers
trust. Python's ``ssl`` loads certificates from files only, so the PEMs are written once per
content into a private directory of the operator process (0700/0600).
"""

from __future__ import annotations

import hashlib
import os
import ssl
import tempfile
from contextvars import ContextVar
from pathlib import Path

from ferrymq.client.credentials import AclClientRpcHook, ClientSecurity, SessionCredentials
from ferrymq.remoting.tls import ClientTls

from ferrymq_operator import k8s
from ferrymq_operator.builders import names
from ferrymq_operator.builders.names import Owner
from ferrymq_operator.security import builders, decisions

_current: ContextVar[ClientSecurity | None] = ContextVar("ferrymq_operator_security", default=None)
_files_dir: Path | None = None


def _private_dir() -> Path:
    global _files_dir
    if _files_dir is None:
        _files_dir = Path(tempfile.mkdtemp(prefix="ferrymq-operator-tls-"))  # mode 0700
    return _files_dir


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)


def client_cert_files(cert_pem: str, key_pem: str) -> tuple[Path, Path]:
    """(certificate, key) files holding the PEMs; the same content maps to the same files, so a
    renewed certificate gets new files and the old ones are never rewritten under a reader."""
    digest = hashlib.sha256(f"{cert_pem}\0{key_pem}".encode()).hexdigest()[:24]
    directory = _private_dir()
    cert, key = directory / f"{digest}.crt", directory / f"{digest}.key"
    if not (cert.exists() and key.exists()):
        _write_private(key, key_pem)
        _write_private(cert, cert_pem)
    return cert, key


def for_cluster(
    spec: builders.Secured,
    account: dict[str, str] | None,
    client_cert: tuple[str, str] | None = None,
) -> ClientSecurity | None:
    """What the operator needs towards a cluster: its account (with spec.acl) and TLS (with
    ``enforcing``; the server is not verified, as the probes: in-cluster names, the operator's
    own CA), presenting ``client_cert`` (PEM certificate, key) when the brokers ask for one.
    None when plain calls work."""
    credentials = None
    if spec.acl is not None and account:
        credentials = SessionCredentials(
            account[builders.ACCESS_KEY_KEY], account[builders.SECRET_KEY_KEY]
        )
    tls = None
    if spec.tls is not None and spec.tls.mode == "enforcing":
        cert_path = key_path = None
        if spec.tls.need_client_auth != "none" and client_cert is not None:
            cert_path, key_path = client_cert_files(*client_cert)
        tls = ClientTls(auth_server=False, cert_path=cert_path, key_path=key_path)
    if credentials is None and tls is None:
        return None
    return ClientSecurity(credentials, tls)


def use(security: ClientSecurity | None) -> None:
    _current.set(security)


def current() -> ClientSecurity | None:
    return _current.get()


def rpc_hook() -> AclClientRpcHook | None:
    security = _current.get()
    return security.rpc_hook() if security is not None else None


def ssl_context() -> ssl.SSLContext | None:
    security = _current.get()
    return security.ssl_context() if security is not None else None


async def use_for_broker(
    kube: k8s.Kube, namespace: str, spec: builders.Secured, broker_name: str
) -> None:
    """Set the calls' security for a Broker known only by its spec and name (Topic and
    ConsumerGroup reconciles): its namespace's account and its pods' certificate are read from
    their Secrets."""
    account = None
    if spec.acl is not None:
        secret = await kube.get("v1", "Secret", namespace, builders.OPERATOR_ACL_SECRET)
        account = decisions.decode(secret)
    client_cert = None
    if spec.tls is not None and spec.tls.need_client_auth != "none":
        owner = Owner("", "Broker", broker_name, namespace, "")
        tls_name = builders.tls_secret_name(owner, names.COMPONENT_BROKER, spec.tls)
        client_cert = decisions.client_certificate(
            decisions.decode(await kube.get("v1", "Secret", namespace, tls_name))
        )
    use(for_cluster(spec, account, client_cert))
