"""Read the user's security Secrets and keep the operator's own ones (API calls; the decisions are
in ``decisions``). Runs before the broker children are applied: a missing or broken Secret stops
the pass with a ``ReconcileFailed`` condition instead of pods that cannot start."""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any

from ferrymq_operator import k8s, models
from ferrymq_operator.builders.names import Owner
from ferrymq_operator.models import CertificateStatus, TlsSpec
from ferrymq_operator.security import builders, ca, decisions
from ferrymq_operator.status import Failure, StatusBuilder

TLS_SECRET_TYPE = "kubernetes.io/tls"


@dataclass
class SecurityOutcome:
    failure: Failure | None = None
    # ensure() ran to the end (else the status keeps the previous pass's certificates)
    checked: bool = False
    # the namespace's operator account (accessKey, secretKey, ...) with spec.acl
    account: dict[str, str] | None = None
    certificates: list[decisions.CertificateReport] = field(default_factory=list)
    # (tls.crt, tls.key) the pods mount: the operator's client certificate under mutual TLS
    client_cert: tuple[str, str] | None = None
    # (type, reason, message) Events, as reconcile.Result.events
    events: list[tuple[str, str, str]] = field(default_factory=list)


async def _data(kube: k8s.Kube, namespace: str, name: str) -> dict[str, str] | None:
    return decisions.decode(await kube.get("v1", "Secret", namespace, name))


async def _write(kube: k8s.Kube, obj: dict[str, Any], why: str, outcome: SecurityOutcome) -> None:
    await kube.apply(obj)
    outcome.events.append(("Normal", "SecretWritten", f"{why}: Secret {obj['metadata']['name']}"))


def _report(secret: str, cert_pem: str, ours: bool) -> decisions.CertificateReport:
    info = ca.info(cert_pem)
    return decisions.CertificateReport(secret, info.subject, info.not_after, ours)


async def _cluster_ca(
    kube: k8s.Kube,
    ca_owner: Owner,
    tls: TlsSpec,
    now: datetime.datetime,
    outcome: SecurityOutcome,
) -> ca.CertPair:
    """The cluster CA of the NameServer ``ca_owner``, created or renewed. Created create-only:
    the NameServer and its Brokers are reconciled concurrently and must not each write their own
    random CA. A renewal keeps the key (``plan_ca``), so two passes renewing at once both write
    certificates of the same CA."""
    name = builders.cluster_ca_secret(ca_owner.name)
    current = await _data(kube, ca_owner.namespace, name)
    planned = decisions.plan_ca(current, tls, ca_owner.name, now)
    if planned is None:
        assert current is not None  # plan_ca keeps only a usable CA
        return ca.CertPair(current[builders.CA_CERT_KEY], current[builders.CA_KEY_KEY])
    data = {builders.CA_CERT_KEY: planned.cert_pem, builders.CA_KEY_KEY: planned.key_pem}
    obj = builders.secret_object(ca_owner, builders.CLUSTER_CA_COMPONENT, name, data)
    if current is None and not await kube.create(obj):
        again = await _data(kube, ca_owner.namespace, name)  # another pass created it first
        if decisions.plan_ca(again, tls, ca_owner.name, now) is not None:
            raise k8s.ApiError(f"Secret {name} exists but holds no usable CA; delete it")
        assert again is not None
        return ca.CertPair(again[builders.CA_CERT_KEY], again[builders.CA_KEY_KEY])
    if current is not None:
        await kube.apply(obj)
    why = "created the cluster CA" if current is None else "renewed the cluster CA"
    outcome.events.append(("Normal", "SecretWritten", f"{why}: Secret {name}"))
    return planned


