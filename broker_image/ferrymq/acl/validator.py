"""The access decision (upstream ``PlainPermissionManager.validate`` + ``checkPerm``), pure.

Order as upstream: an address in ``globalWhiteRemoteAddresses`` passes; then the request must
name a known AccessKey; an address matching the account's ``whiteRemoteAddress`` passes without
a signature check (upstream semantics: the white list admits, it never restricts); then the
signature must match; then admin codes need ``admin: true``; then every resource the request
touches needs its permission (listed, else the account's default topic/group permission).

A refusal carries a short ``reason`` (a metrics label) and a ``remark`` for the client that names
what was missing.
"""

from __future__ import annotations

from dataclasses import dataclass

from ferrymq.acl.permission import DENY, check_permission, needs_admin
from ferrymq.acl.plain_config import Account, AclTable
from ferrymq.acl.resources import needed_permissions
from ferrymq.acl.signature import ACCESS_KEY, SIGNATURE, combine_content, verify
from ferrymq.remoting.command import RemotingCommand
from ferrymq.topic_validator import RETRY_GROUP_TOPIC_PREFIX

REASON_NO_ACCESS_KEY = "no_access_key"
REASON_UNKNOWN_ACCESS_KEY = "unknown_access_key"
REASON_BAD_SIGNATURE = "bad_signature"
REASON_NOT_ADMIN = "not_admin"
REASON_NO_TOPIC_PERM = "no_topic_permission"
REASON_NO_GROUP_PERM = "no_group_permission"
REASONS = (
    REASON_NO_ACCESS_KEY,
    REASON_UNKNOWN_ACCESS_KEY,
    REASON_BAD_SIGNATURE,
    REASON_NOT_ADMIN,
    REASON_NO_TOPIC_PERM,
    REASON_NO_GROUP_PERM,
)


@dataclass(frozen=True, slots=True)
class Refusal:
    reason: str
    remark: str


def host_of(remote_addr: str) -> str:
    """``"1.2.3.4:5678"`` -> ``"1.2.3.4"`` (upstream takes what precedes the last ':')."""
    host, sep, _ = remote_addr.rpartition(":")
    return host.strip("[]") if sep else remote_addr


def globally_white(table: AclTable, remote_ip: str) -> bool:
    """Whether ``remote_ip`` is in globalWhiteRemoteAddresses (admitted without a key)."""
    return any(pattern.matches(remote_ip) for pattern in table.global_white)


def unknown_key(access_key: str) -> Refusal:
    return Refusal(REASON_UNKNOWN_ACCESS_KEY, f"ACL: no acl config for accessKey {access_key!r}")


def decide(table: AclTable, remote_ip: str, request: RemotingCommand) -> Refusal | None:
    """None when ``request`` from ``remote_ip`` is allowed, else why not."""
    if globally_white(table, remote_ip):
        return None
    ext = request.ext_fields
    access_key = ext.get(ACCESS_KEY)
    if not access_key:
        return Refusal(
            REASON_NO_ACCESS_KEY,
            f"ACL: request code {request.code} from {remote_ip} carries no AccessKey "
            "(unsigned) and the address is not in globalWhiteRemoteAddresses",
        )
    account = table.accounts.get(access_key)
    if account is None:
        return unknown_key(access_key)
    if account.white is not None and account.white.matches(remote_ip):
        return None
    content = combine_content(ext, request.body_bytes())
    if not verify(content, account.secret_key, ext.get(SIGNATURE)):
        # upstream 5.4.0's remark (DefaultAuthenticationHandler), word for word
        return Refusal(REASON_BAD_SIGNATURE, "check signature failed.")
    if needs_admin(request.code) and not account.admin:
        return Refusal(
            REASON_NOT_ADMIN,
            f"ACL: request code {request.code} needs admin permission, "
            f"but accessKey {access_key!r} is not admin",
        )
    return resource_refusal(account, needed_permissions(request), remote_ip)


def resource_refusal(
    account: Account, needed: list[tuple[str, int]], remote_ip: str
) -> Refusal | None:
    """None when ``account`` holds every (resource, permission) in ``needed`` (groups as
    ``%RETRY%<group>``), else the first one missing; an admin account without resource lists
    holds them all."""
    access_key = account.access_key
    if not needed or (account.admin and not account.resource_perms):
        return None
    for resource, perm in needed:
        is_group = resource.startswith(RETRY_GROUP_TOPIC_PREFIX)
        owned = account.resource_perms.get(resource)
        if owned is None:
            owned = account.default_group_perm if is_group else account.default_topic_perm
        if not check_permission(perm, owned):
            if is_group:
                what = f"Group:{resource[len(RETRY_GROUP_TOPIC_PREFIX) :]}"
                reason = REASON_NO_GROUP_PERM
            else:
                what = f"Topic:{resource}"
                reason = REASON_NO_TOPIC_PERM
            return Refusal(reason, denied_remark(access_key, what, remote_ip, owned))
    return None


def denied_remark(access_key: str, resource_key: str, remote_ip: str, owned: int) -> str:
    """Upstream 5.4.0's remark (AclAuthorizationHandler): an explicit DENY is "the decision is
    deny.", a permission that does not cover the request "no matched policies." (a plain_acl.yml
    account becomes one allow entry per listed permission there)."""
    detail = "the decision is deny." if owned & DENY else "no matched policies."
    return (
        f"User:{access_key} has no permission to access {resource_key} from {remote_ip}, {detail}"
    )
