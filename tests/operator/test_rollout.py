"""Roll-out decisions (pure): order, health gates, replication gate, stalls, manual restarts."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from ferrymq_operator import rollout
from ferrymq_operator.rollout import (
    Done,
    GroupState,
    InFlight,
    PodState,
    Policy,
    Roll,
    SlaveSync,
    Stalled,
    Wait,
    next_step,
)

NOW = datetime.datetime(2026, 11, 22, 2, 0, 0, tzinfo=datetime.UTC)
OLD, NEW = "rev-old", "rev-new"
CAUGHT_UP = SlaveSync(True, "0 bytes behind")


def group(
    index: int,
    revisions: list[str],
    ready: list[bool] | None = None,
    sync: dict[int, SlaveSync] | None = None,
    update: str = NEW,
    created: str = "2026-11-22T01:00:00Z",
) -> GroupState:
    sts = f"b-broker-{index}"
    ready = ready or [True] * len(revisions)
    pods = tuple(
        PodState(f"{sts}-{i}", i, rev, ok, created=created)
        for i, (rev, ok) in enumerate(zip(revisions, ready, strict=True))
    )
    if sync is None:
        sync = {i: CAUGHT_UP for i in range(1, len(revisions))}
    return GroupState(index, sts, update, len(revisions), pods, sync)


def test_nothing_to_do_when_every_pod_is_current() -> None:
    assert next_step([group(0, [NEW, NEW]), group(1, [NEW, NEW])], NOW) == Done()


def test_slaves_roll_before_the_master_highest_broker_id_first() -> None:
    step = next_step([group(0, [OLD, OLD, OLD])], NOW)
    assert isinstance(step, Roll) and step.pod == "b-broker-0-2"
    step = next_step([group(0, [OLD, OLD, NEW])], NOW)
    assert isinstance(step, Roll) and step.pod == "b-broker-0-1"
    step = next_step([group(0, [OLD, NEW, NEW])], NOW)
    assert isinstance(step, Roll) and step.pod == "b-broker-0-0"
    assert "master" in step.message


def test_groups_roll_one_after_the_other_lowest_first() -> None:
    step = next_step([group(1, [OLD, OLD]), group(0, [OLD, OLD])], NOW)
    assert isinstance(step, Roll) and step.group == 0 and step.pod == "b-broker-0-1"
    step = next_step([group(0, [NEW, NEW]), group(1, [OLD, OLD])], NOW)
    assert isinstance(step, Roll) and step.pod == "b-broker-1-1"


def test_single_replica_groups_roll_their_master() -> None:
    step = next_step([group(0, [NEW]), group(1, [OLD])], NOW)
    assert isinstance(step, Roll) and step.pod == "b-broker-1-0"


def test_waits_while_the_rolled_pod_is_not_ready() -> None:
    inflight = InFlight("b-broker-0-1", "2026-11-22T01:59:00Z")
    step = next_step([group(0, [OLD, NEW], ready=[True, False])], NOW, inflight)
    assert isinstance(step, Wait) and step.reason == "WaitingForPods"
    assert "b-broker-0-1 is not Ready" in step.message


def test_waits_while_the_rolled_pod_is_missing_or_terminating() -> None:
    g = group(0, [OLD, NEW])
    missing = GroupState(0, g.statefulset, NEW, 2, g.pods[:1], g.sync)
    step = next_step([missing], NOW)
    assert isinstance(step, Wait) and "b-broker-0-1 does not exist yet" in step.message
    terminating = GroupState(
        0, g.statefulset, NEW, 2, (g.pods[0], PodState("b-broker-0-1", 1, OLD, False, True)), g.sync
    )
    step = next_step([terminating], NOW)
    assert isinstance(step, Wait) and "terminating" in step.message


def test_master_is_not_rolled_while_its_slave_lags() -> None:
    lag = {1: SlaveSync(False, "5000000 bytes behind")}
    step = next_step([group(0, [OLD, NEW], sync=lag)], NOW)
    assert isinstance(step, Wait) and step.reason == "WaitingForReplication"
    assert "5000000 bytes behind" in step.message


def test_unknown_replication_state_blocks_the_roll() -> None:
    step = next_step([group(0, [OLD, NEW], sync={})], NOW)
    assert isinstance(step, Wait) and "replication state unknown" in step.message
    step = next_step([group(0, [OLD, NEW], sync={1: SlaveSync(None, "slave not reachable")})], NOW)
    assert isinstance(step, Wait) and "slave not reachable" in step.message


def test_a_lagging_slave_in_another_group_blocks_too() -> None:
    lag = {1: SlaveSync(False, "behind")}
    step = next_step([group(0, [OLD, OLD]), group(1, [NEW, NEW], sync=lag)], NOW)
    assert isinstance(step, Wait) and "b-broker-1-1" in step.message


def test_after_the_last_roll_waits_for_catch_up_then_done() -> None:
    inflight = InFlight("b-broker-0-0", "2026-11-22T01:59:30Z")
    lag = {1: SlaveSync(False, "not connected to its master")}
    step = next_step([group(0, [NEW, NEW], sync=lag)], NOW, inflight)
    assert isinstance(step, Wait) and step.reason == "WaitingForReplication"
    assert next_step([group(0, [NEW, NEW])], NOW, inflight) == Done()
    # without a roll in flight, a lagging slave is ordinary health, not the roll's business
    assert next_step([group(0, [NEW, NEW], sync=lag)], NOW) == Done()


def test_a_stuck_pod_stalls_the_roll_after_the_deadline() -> None:
    inflight = InFlight("b-broker-0-1", "2026-11-22T01:40:00Z")  # 20 minutes ago
    groups = [group(0, [OLD, NEW], ready=[True, False]), group(1, [OLD, OLD])]
    step = next_step(groups, NOW, inflight, policy=Policy(stall_seconds=600))
    assert isinstance(step, Stalled) and step.reason == "RolloutStalled"
    assert "b-broker-0-1" in step.message and "1200s" in step.message
    # within the deadline it only waits
    step = next_step(groups, NOW, inflight, policy=Policy(stall_seconds=3600))
    assert isinstance(step, Wait)


def test_a_slave_that_never_catches_up_stalls_the_roll() -> None:
    inflight = InFlight("b-broker-0-1", "2026-11-22T01:00:00Z")
    lag = {1: SlaveSync(False, "9999 bytes behind")}
    step = next_step([group(0, [OLD, NEW], sync=lag)], NOW, inflight)
    assert isinstance(step, Stalled) and "9999 bytes behind" in step.message


def test_unready_pod_at_an_old_revision_is_rolled_first() -> None:
    # The crash-looping pod serves nothing; its new revision may be the fix (e.g. a bad image).
    groups = [group(0, [NEW, NEW]), group(1, [OLD, OLD], ready=[True, False])]
    step = next_step(groups, NOW)
    assert isinstance(step, Roll) and step.pod == "b-broker-1-1"
    assert "not Ready" in step.message


def test_stalled_roll_resumes_when_the_spec_is_fixed() -> None:
    # A bad image stalled pod 1; the user fixes the image: a third revision, pod 1 is rolled again.
    inflight = InFlight("b-broker-0-1", "2026-11-22T01:00:00Z")
    groups = [group(0, ["rev-bad-image", "rev-bad-image"], ready=[True, False], update="rev-fix")]
    step = next_step(groups, NOW, inflight)
    assert isinstance(step, Roll) and step.pod == "b-broker-0-1"


def test_no_roll_while_a_pod_terminates_even_if_another_is_broken() -> None:
    g = group(0, [OLD, OLD])
    pods = (PodState("b-broker-0-0", 0, OLD, False, True), PodState("b-broker-0-1", 1, OLD, False))
    step = next_step([GroupState(0, g.statefulset, NEW, 2, pods, g.sync)], NOW)
    assert isinstance(step, Wait)


def test_manual_restart_rolls_pods_created_before_the_request() -> None:
    since = "2026-11-22T01:30:00Z"
    old = group(0, [NEW, NEW], created="2026-11-22T01:00:00Z")
    step = next_step([old], NOW, restart_since=since)
    assert isinstance(step, Roll) and step.pod == "b-broker-0-1"
    fresh = group(0, [NEW, NEW], created="2026-11-22T01:45:00Z")
    assert next_step([fresh], NOW, restart_since=since) == Done()
    # mixed: slave already restarted, master not yet
    mixed = GroupState(
        0,
        old.statefulset,
        NEW,
        2,
        (old.pods[0], PodState("b-broker-0-1", 1, NEW, True, created="2026-11-22T01:50:00Z")),
        old.sync,
    )
    step = next_step([mixed], NOW, restart_since=since)
    assert isinstance(step, Roll) and step.pod == "b-broker-0-0"


@pytest.mark.parametrize(
    ("master", "slave", "caught_up", "detail"),
    [
        (
            {"commitLogMaxOffset": "1000"},
            {"haConnected": "true", "commitLogMaxOffset": "1000"},
            True,
            "0 bytes",
        ),
        (
            {"commitLogMaxOffset": "5000000"},
            {"haConnected": "true", "commitLogMaxOffset": "0"},
            False,
            "5000000 bytes behind",
        ),
        (
            {"commitLogMaxOffset": "10"},
            {"haConnected": "false", "haLastError": "refused"},
            False,
            "refused",
        ),
        (None, {"haConnected": "true"}, None, "master not reachable"),
        ({"commitLogMaxOffset": "10"}, None, None, "slave not reachable"),
        ({}, {"haConnected": "true", "commitLogMaxOffset": "1"}, None, "not reported"),
        (
            {"commitLogMaxOffset": "10"},
            {"haConnected": "true", "commitLogMaxOffset": "x"},
            None,
            "not reported",
        ),
    ],
)
def test_slave_sync_from_runtime_info(
    master: dict[str, str] | None,
    slave: dict[str, str] | None,
    caught_up: bool | None,
    detail: str,
) -> None:
    sync = rollout.slave_sync(master, slave)
    assert sync.caught_up is caught_up
    assert detail in sync.detail


def test_slave_sync_tolerance_is_configurable() -> None:
    master = {"commitLogMaxOffset": "2000"}
    slave = {"haConnected": "true", "commitLogMaxOffset": "1000"}
    assert rollout.slave_sync(master, slave, max_lag_bytes=1000).caught_up is True
    assert rollout.slave_sync(master, slave, max_lag_bytes=999).caught_up is False


def test_pod_state_from_an_api_pod() -> None:
    pod: dict[str, Any] = {
        "metadata": {
            "name": "b-broker-2-1",
            "labels": {"controller-revision-hash": "b-broker-2-abc"},
            "creationTimestamp": "2026-11-22T01:00:00Z",
        },
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }
    state = rollout.pod_state(pod)
    assert state == PodState(
        "b-broker-2-1", 1, "b-broker-2-abc", True, False, "2026-11-22T01:00:00Z"
    )
    pod["metadata"]["deletionTimestamp"] = "2026-11-22T01:05:00Z"
    state = rollout.pod_state(pod)
    assert state.terminating and not state.ready
    pod["metadata"]["creationTimestamp"] = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    assert rollout.pod_state(pod).created == "2026-01-01T00:00:00Z"


def test_needs_roll_with_unparseable_times_rolls_conservatively() -> None:
    pod = PodState("p-0", 0, NEW, True, created="garbage")
    assert rollout.needs_roll(pod, NEW, "2026-11-22T01:00:00Z")
    assert not rollout.needs_roll(pod, NEW, None)
    assert not rollout.needs_roll(pod, "", None)


def test_pods_coming_up_without_a_roll_are_not_the_rolls_business() -> None:
    creating = group(0, [NEW, NEW], ready=[False, False])
    missing = GroupState(0, "b-broker-0", NEW, 2, creating.pods[:1], creating.sync)
    assert next_step([creating], NOW) == Done()
    assert next_step([missing], NOW) == Done()


# --- issue 16, defect 7: a change of anti-affinity must not deadlock the roll ---

ANTI_AFFINITY = (
    "0/1 nodes are available: 1 node(s) didn't match pod affinity/anti-affinity, "
    "1 node(s) didn't satisfy existing pods anti-affinity rules."
)


def test_a_new_pod_kept_out_by_old_anti_affinity_rolls_the_old_master() -> None:
    """Required -> Preferred on one node: the slave was rolled and cannot schedule while the old
    master keeps its Required rule; waiting for the slave would wait forever."""
    slave = PodState("b-broker-0-1", 1, NEW, False, unschedulable=ANTI_AFFINITY)
    master = PodState("b-broker-0-0", 0, OLD, True)
    groups = [GroupState(0, "b-broker-0", NEW, 2, (master, slave), {})]
    inflight = InFlight("b-broker-0-1", "2026-11-22T01:59:00Z")
    step = next_step(groups, NOW, inflight)
    assert isinstance(step, Roll) and step.pod == "b-broker-0-0"
    assert "b-broker-0-1 cannot be scheduled" in step.message


def test_a_pod_unschedulable_for_other_reasons_is_waited_for() -> None:
    """No nodes with enough memory: rolling the master would not help, so nothing else rolls."""
    slave = PodState("b-broker-0-1", 1, NEW, False, unschedulable="0/1 nodes: Insufficient memory")
    master = PodState("b-broker-0-0", 0, OLD, True)
    groups = [GroupState(0, "b-broker-0", NEW, 2, (master, slave), {})]
    step = next_step(groups, NOW, InFlight("b-broker-0-1", "2026-11-22T01:59:00Z"))
    assert isinstance(step, Wait) and "b-broker-0-1 is not Ready" in step.message


def test_unschedulable_pod_without_old_pods_in_its_group_waits() -> None:
    pending = PodState("b-broker-1-1", 1, NEW, False, unschedulable=ANTI_AFFINITY)
    groups = [
        group(0, [OLD, OLD]),
        GroupState(1, "b-broker-1", NEW, 2, (PodState("b-broker-1-0", 0, NEW, True), pending)),
    ]
    step = next_step(groups, NOW)
    assert isinstance(step, Wait) and "b-broker-1-1 is not Ready" in step.message


def test_pod_state_reads_the_scheduler_condition() -> None:
    state = rollout.pod_state(
        {
            "metadata": {"name": "b-broker-0-1", "labels": {rollout.REVISION_LABEL: NEW}},
            "status": {
                "phase": "Pending",
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": ANTI_AFFINITY,
                    }
                ],
            },
        }
    )
    assert state.kept_out_by_anti_affinity and not state.ready and state.ordinal == 1
