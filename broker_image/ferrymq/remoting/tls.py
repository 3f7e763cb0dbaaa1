"""TLS settings and SSL contexts of the remoting port (upstream TlsSystemConfig / TlsHelper).

Keys are upstream's: ``tls.server.mode`` (disabled | permissive | enforcing),
``tls.server.certPath``, ``tls.server.keyPath``, ``tls.server.keyPassword``,
``tls.server.trustCertPath``, ``tls.server.need.client.auth`` (none | optional | require),
``tls.client.certPath``, ``tls.client.keyPath``, ``tls.client.keyPassword``,
``tls.client.trustCertPath``, ``tls.client.authServer`` and ``tls.enable`` (a client uses TLS).
They are read from broker.conf / namesrv.conf, then from the ``tls.config.file`` properties file
when one is named (its values win, as upstream's TlsHelper loads it last), then from
``FERRYMQ_<key>`` environment variables.

Server certificates are reloaded when their files change: :class:`ServerTls` stats them at most
once a second when a connection arrives and builds a new context, so new connections get the new
certificate and established ones keep theirs. A certificate that fails to load keeps the old
context (logged). Only Python's ``ssl`` module does cryptography here.
"""

from __future__ import annotations

import datetime
import enum
import logging
import ssl
import time
from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ferrymq.properties import ConfigError, build_model, collect_values, load_properties

log = logging.getLogger(__name__)

TLS_CONFIG_FILE_KEY = "tls.config.file"
# at most one stat() round per second on the accept path
_RECHECK_S = 1.0


class TlsMode(enum.StrEnum):
    DISABLED = "disabled"
    PERMISSIVE = "permissive"  # TLS and plaintext on one port (first byte tells them apart)
    ENFORCING = "enforcing"  # TLS only; a plaintext connection is refused and logged


class ClientAuth(enum.StrEnum):
    NONE = "none"
    OPTIONAL = "optional"
    REQUIRE = "require"


_FILE_FIELDS = ("server_cert_path", "server_key_path", "server_trust_cert_path")


class TlsSettings(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="ignore")

    server_mode: TlsMode = Field(default=TlsMode.DISABLED, alias="tls.server.mode")
    server_cert_path: Path | None = Field(default=None, alias="tls.server.certPath")
    server_key_path: Path | None = Field(default=None, alias="tls.server.keyPath")
    server_key_password: str | None = Field(default=None, alias="tls.server.keyPassword")
    server_trust_cert_path: Path | None = Field(default=None, alias="tls.server.trustCertPath")
    server_need_client_auth: ClientAuth = Field(
        default=ClientAuth.NONE, alias="tls.server.need.client.auth"
    )
    client_enable: bool = Field(default=False, alias="tls.enable")
    client_cert_path: Path | None = Field(default=None, alias="tls.client.certPath")
    client_key_path: Path | None = Field(default=None, alias="tls.client.keyPath")
    client_key_password: str | None = Field(default=None, alias="tls.client.keyPassword")
    client_trust_cert_path: Path | None = Field(default=None, alias="tls.client.trustCertPath")
    client_auth_server: bool = Field(default=False, alias="tls.client.authServer")
    config_file: Path | None = Field(default=None, alias="tls.config.file")
    # ferrymq: TLS on the HA port too (the master listens with the server certificate; the
    # slave presents the same certificate and checks the master against trustCertPath)
    ha_enable: bool = Field(default=False, alias="tls.ha.enable")

    @model_validator(mode="after")
    def _check(self) -> TlsSettings:
        missing = self.server_cert_path is None or self.server_key_path is None
        if self.server_mode is not TlsMode.DISABLED and missing:
            raise ValueError(
                f"tls.server.mode={self.server_mode.value} needs tls.server.certPath and "
                "tls.server.keyPath"
            )
        if self.ha_enable and self.server_mode is TlsMode.DISABLED:
            raise ValueError("tls.ha.enable=true needs tls.server.mode permissive or enforcing")
        if self.server_need_client_auth is ClientAuth.REQUIRE and not self.server_trust_cert_path:
            raise ValueError(
                "tls.server.need.client.auth=require needs tls.server.trustCertPath "
                "(the CA that signs client certificates)"
            )
        return self

    @property
    def server_enabled(self) -> bool:
        return self.server_mode is not TlsMode.DISABLED

    def client_tls(self) -> ClientTls | None:
        """The client side of these settings (the broker's own outgoing calls), or None."""
        if not self.client_enable:
            return None
        return ClientTls(
            cert_path=self.client_cert_path,
            key_path=self.client_key_path,
            key_password=self.client_key_password,
            trust_cert_path=self.client_trust_cert_path,
            auth_server=self.client_auth_server,
        )


def load_tls_settings(path: Path | None, env: Mapping[str, str] | None = None) -> TlsSettings:
    """broker.conf/namesrv.conf (+ tls.config.file, + FERRYMQ_tls.* env) -> TlsSettings."""
    file_values = load_properties(path) if path is not None else {}
    values, origins, _ = collect_values(
        TlsSettings, file_values, env, source=str(path) if path else "properties"
    )
    add_tls_config_file(values, origins)
    return build_model(TlsSettings, values, origins)


def add_tls_config_file(values: dict[str, str], origins: dict[str, str]) -> None:
    """The keys of the file ``tls.config.file`` names (upstream TlsSystemConfig), over ``values``.
    Raises ConfigError when that file cannot be read."""
    tls_file = values.get(TLS_CONFIG_FILE_KEY)
    if tls_file:
        tls_path = Path(tls_file)
        extra, extra_origins, _ = collect_values(
            TlsSettings, load_properties(tls_path), {}, source=str(tls_path)
        )
        values.update(extra)
        origins.update(extra_origins)