async def _operator_tls(
    kube: k8s.Kube,
    owner: Owner,
    component: str,
    tls: TlsSpec,
    domain: str,
    now: datetime.datetime,
    outcome: SecurityOutcome,
    ca_owner: Owner,
) -> None:
    authority = await _cluster_ca(kube, ca_owner, tls, now, outcome)
    # the CA of operator versions before the cluster CA stays trusted while it exists
    legacy = await _data(kube, owner.namespace, builders.ca_secret(owner.name, component))
    bundle = decisions.trust_bundle(authority, legacy, now)
    server_name = builders.server_cert_secret(owner.name, component)
    server_data = await _data(kube, owner.namespace, server_name)
    names = builders.server_names(owner, builders.service_names(owner, component), domain)
    issued = decisions.plan_server_cert(server_data, authority, tls, owner.name, names, now, bundle)
    if issued is not None:
        why = "issued the server certificate" if server_data is None else "renewed it"
        obj = builders.secret_object(owner, component, server_name, issued, TLS_SECRET_TYPE)
        await _write(kube, obj, why, outcome)
        server_data = issued
    assert server_data is not None
    ca_name = builders.cluster_ca_secret(ca_owner.name)
    outcome.certificates.append(_report(ca_name, authority.cert_pem, True))
    outcome.certificates.append(_report(server_name, server_data[builders.TLS_CERT_KEY], True))
    outcome.client_cert = decisions.client_certificate(server_data)


async def _cert_manager_tls(
    kube: k8s.Kube,
    owner: Owner,
    component: str,
    tls: TlsSpec,
    domain: str,
    outcome: SecurityOutcome,
) -> None:
    """Apply the Certificate; until cert-manager wrote its Secret the pods could not start."""
    if not await kube.serves(builders.CERT_MANAGER_API, "Certificate"):
        outcome.failure = Failure(
            "CertManagerMissing",
            "spec.tls.issuerRef needs cert-manager (cert-manager.io/v1 Certificate is not served "
            "by this cluster); install cert-manager or remove issuerRef",
        )
        return
    names = builders.server_names(owner, builders.service_names(owner, component), domain)
    certificate = builders.certificate_object(owner, component, tls, names)
    await kube.apply(certificate)
    secret = certificate["spec"]["secretName"]
    data = await _data(kube, owner.namespace, secret)
    if data is None or not data.get(builders.TLS_CERT_KEY):
        outcome.failure = Failure(
            "CertificatePending",
            f"waiting for cert-manager to issue Certificate {secret} "
            f"({tls.issuer_ref.kind if tls.issuer_ref else ''} "
            f"{tls.issuer_ref.name if tls.issuer_ref else ''}); see its status",
        )
        return
    outcome.certificates.append(_report(secret, data[builders.TLS_CERT_KEY], False))
    outcome.client_cert = decisions.client_certificate(data)


async def _namesrv_of(
    kube: k8s.Kube, namespace: str, spec: builders.Secured
) -> tuple[Owner, models.NameServerSpec] | None:
    """The NameServer a Broker references (its owner identity and spec), None when absent or
    invalid (the reconcile reports NameServerNotFound / NameServerInvalid)."""
    if not isinstance(spec, models.BrokerSpec):
        return None
    ref = spec.name_server_ref.name
    body = await kube.get(models.API_VERSION, "NameServer", namespace, ref)
    if body is None:
        return None
    try:
        ns_spec = models.parse_nameserver_spec(body.get("spec") or {})
    except models.InvalidSpec:
        return None
    uid = str((body.get("metadata") or {}).get("uid") or "")
    return Owner(models.API_VERSION, "NameServer", ref, namespace, uid), ns_spec


