"""spec.acl / spec.tls -> broker.conf / namesrv.conf keys, pod volumes, mounts, env (pure).

Secret *content* never reaches the pod template: Secrets are mounted as volumes, which the kubelet
updates in place, and the broker reloads ``plain_acl.yml`` and its certificate files when they
change (``ferrymq.acl``, ``ferrymq.remoting.tls``). So a rotated Secret reaches running brokers
without a restart, and the config hash (builders.pod) only covers file *paths*, which never change.

The operator's own account (``admin: true``) lives in a Secret the operator generates once; the
brokers' own calls (NameServer registration) and ``ferrymq probe`` in the pod sign with it through ``FERRYMQ_ACCESS_KEY``/``FERRYMQ_SECRET_KEY``
(env from a secretKeyRef: a reference, not the value, is in the template).
"""

from __future__ import annotations

import base64
import secrets
from typing import Any, Protocol

import yaml

from ferrymq_operator.builders import names
from ferrymq_operator.builders.names import Owner
from ferrymq_operator.models import AclSpec, TlsSpec

# Mount points outside the ConfigMap's /etc/ferrymq: a mount inside a read-only configMap volume
# needs a mount point the kubelet cannot create there.
ACL_DIR = "/etc/ferrymq-acl"
TLS_DIR = "/etc/ferrymq-tls"
ACL_VOLUME = "acl"
TLS_VOLUME = "tls"

# Keys of the user's Secrets (upstream's file name; the kubernetes.io/tls convention).
USER_ACL_KEY = "plain_acl.yml"
TLS_CERT_KEY = "tls.crt"
TLS_KEY_KEY = "tls.key"
TLS_CA_KEY = "ca.crt"
TLS_KEYS = (TLS_CERT_KEY, TLS_KEY_KEY, TLS_CA_KEY)

# Keys of the Secret with the operator's account.
OPERATOR_ACL_FILE = "operator_acl.yml"
ACCESS_KEY_KEY = "accessKey"
SECRET_KEY_KEY = "secretKey"
OPERATOR_ACCESS_KEY = "ferrymq-operator"
OPERATOR_ACL_KEYS = (ACCESS_KEY_KEY, SECRET_KEY_KEY, OPERATOR_ACL_FILE)

# Keys of the cluster CA Secret (Strimzi keeps ca.crt and ca.key too).
CA_CERT_KEY = "ca.crt"
CA_KEY_KEY = "ca.key"

ENV_ACCESS_KEY = "FERRYMQ_ACCESS_KEY"
ENV_SECRET_KEY = "FERRYMQ_SECRET_KEY"
ENV_TLS_ENABLE = "FERRYMQ_TLS_ENABLE"
ENV_TLS_CERT_PATH = "FERRYMQ_TLS_CERT_PATH"
ENV_TLS_KEY_PATH = "FERRYMQ_TLS_KEY_PATH"


class Secured(Protocol):
    """A NameServer or Broker spec: both carry spec.acl and spec.tls."""

    @property
    def acl(self) -> AclSpec | None: ...

    @property
    def tls(self) -> TlsSpec | None: ...


# Secret names carry the component: a NameServer and a Broker may share metadata.name.
# The operator's account is one per namespace: its admin calls reach the NameServers and the
# brokers of a namespace with one signature. No owner: it outlives any one custom resource.
OPERATOR_ACL_SECRET = "ferrymq-operator-acl"


def ca_secret(cr_name: str, component: str) -> str:
    """The per-component CA of operator versions before the cluster CA: still trusted (in the
    ca.crt bundle) while it exists, so pods issued from it keep working during the migration."""
    return f"{cr_name}-{component}-ca"


def cluster_ca_secret(namesrv_name: str) -> str:
    """The cluster CA: one per NameServer, signing its certificate and those of every Broker whose
    spec.nameServerRef names it, so mutual TLS between them needs no user action."""
    return f"{namesrv_name}-cluster-ca"


CLUSTER_CA_COMPONENT = "cluster-ca"