class ClientTls(BaseModel):
    """What a client needs to speak TLS: its own certificate (mutual TLS) and whom it trusts."""

    model_config = ConfigDict(frozen=True)

    cert_path: Path | None = None
    key_path: Path | None = None
    key_password: str | None = None
    trust_cert_path: Path | None = None
    # upstream tls.client.authServer: verify the server's chain (not its host name: brokers are
    # addressed by IP and their certificates rarely carry one)
    auth_server: bool = False

    def context(self) -> ssl.SSLContext:
        """A new client context; ConfigError naming the file when one cannot be loaded."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        if self.auth_server:
            ctx.verify_mode = ssl.CERT_REQUIRED
            try:
                if self.trust_cert_path is not None:
                    ctx.load_verify_locations(cafile=str(self.trust_cert_path))
                else:
                    ctx.load_default_certs()
            except (OSError, ssl.SSLError) as exc:
                raise ConfigError(
                    f"tls.client.trustCertPath {self.trust_cert_path}: {exc}"
                ) from None
        else:
            ctx.verify_mode = ssl.CERT_NONE
        if self.cert_path is not None:
            try:
                ctx.load_cert_chain(
                    str(self.cert_path),
                    str(self.key_path) if self.key_path else None,
                    self.key_password,
                )
            except (OSError, ssl.SSLError) as exc:
                raise ConfigError(f"tls.client.certPath/keyPath {self.cert_path}: {exc}") from None
        return ctx


def ha_contexts(settings: TlsSettings) -> tuple[ssl.SSLContext, ssl.SSLContext] | None:
    """(server, client) contexts of the HA link, or None when tls.ha.enable is off."""
    if not settings.ha_enable:
        return None
    client = ClientTls(
        cert_path=settings.server_cert_path,
        key_path=settings.server_key_path,
        key_password=settings.server_key_password,
        trust_cert_path=settings.server_trust_cert_path,
        auth_server=settings.server_trust_cert_path is not None,
    )
    return server_context(settings), client.context()


def server_context(settings: TlsSettings) -> ssl.SSLContext:
    """A server context from the settings; ConfigError naming the file on a bad one."""
    assert settings.server_cert_path is not None and settings.server_key_path is not None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(
            str(settings.server_cert_path),
            str(settings.server_key_path),
            settings.server_key_password,
        )
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(
            f"tls.server.certPath {settings.server_cert_path} / keyPath "
            f"{settings.server_key_path}: {exc}"
        ) from None
    if settings.server_trust_cert_path is not None:
        try:
            ctx.load_verify_locations(cafile=str(settings.server_trust_cert_path))
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(
                f"tls.server.trustCertPath {settings.server_trust_cert_path}: {exc}"
            ) from None
    ctx.verify_mode = {
        ClientAuth.NONE: ssl.CERT_NONE,
        ClientAuth.OPTIONAL: ssl.CERT_OPTIONAL,
        ClientAuth.REQUIRE: ssl.CERT_REQUIRED,
    }[settings.server_need_client_auth]
    return ctx


def _stamp(paths: list[Path]) -> tuple[tuple[int, int], ...]:
    out = []
    for path in paths:
        try:
            st = path.stat()
            out.append((st.st_mtime_ns, st.st_size))
        except OSError:
            out.append((-1, -1))
    return tuple(out)


class ServerTls:
    """The server's current SSL context, rebuilt when a certificate/key/trust file changes."""

    def __init__(self, settings: TlsSettings, *, recheck_s: float = _RECHECK_S) -> None:
        self.settings = settings
        self.recheck_s = recheck_s
        self._paths = [
            p for p in (getattr(settings, name) for name in _FILE_FIELDS) if p is not None
        ]
        self._ctx = server_context(settings)
        self._stamp = _stamp(self._paths)
        self._checked = time.monotonic()
        self.reloads = 0
        self.plaintext_refused = 0
        self.handshake_failures = 0

    @property
    def mode(self) -> TlsMode:
        return self.settings.server_mode

    def context(self) -> ssl.SSLContext:
        now = time.monotonic()
        if now - self._checked >= self.recheck_s:
            self._checked = now
            self.reload_if_changed()
        return self._ctx

    def reload_if_changed(self) -> bool:
        stamp = _stamp(self._paths)
        if stamp == self._stamp:
            return False
        self._stamp = stamp
        try:
            self._ctx = server_context(self.settings)
        except ConfigError as exc:
            log.error("TLS certificate not reloaded, the previous one stays in use: %s", exc)
            return False
        self.reloads += 1
        log.info("TLS certificate reloaded from %s", self.settings.server_cert_path)
        return True

    def certificate_expiry_days(self) -> dict[str, float]:
        """Days until each configured certificate expires (negative once expired), by file."""
        out: dict[str, float] = {}
        for path in (self.settings.server_cert_path, self.settings.server_trust_cert_path):
            if path is None:
                continue
            days = cert_expiry_days(path)
            if days is not None:
                out[str(path)] = days
        return out


def cert_expiry_days(path: Path, now: datetime.datetime | None = None) -> float | None:
    """Days until the first certificate in the PEM file ``path`` expires; None if unreadable."""
    from cryptography import x509

    try:
        cert = x509.load_pem_x509_certificate(path.read_bytes())
    except (OSError, ValueError):
        return None
    now = now or datetime.datetime.now(datetime.UTC)
    return (cert.not_valid_after_utc - now).total_seconds() / 86400.0
