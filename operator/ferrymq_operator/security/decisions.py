"""What to do with the security Secrets, decided from what exists (pure; ``secrets`` acts on it).

Each ``plan_*`` takes the decoded data of a Secret (or None when it does not exist) and returns
the data to write, or None to keep it. Checks of the user's Secrets return a message naming the
Secret, the key and what to do, which becomes the ``ReconcileFailed`` condition.
"""

from __future__ import annotations

import base64
import datetime
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from ferrymq_operator.models import TlsSpec
from ferrymq_operator.security import builders, ca

CERT_EXPIRING = "CertificateExpiring"


def decode(secret: Mapping[str, Any] | None) -> dict[str, str] | None:
    """A Secret's ``data`` as text (None when the Secret does not exist)."""
    if secret is None:
        return None
    out: dict[str, str] = {}
    for key, value in (secret.get("data") or {}).items():
        try:
            out[key] = base64.b64decode(value).decode()
        except (ValueError, UnicodeDecodeError):
            out[key] = ""  # binary: never one of our PEM/YAML keys
    return out


def client_certificate(data: dict[str, str] | None) -> tuple[str, str] | None:
    """(tls.crt, tls.key) of a decoded TLS Secret, None when it lacks one of them."""
    if not data or not data.get(builders.TLS_CERT_KEY) or not data.get(builders.TLS_KEY_KEY):
        return None
    return data[builders.TLS_CERT_KEY], data[builders.TLS_KEY_KEY]


def check_namesrv_registration(
    ns_name: str, ns: builders.Secured, broker: builders.Secured
) -> str | None:
    """Why the Broker's pods could not register with the NameServer ``ns_name`` as the two specs
    stand (their pods would run, but never appear in any route), or None. Only the cases that
    surely fail: the NameServer's ACL wants an admin signature (the pods sign only with the
    Broker's spec.acl), ``enforcing`` refuses the plaintext calls of a Broker without
    ``enforcing``, and ``needClientAuth: require`` wants a client certificate from a CA the
    NameServer trusts, which a Broker never presents without its own needClientAuth and never has
    when one side is issued by the operator's cluster CA and the other is not. (Both from the
    cluster CA: one CA signs both. Two user Secrets or two issuers: they may share a CA, which
    the operator cannot tell from the specs.)"""
    where = f"NameServer {ns_name!r}"
    if ns.acl is not None and broker.acl is None:
        return (
            f"{where} has spec.acl: it admits only broker registrations signed by an admin "
            f"account; add spec.acl to this Broker (acl: {{}} is enough) so its pods sign with "
            f"the operator's account"
        )
    if ns.tls is None or broker.tls is None or broker.tls.mode != "enforcing":
        if ns.tls is not None and ns.tls.mode == "enforcing":
            return (
                f"{where} has spec.tls.mode enforcing: it refuses plaintext, and this Broker's "
                f"pods register over TLS only with spec.tls.mode enforcing; set it"
            )
        return None
    if ns.tls.need_client_auth != "require":
        return None
    if broker.tls.need_client_auth == "none":
        return (
            f"{where} requires client certificates (needClientAuth: require); this Broker's "
            f"pods present theirs only with spec.tls.needClientAuth optional or require"
        )
    ns_source, broker_source = certificate_source(ns.tls), certificate_source(broker.tls)
    if (ns_source == OPERATOR_ISSUED) != (broker_source == OPERATOR_ISSUED):
        # one side from the cluster CA, the other from the user's Secret or cert-manager: the
        # user's CA never signed the cluster CA's certificates, nor the other way round
        return (
            f"{where} requires client certificates (needClientAuth: require); its certificate "
            f"comes from {_describe(ns_source)}, this Broker's from {_describe(broker_source)}, "
            f"so they are signed by different CAs; let the operator issue both (remove "
            f"secretName/issuerRef from both) or give both the same spec.tls.secretName or "
            f"cert-manager issuer (spec.tls.issuerRef)"
        )
    return None


OPERATOR_ISSUED = ("operator",)