def server_cert_secret(cr_name: str, component: str) -> str:
    return f"{cr_name}-{component}-tls"


def tls_secret_name(owner: Owner, component: str, tls: TlsSpec) -> str:
    """The Secret whose tls.crt/tls.key/ca.crt the pods mount."""
    return tls.secret_name or server_cert_secret(owner.name, component)


def conf_keys(spec: Secured) -> dict[str, str]:
    """broker.conf / namesrv.conf settings of spec.acl and spec.tls (upstream keys; paths only)."""
    conf: dict[str, str] = {}
    if spec.acl is not None:
        conf["aclEnable"] = "true"
        conf["aclFilePath"] = ACL_DIR
    if spec.tls is not None:
        conf["tls.server.mode"] = spec.tls.mode
        conf["tls.server.certPath"] = f"{TLS_DIR}/{TLS_CERT_KEY}"
        conf["tls.server.keyPath"] = f"{TLS_DIR}/{TLS_KEY_KEY}"
        conf["tls.server.trustCertPath"] = f"{TLS_DIR}/{TLS_CA_KEY}"
        conf["tls.server.need.client.auth"] = spec.tls.need_client_auth
    return conf


def _acl_volume(owner: Owner, component: str, acl: AclSpec) -> dict[str, Any]:
    # One directory (aclFilePath) holding the operator's account file and the user's
    # plain_acl.yml; the broker loads every *.yml there.
    sources: list[dict[str, Any]] = [
        {
            "secret": {
                "name": OPERATOR_ACL_SECRET,
                "items": [{"key": OPERATOR_ACL_FILE, "path": OPERATOR_ACL_FILE}],
            }
        }
    ]
    if acl.secret_name:
        sources.append(
            {
                "secret": {
                    "name": acl.secret_name,
                    "items": [{"key": USER_ACL_KEY, "path": USER_ACL_KEY}],
                }
            }
        )
    return {"name": ACL_VOLUME, "projected": {"sources": sources}}


def volumes(owner: Owner, component: str, spec: Secured) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if spec.acl is not None:
        out.append(_acl_volume(owner, component, spec.acl))
    if spec.tls is not None:
        secret = tls_secret_name(owner, component, spec.tls)
        out.append({"name": TLS_VOLUME, "secret": {"secretName": secret}})
    return out


def mounts(spec: Secured) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if spec.acl is not None:
        out.append({"name": ACL_VOLUME, "mountPath": ACL_DIR, "readOnly": True})
    if spec.tls is not None:
        out.append({"name": TLS_VOLUME, "mountPath": TLS_DIR, "readOnly": True})
    return out


def _secret_env(name: str, secret: str, key: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}


def env(owner: Owner, component: str, spec: Secured) -> list[dict[str, Any]]:
    """Environment for the broker's own calls and ``ferrymq probe`` run in the pod (credentials,
    client TLS). The Kubernetes probes read a serving marker file and need none of it.

    With ``enforcing`` a plaintext call is refused, so the broker's registration with the
    NameServer (and ``ferrymq probe``) use TLS; they reach in-cluster names and 127.0.0.1, so the
    server name is not checked (no trust path). With mutual TLS they present the pod's
    certificate, which carries the ``client auth`` usage too.
    """
    out: list[dict[str, Any]] = []
    if spec.acl is not None:
        secret = OPERATOR_ACL_SECRET
        out.append(_secret_env(ENV_ACCESS_KEY, secret, ACCESS_KEY_KEY))
        out.append(_secret_env(ENV_SECRET_KEY, secret, SECRET_KEY_KEY))
    if spec.tls is not None and spec.tls.mode == "enforcing":
        out.append({"name": ENV_TLS_ENABLE, "value": "true"})
        if spec.tls.need_client_auth != "none":
            out.append({"name": ENV_TLS_CERT_PATH, "value": f"{TLS_DIR}/{TLS_CERT_KEY}"})
            out.append({"name": ENV_TLS_KEY_PATH, "value": f"{TLS_DIR}/{TLS_KEY_KEY}"})
    return out


