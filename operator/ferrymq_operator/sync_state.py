"""The ``ReplicasInSync`` condition of a Broker in controller mode (pure).

A replica outside its group's SyncStateSet does not hold every acknowledged message: a master lost
with it there loses writes (``haMaxTimeSlaveNotCatchup`` takes a lagging slave out). The metric
``ferrymq_controller_replica_out_of_sync_state_set_seconds`` and the
``FerrymqReplicaOutOfSyncStateSet`` alert (over 120 s) show it to Prometheus; this condition shows it
on the resource, from the controller's own state (status.groupMasters). How long it has been so is
the condition's lastTransitionTime.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

REPLICAS_IN_SYNC = "ReplicasInSync"


@dataclass(frozen=True)
class SyncVerdict:
    in_sync: bool
    reason: str
    message: str


def replicas_in_sync(
    masters: Sequence[Mapping[str, Any]], replicas_per_group: int
) -> SyncVerdict | None:
    """``masters``: status.groupMasters (brokerName, masterBrokerId, syncStateSet). Replica ids are
    1..replicas_per_group in controller mode. None while the controller has recorded no group
    (nothing is known yet)."""
    if not masters:
        return None
    expected = set(range(1, replicas_per_group + 1))
    out: list[str] = []
    leaderless: list[str] = []
    for group in sorted(masters, key=lambda m: str(m.get("brokerName", ""))):
        name = str(group.get("brokerName", ""))
        if group.get("masterBrokerId") is None:
            leaderless.append(name)
            continue
        missing = sorted(expected - {int(i) for i in group.get("syncStateSet") or []})
        if missing:
            ids = ", ".join(str(i) for i in missing)
            out.append(f"{name}: brokerId {ids}")
    if leaderless:
        return SyncVerdict(
            False, "NoMaster", "no elected master, so no SyncStateSet: " + ", ".join(leaderless)
        )
    if out:
        return SyncVerdict(
            False,
            "ReplicaOutOfSyncStateSet",
            "outside the SyncStateSet (not holding every acknowledged message): " + "; ".join(out),
        )
    return SyncVerdict(True, "AllInSyncStateSet", "every replica is in its group's SyncStateSet")