async def ensure(
    kube: k8s.Kube,
    owner: Owner,
    component: str,
    spec: builders.Secured,
    domain: str,
    now: datetime.datetime,
) -> SecurityOutcome:
    """Check the user's Secrets, create/renew the operator's; what the status should say."""
    outcome = SecurityOutcome()
    ns = owner.namespace
    try:
        ca_owner = owner  # a NameServer's cluster CA is its own
        if isinstance(spec, models.BrokerSpec):
            found = await _namesrv_of(kube, ns, spec)
            if found is None:
                outcome.failure = Failure(
                    "NameServerNotFound",
                    f"spec.nameServerRef.name: NameServer {spec.name_server_ref.name!r} is "
                    f"missing or invalid; its cluster CA and security settings are needed",
                )
                return outcome
            ca_owner, ns_spec = found
            problem = decisions.check_namesrv_registration(ca_owner.name, ns_spec, spec)
            if problem:
                outcome.failure = Failure("NameServerRefusesBroker", problem)
                return outcome
        if spec.acl is not None:
            if spec.acl.secret_name:
                problem = decisions.check_user_acl(
                    spec.acl.secret_name, await _data(kube, ns, spec.acl.secret_name)
                )
                if problem:
                    outcome.failure = Failure("AclSecretInvalid", problem)
                    return outcome
            acl_name = builders.OPERATOR_ACL_SECRET
            current = await _data(kube, ns, acl_name)
            planned = decisions.plan_operator_acl(current)
            if planned is not None:
                obj = builders.shared_secret_object(ns, acl_name, planned)
                # create-only when absent: two custom resources reconciled at once must not
                # each write their own random key (pods read it at start)
                written = await kube.create(obj) if current is None else bool(await kube.apply(obj))
                if written:
                    outcome.events.append(
                        (
                            "Normal",
                            "SecretWritten",
                            f"the operator's ACL account: Secret {acl_name}",
                        )
                    )
                    current = planned
                else:
                    current = await _data(kube, ns, acl_name)  # another pass created it first
            outcome.account = current
        if spec.tls is not None:
            if spec.tls.secret_name:
                data = await _data(kube, ns, spec.tls.secret_name)
                problem = decisions.check_user_tls(spec.tls.secret_name, data)
                if problem:
                    outcome.failure = Failure("TlsSecretInvalid", problem)
                    return outcome
                assert data is not None
                cert = data[builders.TLS_CERT_KEY]
                outcome.certificates.append(_report(spec.tls.secret_name, cert, False))
                outcome.client_cert = decisions.client_certificate(data)
            elif spec.tls.issuer_ref is not None:
                await _cert_manager_tls(kube, owner, component, spec.tls, domain, outcome)
                if outcome.failure is not None:
                    return outcome
            else:
                await _operator_tls(
                    kube, owner, component, spec.tls, domain, now, outcome, ca_owner
                )
    except k8s.ApiError as error:
        outcome.failure = Failure("SecretUnavailable", f"security Secrets: {error}")
        return outcome
    outcome.checked = True
    return outcome


def decorate_status(
    builder: StatusBuilder[Any],
    outcome: SecurityOutcome,
    spec: builders.Secured,
    now: datetime.datetime,
) -> list[tuple[str, str, str]]:
    """status.certificates and the CertificateExpiring condition (only with spec.tls); a Warning
    event when a certificate enters the renewal window. A pass that did not get to check the
    Secrets (a failure before) keeps what the previous pass found."""
    previous = builder.previous
    if not outcome.checked:
        builder.status.certificates = list(previous.certificates)
        if spec.tls is not None:
            for kept in previous.conditions:
                if kept.type == decisions.CERT_EXPIRING:
                    builder.keep(kept)
        return []
    builder.status.certificates = [
        CertificateStatus.model_validate(r.status()) for r in outcome.certificates
    ]
    if spec.tls is None or not outcome.certificates:
        return []
    soon, message = decisions.expiring(outcome.certificates, now, spec.tls.renew_before_days)
    reason = "WithinRenewalWindow" if soon else "Valid"
    builder.condition(decisions.CERT_EXPIRING, soon, reason, message)
    before = next((c for c in previous.conditions if c.type == decisions.CERT_EXPIRING), None)
    if soon and (before is None or before.status != "True"):
        return [("Warning", "CertificateExpiring", message)]
    return []
