"""ACL of the gRPC port: the ``authorization`` metadata of 5.x clients checked against the plain
ACL accounts (``plain_acl.yml``, :mod:`ferrymq.acl`) as upstream's proxy does with ACL 1.0.

A client signs the request time: ``authorization: MQv2-HMAC-SHA1 Credential=<accessKey>,
SignedHeaders=x-mq-date-time, Signature=<hex HMAC-SHA1(secretKey, x-mq-date-time)>``. The decision
order is the remoting ACL's (:func:`ferrymq.acl.validator.decide`): globally white addresses pass,
then a known AccessKey, the account's white address (admits without a signature), the signature,
then the permission on each topic (PUB to send, SUB to receive) and group (SUB) the call names.
A refusal is answered in-band as UNAUTHORIZED (40100) naming what was missing. Pure.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Mapping

from ferrymq.acl.permission import PUB, SUB
from ferrymq.acl.plain_config import AclTable
from ferrymq.acl.validator import (
    REASON_BAD_SIGNATURE,
    REASON_NO_ACCESS_KEY,
    Refusal,
    globally_white,
    host_of,
    resource_refusal,
    unknown_key,
)
from ferrymq.topic_validator import RETRY_GROUP_TOPIC_PREFIX

AUTHORIZATION = "authorization"
DATE_TIME = "x-mq-date-time"
ALGORITHM = "MQv2-HMAC-SHA1"
_FIELD = re.compile(r"(Credential|SignedHeaders|Signature)=([^,\s]+)")

Needed = list[tuple[str, int]]


def parse_authorization(value: str) -> tuple[str, str] | None:
    """``(accessKey, signature)`` of an ``authorization`` value; None when it is not one."""
    algorithm, _, rest = value.strip().partition(" ")
    if algorithm != ALGORITHM:
        return None
    fields = dict(_FIELD.findall(rest))
    credential = fields.get("Credential", "")
    # upstream's credential may carry a scope after the key: "<ak>/<scope>"
    access_key = credential.split("/", 1)[0]
    signature = fields.get("Signature")
    if not access_key or not signature:
        return None
    return access_key, signature


def signature_of(secret_key: str, date_time: str) -> str:
    return hmac.new(secret_key.encode(), date_time.encode(), hashlib.sha1).hexdigest()


def publish(topic: str) -> Needed:
    return [(topic, PUB)]


def subscribe(topic: str, group: str) -> Needed:
    return [(topic, SUB), (RETRY_GROUP_TOPIC_PREFIX + group, SUB)]


def decide(
    table: AclTable, remote_addr: str, metadata: Mapping[str, str], needed: Needed
) -> Refusal | None:
    """None when the call is allowed, else why not."""
    remote_ip = host_of(remote_addr)
    if globally_white(table, remote_ip):
        return None
    parsed = parse_authorization(metadata.get(AUTHORIZATION, ""))
    if parsed is None:
        return Refusal(
            REASON_NO_ACCESS_KEY,
            f"ACL: the call from {remote_ip} carries no {ALGORITHM} authorization "
            "and the address is not in globalWhiteRemoteAddresses",
        )
    access_key, signature = parsed
    account = table.accounts.get(access_key)
    if account is None:
        return unknown_key(access_key)
    if account.white is not None and account.white.matches(remote_ip):
        return None
    expected = signature_of(account.secret_key, metadata.get(DATE_TIME, ""))
    if not hmac.compare_digest(expected.lower(), signature.lower()):
        return Refusal(
            REASON_BAD_SIGNATURE,
            f"ACL: check signature failed for accessKey {access_key!r} (wrong secretKey?)",
        )
    return resource_refusal(account, needed, remote_ip)
