"""Roll-out with spec.failover controller (pure): the elected master, wherever it is, rolls last,
and only after mastership moved to a Ready, current, in-sync replica (SwitchOver)."""

from __future__ import annotations

import dataclasses
import datetime

from ferrymq_operator.rollout import (
    SWITCHOVER_GATE,
    Done,
    GroupState,
    InFlight,
    PodState,
    Roll,
    SlaveSync,
    Stalled,
    SwitchOver,
    Wait,
    next_step,
)

NOW = datetime.datetime(2026, 11, 22, 2, 0, 0, tzinfo=datetime.UTC)
OLD, NEW = "rev-old", "rev-new"
CAUGHT_UP = SlaveSync(True, "0 bytes behind")


def group(
    revisions: list[str],
    master: int | None,
    in_sync: set[int],
    ready: list[bool] | None = None,
) -> GroupState:
    ready = ready or [True] * len(revisions)
    pods = tuple(
        PodState(f"b-broker-0-{i}", i, rev, ok)
        for i, (rev, ok) in enumerate(zip(revisions, ready, strict=True))
    )
    sync = {i: CAUGHT_UP for i in range(len(revisions)) if i != master}
    return GroupState(
        0,
        "b-broker-0",
        NEW,
        len(revisions),
        pods,
        sync,
        controller_mode=True,
        master=master,
        in_sync=frozenset(in_sync),
    )


def test_elected_master_rolls_last_wherever_it_is() -> None:
    # master is ordinal 1: ordinals 2 and 0 roll first (highest first), then the master
    step = next_step([group([OLD, OLD, OLD], master=1, in_sync={0, 1, 2})], NOW)
    assert isinstance(step, Roll) and step.pod == "b-broker-0-2"
    step = next_step([group([OLD, OLD, NEW], master=1, in_sync={0, 1, 2})], NOW)
    assert isinstance(step, Roll) and step.pod == "b-broker-0-0"
    assert "slave" in step.message


def test_master_is_not_deleted_but_handed_over_first() -> None:
    step = next_step([group([NEW, OLD, NEW], master=1, in_sync={0, 1, 2})], NOW)
    assert step == SwitchOver(0, "b-broker-0-1", 0, step.message)  # type: ignore[union-attr]
    assert "b-broker-0-1" in step.message and "b-broker-0-0" in step.message  # type: ignore[union-attr]


def test_handed_over_master_then_rolls_as_a_slave() -> None:
    # after the switchover the controller reports ordinal 0 as master; the old one is a slave
    step = next_step([group([NEW, OLD, NEW], master=0, in_sync={0, 1, 2})], NOW)
    assert isinstance(step, Roll) and step.pod == "b-broker-0-1"
    assert "slave" in step.message
    assert next_step([group([NEW, NEW, NEW], master=0, in_sync={0, 2})], NOW) == Done()


def test_only_in_sync_current_ready_replicas_may_take_over() -> None:
    # ordinal 0 current but not in the SyncStateSet, ordinal 2 in it: 2 is chosen
    step = next_step([group([NEW, OLD, NEW], master=1, in_sync={1, 2})], NOW)
    assert isinstance(step, SwitchOver) and step.to_ordinal == 2
    # nobody current is in sync: wait, never delete the master
    step = next_step([group([NEW, OLD, NEW], master=1, in_sync={1})], NOW)
    assert isinstance(step, Wait) and step.reason == SWITCHOVER_GATE
    assert "SyncStateSet [1]" in step.message


def test_waiting_for_the_sync_state_set_stalls_after_the_deadline() -> None:
    g = group([NEW, OLD], master=1, in_sync={1})
    long_ago = InFlight("b-broker-0-0", "2026-11-22T01:00:00Z")
    step = next_step([g], NOW, in_flight=long_ago)
    assert isinstance(step, Stalled) and step.gate == SWITCHOVER_GATE


def test_single_replica_group_is_rolled_without_a_switchover() -> None:
    step = next_step([group([OLD], master=0, in_sync={0})], NOW)
    assert isinstance(step, Roll) and step.pod == "b-broker-0-0"


def test_without_a_controller_the_fixed_master_is_rolled_directly() -> None:
    g = dataclasses.replace(
        group([OLD, NEW], master=0, in_sync={0, 1}), controller_mode=False, master=1
    )
    step = next_step([g], NOW)
    assert isinstance(step, Roll) and step.pod == "b-broker-0-0"