def certificate_source(tls: TlsSpec) -> tuple[str, ...]:
    """Where a component's certificate comes from: the operator's cluster CA, a user's Secret or
    a cert-manager issuer (with its name)."""
    if tls.secret_name:
        return ("secret", tls.secret_name)
    if tls.issuer_ref is not None:
        return ("issuer", tls.issuer_ref.kind, tls.issuer_ref.name)
    return OPERATOR_ISSUED


def _describe(source: tuple[str, ...]) -> str:
    if source == OPERATOR_ISSUED:
        return "the operator's cluster CA"
    if source[0] == "secret":
        return f"Secret {source[1]!r}"
    return f"cert-manager {source[1]} {source[2]!r}"


def plan_operator_acl(existing: Mapping[str, str] | None) -> dict[str, str] | None:
    """The operator's account Secret: made once with a random secretKey, then kept (rewritten
    with the same key if one of its entries went missing)."""
    if existing is not None and all(existing.get(k) for k in builders.OPERATOR_ACL_KEYS):
        return None
    secret_key = (existing or {}).get(builders.SECRET_KEY_KEY) or builders.new_secret_key()
    return builders.operator_acl_data(secret_key)


def check_user_acl(name: str, data: Mapping[str, str] | None) -> str | None:
    """Problem with the user's ACL Secret, or None."""
    key = builders.USER_ACL_KEY
    if data is None:
        return (
            f"spec.acl.secretName: Secret {name!r} does not exist in this namespace; create it "
            f"with the key {key} (upstream plain_acl.yml format) or remove secretName"
        )
    if key not in data:
        return (
            f"spec.acl.secretName: Secret {name!r} has no key {key} (it has: "
            f"{', '.join(sorted(data)) or 'none'}); put the accounts under {key}"
        )
    try:
        doc = yaml.safe_load(data[key])
    except yaml.YAMLError as error:
        return f"Secret {name!r} key {key} is not YAML: {error}"
    if not isinstance(doc, dict) or not isinstance(doc.get("accounts", []), list):
        return (
            f"Secret {name!r} key {key} is not a plain_acl.yml: expected a mapping with an "
            f"'accounts' list (and optionally globalWhiteRemoteAddresses)"
        )
    return None


def check_user_tls(name: str, data: Mapping[str, str] | None) -> str | None:
    """Problem with the user's TLS Secret, or None."""
    if data is None:
        return (
            f"spec.tls.secretName: Secret {name!r} does not exist in this namespace; create it "
            f"with {', '.join(builders.TLS_KEYS)} or remove secretName to let the operator "
            f"issue a certificate"
        )
    missing = [k for k in builders.TLS_KEYS if not data.get(k)]
    if missing:
        return (
            f"spec.tls.secretName: Secret {name!r} lacks {', '.join(missing)}; it needs "
            f"{', '.join(builders.TLS_KEYS)} (PEM)"
        )
    try:
        ca.info(data[builders.TLS_CERT_KEY])
    except ValueError as error:
        return f"Secret {name!r} key {builders.TLS_CERT_KEY} is not a PEM certificate: {error}"
    try:
        matches = ca.key_matches(data[builders.TLS_CERT_KEY], data[builders.TLS_KEY_KEY])
    except ValueError as error:
        return (
            f"Secret {name!r} key {builders.TLS_KEY_KEY} is not an unencrypted PEM private key: "
            f"{error}"
        )
    if not matches:
        return (
            f"Secret {name!r}: {builders.TLS_KEY_KEY} is not the key of {builders.TLS_CERT_KEY}; "
            f"put the matching pair in the Secret"
        )
    return None


def _usable_ca(data: Mapping[str, str] | None) -> ca.CertPair | None:
    if data is None or not data.get(builders.CA_CERT_KEY) or not data.get(builders.CA_KEY_KEY):
        return None
    try:
        ca.info(data[builders.CA_CERT_KEY])
    except ValueError:
        return None
    return ca.CertPair(data[builders.CA_CERT_KEY], data[builders.CA_KEY_KEY])


