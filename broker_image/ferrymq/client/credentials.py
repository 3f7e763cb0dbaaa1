"""Client credentials and TLS (upstream SessionCredentials + AclClientRPCHook, TlsSystemConfig).

``ClientSecurity`` is what a ClientInstance (and SyncProducer's pool) connects with: optional
credentials, whose hook signs every request (AccessKey, optional SecurityToken, Signature over
the sorted extFields values and the body, as upstream), and optional TLS settings.

Without explicit settings a client reads the environment, as the CLI and the operator's pods
use it: ``FERRYMQ_ACCESS_KEY``, ``FERRYMQ_SECRET_KEY``, ``FERRYMQ_SECURITY_TOKEN``;
``FERRYMQ_TLS_ENABLE`` (or upstream's ``TLS_ENABLE``), ``FERRYMQ_TLS_TRUST_CERT_PATH``,
``FERRYMQ_TLS_CERT_PATH``, ``FERRYMQ_TLS_KEY_PATH``, ``FERRYMQ_TLS_KEY_PASSWORD``,
``FERRYMQ_TLS_AUTH_SERVER``.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ferrymq.acl.signature import sign_fields
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.tls import ClientTls

ENV_ACCESS_KEY = "FERRYMQ_ACCESS_KEY"
ENV_SECRET_KEY = "FERRYMQ_SECRET_KEY"
ENV_SECURITY_TOKEN = "FERRYMQ_SECURITY_TOKEN"
ENV_TLS_ENABLE = "FERRYMQ_TLS_ENABLE"
ENV_TLS_TRUST_CERT_PATH = "FERRYMQ_TLS_TRUST_CERT_PATH"
ENV_TLS_CERT_PATH = "FERRYMQ_TLS_CERT_PATH"
ENV_TLS_KEY_PATH = "FERRYMQ_TLS_KEY_PATH"
ENV_TLS_KEY_PASSWORD = "FERRYMQ_TLS_KEY_PASSWORD"
ENV_TLS_AUTH_SERVER = "FERRYMQ_TLS_AUTH_SERVER"


@dataclass(frozen=True, slots=True)
class SessionCredentials:
    access_key: str
    secret_key: str
    security_token: str | None = None

    def __post_init__(self) -> None:
        if not self.access_key or not self.secret_key:
            raise ValueError("credentials need both an access key and a secret key")

    def __repr__(self) -> str:  # never print the secret
        return f"SessionCredentials(access_key={self.access_key!r}, secret_key='***')"


class AclClientRpcHook:
    """Signs each request before it is written (upstream AclClientRPCHook.doBeforeRequest)."""

    __slots__ = ("credentials",)

    def __init__(self, credentials: SessionCredentials) -> None:
        self.credentials = credentials

    def __call__(self, request: RemotingCommand) -> None:
        creds = self.credentials
        body = request.body_bytes() if request.body is not None else None
        sign_fields(
            request.ext_fields, body, creds.access_key, creds.secret_key, creds.security_token
        )


def _truthy(text: str | None) -> bool:
    return (text or "").strip().lower() in ("1", "true", "yes", "on")


@dataclass(frozen=True, slots=True)
class ClientSecurity:
    credentials: SessionCredentials | None = None
    tls: ClientTls | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ClientSecurity:
        env = os.environ if env is None else env
        access_key = env.get(ENV_ACCESS_KEY, "").strip()
        secret_key = env.get(ENV_SECRET_KEY, "").strip()
        if bool(access_key) != bool(secret_key):
            raise ValueError(
                f"set both {ENV_ACCESS_KEY} and {ENV_SECRET_KEY}, or neither "
                f"(only {ENV_ACCESS_KEY if access_key else ENV_SECRET_KEY} is set)"
            )
        credentials = (
            SessionCredentials(access_key, secret_key, env.get(ENV_SECURITY_TOKEN) or None)
            if access_key
            else None
        )
        tls = None
        if _truthy(env.get(ENV_TLS_ENABLE)) or _truthy(env.get("TLS_ENABLE")):

            def path(name: str) -> Path | None:
                value = env.get(name, "").strip()
                return Path(value) if value else None

            tls = ClientTls(
                trust_cert_path=path(ENV_TLS_TRUST_CERT_PATH),
                cert_path=path(ENV_TLS_CERT_PATH),
                key_path=path(ENV_TLS_KEY_PATH),
                key_password=env.get(ENV_TLS_KEY_PASSWORD) or None,
                auth_server=_truthy(env.get(ENV_TLS_AUTH_SERVER))
                or path(ENV_TLS_TRUST_CERT_PATH) is not None,
            )
        return cls(credentials, tls)

    def rpc_hook(self) -> AclClientRpcHook | None:
        return AclClientRpcHook(self.credentials) if self.credentials is not None else None

    def ssl_context(self) -> ssl.SSLContext | None:
        return self.tls.context() if self.tls is not None else None
