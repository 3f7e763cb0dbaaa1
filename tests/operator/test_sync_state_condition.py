"""The Broker's ReplicasInSync condition from the controller's state (ferrymq_operator.sync_state)."""

from __future__ import annotations

from ferrymq_operator import models
from ferrymq_operator.status import StatusBuilder
from ferrymq_operator.sync_state import REPLICAS_IN_SYNC, replicas_in_sync


def group(name: str, master: int | None, in_sync: list[int]) -> dict[str, object]:
    return {"brokerName": name, "masterBrokerId": master, "syncStateSet": in_sync}


def test_unknown_until_the_controller_recorded_a_group() -> None:
    assert replicas_in_sync([], 3) is None


def test_every_replica_in_every_set() -> None:
    verdict = replicas_in_sync([group("b-0", 1, [1, 2, 3]), group("b-1", 2, [3, 2, 1])], 3)
    assert verdict is not None and verdict.in_sync and verdict.reason == "AllInSyncStateSet"


def test_replicas_outside_are_named_per_group() -> None:
    verdict = replicas_in_sync([group("b-1", 2, [2]), group("b-0", 1, [1, 2])], 3)
    assert verdict is not None and not verdict.in_sync
    assert verdict.reason == "ReplicaOutOfSyncStateSet"
    assert verdict.message.endswith("b-0: brokerId 3; b-1: brokerId 1, 3")


def test_a_group_without_master_says_so() -> None:
    verdict = replicas_in_sync([group("b-0", None, []), group("b-1", 1, [1])], 1)
    assert verdict is not None and not verdict.in_sync and verdict.reason == "NoMaster"
    assert "b-0" in verdict.message and "b-1" not in verdict.message


def test_the_condition_keeps_its_transition_time_while_out_of_sync() -> None:
    """How long a replica has been out is the condition's lastTransitionTime (Strimzi style)."""
    out = replicas_in_sync([group("b-0", 1, [1])], 2)
    assert out is not None
    first = StatusBuilder(models.BrokerStatus, models.BrokerStatus(), 1, "2026-11-28T10:00:00Z")
    first.condition(REPLICAS_IN_SYNC, out.in_sync, out.reason, out.message)
    (cond,) = first.conditions()
    assert cond.status == "False" and cond.last_transition_time == "2026-11-28T10:00:00Z"
    previous = models.BrokerStatus(conditions=[cond])
    later = StatusBuilder(models.BrokerStatus, previous, 1, "2026-11-28T10:05:00Z")
    later.condition(REPLICAS_IN_SYNC, out.in_sync, out.reason, out.message)
    (still,) = later.conditions()
    assert still.last_transition_time == "2026-11-28T10:00:00Z"
    back = replicas_in_sync([group("b-0", 1, [1, 2])], 2)
    assert back is not None
    healed = StatusBuilder(models.BrokerStatus, models.BrokerStatus(conditions=[still]), 1, "T2")
    healed.condition(REPLICAS_IN_SYNC, back.in_sync, back.reason, back.message)
    (cond_back,) = healed.conditions()
    assert cond_back.status == "True" and cond_back.last_transition_time == "T2"
