"""What a request's gRPC metadata says about its client (upstream ``ContextInterceptor`` /
``GrpcConstants``): client id, language, version, namespace, peer address, time left."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import grpc

from ferrymq.proxy.errors import Code, ProxyError

CLIENT_ID = "x-mq-client-id"
LANGUAGE = "x-mq-language"
CLIENT_VERSION = "x-mq-client-version"
NAMESPACE = "x-mq-namespace"
REQUEST_ID = "x-mq-request-id"
DATE_TIME = "x-mq-date-time"
AUTHORIZATION = "authorization"
# a call without a deadline may wait this long (ms) as far as long polling is concerned
NO_DEADLINE_MS = 60_000


@dataclass(frozen=True, slots=True)
class RequestContext:
    client_id: str
    language: str
    client_version: str | None
    namespace: str
    remote: str  # host:port of the peer
    remaining_ms: int
    metadata: dict[str, str]


def _peer_address(peer: str) -> str:
    """``ipv4:127.0.0.1:5000`` / ``ipv6:[::1]:5000`` -> ``127.0.0.1:5000`` / ``[::1]:5000``."""
    scheme, _, rest = peer.partition(":")
    return rest if scheme in ("ipv4", "ipv6") else peer


def request_context(context: grpc.aio.ServicerContext[Any, Any]) -> RequestContext:
    """The request's client; a call without ``x-mq-client-id`` is CLIENT_ID_REQUIRED."""
    md: dict[str, str] = {}
    for item in context.invocation_metadata() or ():
        key, value = item[0], item[1]
        md[key.lower()] = value if isinstance(value, str) else value.decode(errors="replace")
    client_id = md.get(CLIENT_ID, "")
    if not client_id:
        raise ProxyError(Code.CLIENT_ID_REQUIRED, "client id cannot be empty")
    remaining = context.time_remaining()
    return RequestContext(
        client_id=client_id,
        language=md.get(LANGUAGE, "JAVA"),
        client_version=md.get(CLIENT_VERSION),
        namespace=md.get(NAMESPACE, ""),
        remote=_peer_address(context.peer() or ""),
        remaining_ms=NO_DEADLINE_MS if remaining is None else int(remaining * 1000),
        metadata=md,
    )
