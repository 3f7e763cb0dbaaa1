"""Credentials and TLS of the operator's own admin calls to one cluster (topic copy, drain,
roll-out checks, config pushes).

The reconcile of a NameServer or Broker sets them (``use``) once it knows the cluster's
spec.acl/spec.tls; the admin call sites read them (``current``) in the same asyncio task, through
a context variable, so each cluster's calls sign with its namespace's operator account without
threading a parameter through every layer. Unset, the clients behave as before (ferrymq's
``FERRYMQ_*`` environment, none in the operator's Deployment).
"""

from __future__ import annotations

import ssl
from contextvars import ContextVar

from ferrymq.client.credentials import AclClientRpcHook, ClientSecurity, SessionCredentials
from ferrymq.remoting.tls import ClientTls

from ferrymq_operator import k8s
from ferrymq_operator.security import builders, decisions

_current: ContextVar[ClientSecurity | None] = ContextVar("ferrymq_operator_security", default=None)


def for_cluster(spec: builders.Secured, account: dict[str, str] | None) -> ClientSecurity | None:
    """What the operator needs towards a cluster: its account (with spec.acl) and TLS (with
    ``enforcing``; the server is not verified, as the probes: in-cluster names, the operator's
    own CA). None when plain calls work."""
    credentials = None
    if spec.acl is not None and account:
        credentials = SessionCredentials(
            account[builders.ACCESS_KEY_KEY], account[builders.SECRET_KEY_KEY]
        )
    tls = (
        ClientTls(auth_server=False)
        if spec.tls is not None and spec.tls.mode == "enforcing"
        else None
    )
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


async def use_for_broker(kube: k8s.Kube, namespace: str, spec: builders.Secured) -> None:
    """Set the calls' security for a Broker known only by its spec (Topic and ConsumerGroup
    reconciles): its namespace's account is read from the Secret."""
    account = None
    if spec.acl is not None:
        secret = await kube.get("v1", "Secret", namespace, builders.OPERATOR_ACL_SECRET)
        account = decisions.decode(secret)
    use(for_cluster(spec, account))
