"""Topics and consumer groups on a Broker's brokers that no resource manages (auto-created, or made
with mqadmin-like tools): left alone, and counted in the Broker's ``status.unmanaged``.

System topics and groups (upstream TopicValidator / the broker's start-up groups, retry and DLQ
topics, the cluster- and broker-name topics) are not counted.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ferrymq.broker.subscription_groups import SYSTEM_GROUPS

from ferrymq_operator.broker_admin import is_system_topic


@dataclass(frozen=True)
class Inventory:
    """What one group's master holds, with its own brokerName and brokerClusterName."""

    broker_name: str
    cluster_name: str
    topics: frozenset[str]
    groups: frozenset[str]


def count(
    inventories: Sequence[Inventory], managed_topics: Iterable[str], managed_groups: Iterable[str]
) -> dict[str, int]:
    """``{"topics": n, "groups": m}`` over the union of every group's names."""
    brokers = [i.broker_name for i in inventories]
    topics: set[str] = set()
    groups: set[str] = set()
    for inv in inventories:
        topics |= {t for t in inv.topics if not is_system_topic(t, inv.cluster_name, brokers)}
        groups |= {g for g in inv.groups if g not in SYSTEM_GROUPS}
    return {
        "topics": len(topics - set(managed_topics)),
        "groups": len(groups - set(managed_groups)),
    }
