"""Tag subscriptions: ``"TagA || TagB"`` or ``"*"`` (upstream ``FilterAPI.buildSubscriptionData``).

The broker filters by the tags hash kept in each ConsumeQueue entry; hashes can collide, so the client
re-checks the tag string of every message it receives (:func:`tags_match`).
"""

from __future__ import annotations

from dataclasses import dataclass

from ferrymq.message import java_string_hash

SUB_ALL = "*"
TAG_SEPARATOR = "||"

__all__ = ["SUB_ALL", "TagSubscription", "parse_tag_expression", "tags_match"]


@dataclass(frozen=True, slots=True)
class TagSubscription:
    """A parsed tag expression; ``tags`` empty means every message."""

    sub_string: str
    tags: frozenset[str]
    codes: frozenset[int]

    @property
    def is_all(self) -> bool:
        return not self.tags


def parse_tag_expression(expression: str | None) -> TagSubscription:
    """``None``, ``""`` and ``"*"`` subscribe to everything; otherwise tags split on ``||``."""
    if expression is None or not expression.strip() or expression.strip() == SUB_ALL:
        return TagSubscription(SUB_ALL, frozenset(), frozenset())
    tags = frozenset(t.strip() for t in expression.split(TAG_SEPARATOR) if t.strip())
    if not tags:
        return TagSubscription(SUB_ALL, frozenset(), frozenset())
    return TagSubscription(expression, tags, frozenset(java_string_hash(t) for t in tags))


def tags_match(subscription: TagSubscription, tags: str | None) -> bool:
    """Client-side re-check of a received message's TAGS against the subscription."""
    if subscription.is_all:
        return True
    return tags is not None and tags in subscription.tags
