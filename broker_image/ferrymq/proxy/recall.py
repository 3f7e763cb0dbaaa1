"""Recall handles (upstream ``RecallMessageHandle``): url-safe base64 of
``v1 topic brokerName timestamp messageId``; the proxy only needs the broker to ask. Pure."""

from __future__ import annotations

import base64
import binascii

from ferrymq.proxy.errors import Code, ProxyError


def broker_of_handle(handle: str) -> str:
    """The broker a recall handle names; ILLEGAL_MESSAGE_ID ... as upstream: BAD_REQUEST."""
    try:
        padded = handle + "=" * (-len(handle) % 4)
        raw = base64.urlsafe_b64decode(padded.encode()).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise ProxyError(Code.BAD_REQUEST, "recall handle is invalid") from None
    items = raw.split(" ")
    if not handle or items[0] != "v1" or len(items) < 5:
        raise ProxyError(Code.BAD_REQUEST, "recall handle is invalid")
    return items[2]
