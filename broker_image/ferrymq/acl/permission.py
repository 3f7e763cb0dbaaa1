"""Permission bits and the admin-only request codes (upstream ``acl.common.Permission``).

A resource's permission is a bit set: DENY wins over everything, ANY asks for PUB or SUB.
Upstream 4.9 lists five admin codes; ferrymq also guards every other code that changes broker
or NameServer state for everyone (config, write permission, offsets reset, KV config, topic and
group deletion): an ACL that lets any signed client rewrite broker.conf protects nothing.
"""

from __future__ import annotations

from ferrymq.remoting.codes import RequestCode

DENY = 1
ANY = 1 << 1
PUB = 1 << 2
SUB = 1 << 3

_NAMES = {"PUB": PUB, "SUB": SUB, "PUB|SUB": PUB | SUB, "SUB|PUB": PUB | SUB, "DENY": DENY}

# upstream Permission.ADMIN_CODE
UPSTREAM_ADMIN_CODES = frozenset(
    {
        RequestCode.UPDATE_AND_CREATE_TOPIC,
        RequestCode.UPDATE_BROKER_CONFIG,
        RequestCode.DELETE_TOPIC_IN_BROKER,
        RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
        RequestCode.DELETE_SUBSCRIPTIONGROUP,
    }
)

# what a broker sends its NameServers about itself
REGISTRATION_CODES = frozenset({RequestCode.REGISTER_BROKER, RequestCode.UNREGISTER_BROKER})

# every other code that changes shared state (the "every other admin code")
ADMIN_CODES: frozenset[int] = frozenset(
    int(code)
    for code in UPSTREAM_ADMIN_CODES
    | {
        RequestCode.WIPE_WRITE_PERM_OF_BROKER,
        RequestCode.ADD_WRITE_PERM_OF_BROKER,
        RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
        RequestCode.RESET_CONSUMER_OFFSET_IN_BROKER,
        RequestCode.RESET_CONSUMER_CLIENT_OFFSET,
        RequestCode.CLONE_GROUP_OFFSET,
        RequestCode.TRIGGER_DELETE_FILES,
        RequestCode.CLEAN_EXPIRED_CONSUMEQUEUE,
        RequestCode.CLEAN_UNUSED_TOPIC,
        RequestCode.PUT_KV_CONFIG,
        RequestCode.DELETE_KV_CONFIG,
        RequestCode.DELETE_TOPIC_IN_NAMESRV,
        RequestCode.UPDATE_NAMESRV_CONFIG,
        RequestCode.SUSPEND_CONSUMER,
        RequestCode.RESUME_CONSUMER,
        # a NameServer with aclEnable: only an admin account may put a broker into (or take it
        # out of) the routes, else anyone on the network could hijack a topic's route. Upstream
        # (4.9 and 5.x) has no ACL on the NameServer and its brokers register unsigned.
        *REGISTRATION_CODES,
    }
)


def parse_perm(text: str | None) -> int:
    """``"PUB"``, ``"SUB"``, ``"PUB|SUB"``, ``"DENY"`` -> bits; anything else is DENY (upstream)."""
    if text is None:
        return DENY
    return _NAMES.get(text.strip().upper(), DENY)


def perm_name(perm: int) -> str:
    if perm & DENY:
        return "DENY"
    names = [name for name, bit in (("PUB", PUB), ("SUB", SUB)) if perm & bit]
    return "|".join(names) or "DENY"


def check_permission(needed: int, owned: int) -> bool:
    """Upstream Permission.checkPermission: does ``owned`` grant ``needed``?"""
    if owned & DENY:
        return False
    if needed & ANY:
        return bool(owned & (PUB | SUB))
    return bool(needed & owned)


def needs_admin(code: int) -> bool:
    return code in ADMIN_CODES