def plan_ca(
    existing: Mapping[str, str] | None, tls: TlsSpec, cr_name: str, now: datetime.datetime
) -> ca.CertPair | None:
    """A new cluster CA when there is none usable or it is within the renewal window."""
    current = _usable_ca(existing)
    if current is not None and not ca.needs_renewal(
        ca.info(current.cert_pem).not_after, now, tls.renew_before_days
    ):
        return None
    days = tls.validity_days * ca.CA_VALIDITY_FACTOR
    name = f"{cr_name} ferrymq cluster CA"
    if current is not None:
        try:  # renew the certificate, keep the key: what was issued stays trusted
            return ca.new_ca(name, now, days, key_pem=current.key_pem)
        except ValueError:
            pass  # a key this operator did not make: start a new CA
    return ca.new_ca(name, now, days)


def trust_bundle(
    authority: ca.CertPair, legacy: Mapping[str, str] | None, now: datetime.datetime
) -> str:
    """The ca.crt the pods trust: the cluster CA, and during a migration the component's former
    CA (operator versions before the cluster CA) while it is valid, so pods not yet reloaded,
    which still present a certificate from it, are accepted by those that have."""
    bundle = authority.cert_pem
    old = _usable_ca(legacy)
    if old is None or old.cert_pem == authority.cert_pem:
        return bundle
    if ca.info(old.cert_pem).not_after > now:
        bundle += old.cert_pem if old.cert_pem.endswith("\n") else old.cert_pem + "\n"
    return bundle


def plan_server_cert(
    existing: Mapping[str, str] | None,
    authority: ca.CertPair,
    tls: TlsSpec,
    cr_name: str,
    names: list[str],
    now: datetime.datetime,
    bundle: str | None = None,
) -> dict[str, str] | None:
    """New tls.crt/tls.key/ca.crt when missing, not from ``authority``, lacking a name, within
    the renewal window, or when the trust ``bundle`` (default: the authority alone) changed;
    None to keep the current one."""
    bundle = bundle if bundle is not None else authority.cert_pem
    if existing is not None and all(existing.get(k) for k in builders.TLS_KEYS):
        cert = existing[builders.TLS_CERT_KEY]
        try:
            current = ca.info(cert)
            keep = (
                existing[builders.TLS_CA_KEY] == bundle
                and ca.signed_by(cert, authority.cert_pem)
                and set(names) <= set(current.names)
                and not ca.needs_renewal(current.not_after, now, tls.renew_before_days)
            )
        except ValueError:
            keep = False
        if keep:
            return None
    pair = ca.issue(authority, f"{cr_name} ferrymq broker", names, now, tls.validity_days)
    return {
        builders.TLS_CERT_KEY: pair.cert_pem,
        builders.TLS_KEY_KEY: pair.key_pem,
        builders.TLS_CA_KEY: bundle,
    }


@dataclass(frozen=True)
class CertificateReport:
    secret: str
    subject: str
    not_after: datetime.datetime
    issued_by_operator: bool

    def status(self) -> dict[str, Any]:
        return {
            "secret": self.secret,
            "subject": self.subject,
            "notAfter": self.not_after.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "issuedByOperator": self.issued_by_operator,
        }


def expiring(
    reports: list[CertificateReport], now: datetime.datetime, renew_days: int
) -> tuple[bool, str]:
    """(within the renewal window?, message) for the CertificateExpiring condition."""
    soon = [r for r in reports if ca.needs_renewal(r.not_after, now, renew_days)]
    if not soon:
        first = min((r.not_after for r in reports), default=None)
        when = first.strftime("%Y-%m-%dT%H:%M:%SZ") if first else "never"
        return False, f"no certificate expires within {renew_days} days (first: {when})"
    listed = ", ".join(f"{r.secret} ({r.not_after.strftime('%Y-%m-%dT%H:%M:%SZ')})" for r in soon)
    hint = (
        "renew it: the operator does not issue user Secrets"
        if any(not r.issued_by_operator for r in soon)
        else "the operator renews it"
    )
    return True, f"within {renew_days} days of expiry: {listed}; {hint}"
