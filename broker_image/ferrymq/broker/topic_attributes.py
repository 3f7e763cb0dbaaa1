"""Topic attributes (upstream RocketMQ 5 ``TopicAttributes``, ``AttributeParser``, ``AttributeUtil``).

UPDATE_AND_CREATE_TOPIC carries them in the header field ``attributes`` as ``+key=value`` (set) and
``-key`` (remove), comma separated, e.g. ``+message.type=FIFO``; the broker keeps them in the topic's
``attributes`` map (topics.json, GET_ALL_TOPIC_CONFIG). A request without the field keeps the topic's
current attributes, as upstream does.

Only attributes ferrymq knows are accepted (upstream refuses unknown keys too). ``message.type`` is
enforced where upstream enforces it: by the 5.x proxy on send (MESSAGE_PROPERTY_CONFLICT_WITH_TYPE);
Apache's broker stores whatever a remoting producer sends, and so does ferrymq's. As upstream,
``MIXED`` is refused (INVALID_PARAMETER, "MIXED message type is not supported.") unless the broker
has enableMixedMessageType=true.
"""

from __future__ import annotations

from collections.abc import Mapping

# key -> allowed values (upstream EnumAttribute); the operator validates Topic specs against this.
TOPIC_ATTRIBUTES: dict[str, frozenset[str]] = {
    "message.type": frozenset({"UNSPECIFIED", "NORMAL", "FIFO", "DELAY", "TRANSACTION", "MIXED"}),
}
MESSAGE_TYPE = "message.type"
MIXED = "MIXED"


class AttributeRefused(ValueError):
    """An attributes field the broker refuses; the message names the attribute."""

    code = 1  # SYSTEM_ERROR


class MixedRefused(AttributeRefused):
    """``message.type=MIXED`` on a broker without enableMixedMessageType (upstream's words)."""

    code = 29  # INVALID_PARAMETER

    def __init__(self) -> None:
        super().__init__("MIXED message type is not supported.")


def check_attribute(key: str, value: str) -> str | None:
    """None when ``key=value`` is a known attribute with an allowed value, else the reason."""
    allowed = TOPIC_ATTRIBUTES.get(key)
    if allowed is None:
        known = ", ".join(sorted(TOPIC_ATTRIBUTES))
        return f"unsupported topic attribute {key!r} (supported: {known})"
    if value not in allowed:
        return f"topic attribute {key}={value!r} is not one of {', '.join(sorted(allowed))}"
    return None


def parse_operations(text: str) -> dict[str, str | None]:
    """``"+a=1,-b"`` -> ``{"a": "1", "b": None}`` (None removes); raises AttributeRefused."""
    out: dict[str, str | None] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        op, rest = item[0], item[1:]
        if rest.partition("=")[0] in out:
            raise AttributeRefused(f"attribute {rest.partition('=')[0]!r} is given twice")
        if op == "+":
            key, sep, value = rest.partition("=")
            if not sep or not key:
                raise AttributeRefused(f"attribute {item!r} must look like +key=value")
            out[key] = value
        elif op == "-":
            if not rest or "=" in rest:
                raise AttributeRefused(f"attribute {item!r} must look like -key")
            out[rest] = None
        else:
            raise AttributeRefused(f"attribute {item!r} must start with + (set) or - (remove)")
    return out


def alter(
    current: Mapping[str, str],
    operations: Mapping[str, str | None],
    *,
    create: bool,
    allow_mixed: bool = False,
) -> dict[str, str]:
    """The attributes after applying ``operations`` (upstream alterCurrentAttributes)."""
    if not allow_mixed and operations.get(MESSAGE_TYPE) == MIXED:
        raise MixedRefused
    out = dict(current)
    for key, value in operations.items():
        if value is None:
            if create:
                raise AttributeRefused(
                    f"cannot remove attribute {key!r} from a topic being created"
                )
            if key not in out:
                raise AttributeRefused(
                    f"attribute {key!r} is not set on the topic; nothing to remove"
                )
            del out[key]
            continue
        reason = check_attribute(key, value)
        if reason is not None:
            raise AttributeRefused(reason)
        out[key] = value
    return out


def operations_text(current: Mapping[str, str], desired: Mapping[str, str]) -> str:
    """The ``attributes`` header that turns ``current`` into exactly ``desired``."""
    sets = [f"+{k}={v}" for k, v in sorted(desired.items()) if current.get(k) != v]
    removes = [f"-{k}" for k in sorted(current) if k not in desired]
    return ",".join(sets + removes)