def operator_account(secret_key: str) -> str:
    """The operator's plain_acl.yml: one admin account (upstream format)."""
    doc = {
        "accounts": [
            {
                "accessKey": OPERATOR_ACCESS_KEY,
                "secretKey": secret_key,
                "admin": True,
            }
        ]
    }
    text: str = yaml.safe_dump(doc, sort_keys=False)
    return text


def new_secret_key() -> str:
    """A random secretKey (URL-safe, 192 bits)."""
    return secrets.token_urlsafe(24)


def operator_acl_data(secret_key: str) -> dict[str, str]:
    return {
        ACCESS_KEY_KEY: OPERATOR_ACCESS_KEY,
        SECRET_KEY_KEY: secret_key,
        OPERATOR_ACL_FILE: operator_account(secret_key),
    }


def secret_object(
    owner: Owner, component: str, name: str, data: dict[str, str], secret_type: str = "Opaque"
) -> dict[str, Any]:
    """A Secret the operator owns (deleted with the custom resource)."""
    labels = names.common_labels(owner, component)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": names.metadata(owner, name, labels),
        "type": secret_type,
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in sorted(data.items())},
    }


def shared_secret_object(namespace: str, name: str, data: dict[str, str]) -> dict[str, Any]:
    """A Secret the operator keeps for every custom resource of a namespace (no owner)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {
                names.LABEL_MANAGED_BY: names.MANAGED_BY,
                names.LABEL_PART_OF: names.APP_NAME,
            },
        },
        "type": "Opaque",
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in sorted(data.items())},
    }


def server_names(owner: Owner, services: list[str], domain: str) -> list[str]:
    """SANs of a server certificate: each Service, a wildcard for the pods of the headless one
    (``<pod>.<service>.<ns>.svc...``, what the operator, slaves and brokers dial) and localhost
    for the probes. Independent of the number of pods, so scaling never re-issues it."""
    ns = owner.namespace
    out: list[str] = []
    for service in services:
        out += [
            f"{service}.{ns}.svc.{domain}",
            f"*.{service}.{ns}.svc.{domain}",
            f"{service}.{ns}.svc",
            f"*.{service}.{ns}.svc",
        ]
    return [*out, "localhost", "127.0.0.1"]


def service_names(owner: Owner, component: str) -> list[str]:
    """The Services whose names a component's certificate carries."""
    if component == names.COMPONENT_NAMESRV:
        return [
            names.namesrv_service(owner.name),
            names.namesrv_headless_service(owner.name),
        ]
    return [names.broker_headless_service(owner.name)]


CERT_MANAGER_API = "cert-manager.io/v1"


def certificate_object(
    owner: Owner, component: str, tls: TlsSpec, dns_names: list[str]
) -> dict[str, Any]:
    """A cert-manager Certificate writing the server certificate Secret the pods mount
    (tls.crt, tls.key and, from CA issuers, ca.crt); cert-manager renews it in place."""
    assert tls.issuer_ref is not None
    name = server_cert_secret(owner.name, component)
    hosts = [n for n in dns_names if not n[0].isdigit()]
    ips = [n for n in dns_names if n[0].isdigit()]
    return {
        "apiVersion": CERT_MANAGER_API,
        "kind": "Certificate",
        "metadata": names.metadata(owner, name, names.common_labels(owner, component)),
        "spec": {
            "secretName": name,
            "commonName": f"{owner.name}-{component}"[:64],
            "dnsNames": hosts,
            "ipAddresses": ips,
            "duration": f"{tls.validity_days * 24}h",
            "renewBefore": f"{tls.renew_before_days * 24}h",
            "privateKey": {"algorithm": "ECDSA", "size": 256, "encoding": "PKCS8"},
            "usages": ["server auth", "client auth"],
            "issuerRef": tls.issuer_ref.model_dump(by_alias=True),
        },
    }
