"""Status computation: each condition and phase from crafted observations."""

from __future__ import annotations

from typing import Any

import pytest
from ferrymq_operator import rollout
from ferrymq_operator import status as st
from ferrymq_operator.models import BrokerStatus, ClusterStatus, Condition, RolloutStatus
from ferrymq_operator.status import Failure, WorkloadObservation

T0 = "2026-11-22T00:00:00Z"
T1 = "2026-11-22T00:05:00Z"


def settled(
    name: str, replicas: int = 2, ready: int | None = None, gen: int = 1, **kw: Any
) -> WorkloadObservation:
    return WorkloadObservation(
        name=name,
        desired_replicas=replicas,
        exists=True,
        generation=gen,
        observed_generation=gen,
        replicas=replicas,
        ready_replicas=replicas if ready is None else ready,
        updated_replicas=replicas,
        current_revision="r1",
        update_revision="r1",
        **kw,
    )


def compute(
    generation: int,
    workloads: list[WorkloadObservation],
    previous: ClusterStatus,
    failure: Failure | None,
    now: str,
    pending: str | None = None,
) -> dict[str, Any]:
    """One pass through the builder: observe, then the patch."""
    builder = st.StatusBuilder(ClusterStatus, previous, generation, now)
    builder.observe(workloads, failure, pending)
    return builder.patch()


def conditions(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in status["conditions"]}


def test_all_ready() -> None:
    out = compute(3, [settled("a"), settled("b")], ClusterStatus(), None, T0)
    c = conditions(out)
    assert out["phase"] == "Running"
    assert out["ready"] == "4/4"
    assert out["observedGeneration"] == 3
    assert out["readyGeneration"] == 3
    assert c["Ready"]["status"] == "True"
    assert c["Progressing"]["status"] == "False"
    assert c["Degraded"]["status"] == "False"
    assert c["ReconcileFailed"]["status"] == "False"
    assert all(cond["observedGeneration"] == 3 for cond in out["conditions"])


def test_creating_until_first_ready() -> None:
    out = compute(
        1, [settled("a", ready=0, not_ready_pods=("a-0", "a-1"))], ClusterStatus(), None, T0
    )
    c = conditions(out)
    assert out["phase"] == "Creating"
    assert c["Progressing"]["status"] == "True" and c["Progressing"]["reason"] == "Creating"
    assert c["Degraded"]["status"] == "False"
    assert c["Ready"]["reason"] == "PodsNotReady" and "a-0, a-1" in c["Ready"]["message"]


def test_missing_statefulset_is_progressing() -> None:
    out = compute(1, [WorkloadObservation(name="a", desired_replicas=2)], ClusterStatus(), None, T0)
    assert out["phase"] == "Creating"
    assert out["ready"] == "0/2"


def test_lost_pod_after_ready_is_degraded() -> None:
    previous = ClusterStatus(ready_generation=2)
    out = compute(
        2, [settled("a", ready=1, not_ready_pods=("a-1",), master_ready=True)], previous, None, T0
    )
    c = conditions(out)
    assert out["phase"] == "Degraded"
    assert c["Degraded"]["status"] == "True" and c["Degraded"]["reason"] == "PodsUnavailable"
    assert "a-1" in c["Degraded"]["message"]
    assert c["Progressing"]["status"] == "False"
    assert out["readyGeneration"] == 2


def test_master_down_is_named() -> None:
    previous = ClusterStatus(ready_generation=2)
    out = compute(
        2,
        [settled("g0", ready=1, not_ready_pods=("g0-0",), master_ready=False)],
        previous,
        None,
        T0,
    )
    c = conditions(out)
    assert c["Degraded"]["reason"] == "MasterUnavailable"
    assert "g0" in c["Degraded"]["message"]


def test_spec_change_is_updating_not_degraded() -> None:
    previous = ClusterStatus(ready_generation=1)
    rolling = WorkloadObservation(
        name="a",
        desired_replicas=3,
        exists=True,
        generation=2,
        observed_generation=2,
        replicas=3,
        ready_replicas=2,
        updated_replicas=3,
        current_revision="r1",
        update_revision="r1",
    )
    out = compute(2, [settled("b"), rolling], previous, None, T0)
    c = conditions(out)
    assert out["phase"] == "Updating"
    assert c["Progressing"]["reason"] == "Updating"
    assert c["Degraded"]["status"] == "False"


def test_revision_rollout_is_progressing() -> None:
    obs = WorkloadObservation(
        name="a",
        desired_replicas=2,
        exists=True,
        generation=3,
        observed_generation=3,
        replicas=2,
        ready_replicas=2,
        updated_replicas=1,
        current_revision="r1",
        update_revision="r2",
    )
    assert obs.rolling and not obs.all_ready
    out = compute(3, [obs], ClusterStatus(ready_generation=3), None, T0)
    assert conditions(out)["Progressing"]["status"] == "True"


def test_failure_wins() -> None:
    failure = Failure("InvalidSpec", "spec.groups: must be >= 1")
    out = compute(4, [settled("a")], ClusterStatus(ready_generation=3), failure, T0)
    c = conditions(out)
    assert out["phase"] == "Failed"
    assert c["ReconcileFailed"] == {
        "type": "ReconcileFailed",
        "status": "True",
        "reason": "InvalidSpec",
        "message": "spec.groups: must be >= 1",
        "lastTransitionTime": T0,
        "observedGeneration": 4,
    }
    assert c["Ready"]["status"] == "False" and c["Ready"]["reason"] == "InvalidSpec"
    assert out["readyGeneration"] == 3


def test_failed_only_without_workloads() -> None:
    out = compute(1, [], ClusterStatus(), Failure("InvalidSpec", "x"), T0)
    assert out["phase"] == "Failed"
    assert conditions(out)["Degraded"]["status"] == "False"


def test_pending_work_keeps_progressing() -> None:
    out = compute(
        2, [settled("a")], ClusterStatus(ready_generation=1), None, T0, pending="copying topics"
    )
    c = conditions(out)
    assert out["phase"] == "Updating"
    assert c["Ready"]["status"] == "False" and c["Ready"]["reason"] == "Pending"
    assert c["Progressing"]["message"] == "copying topics"
    assert out["readyGeneration"] == 1


def test_transition_time_kept_while_status_unchanged() -> None:
    first = compute(1, [settled("a")], ClusterStatus(), None, T0)
    again = compute(1, [settled("a")], ClusterStatus.model_validate(first), None, T1)
    assert conditions(again)["Ready"]["lastTransitionTime"] == T0
    previous = ClusterStatus.model_validate(again)
    broken = compute(1, [settled("a", ready=1, not_ready_pods=("a-0",))], previous, None, T1)
    assert conditions(broken)["Ready"]["lastTransitionTime"] == T1
    assert conditions(broken)["ReconcileFailed"]["lastTransitionTime"] == T0


def test_observe_statefulset_from_api_dicts() -> None:
    sts = {
        "metadata": {"generation": 4},
        "status": {
            "observedGeneration": 4,
            "replicas": 2,
            "readyReplicas": 1,
            "updatedReplicas": 2,
            "currentRevision": "x",
            "updateRevision": "x",
        },
    }
    pods = [
        {
            "metadata": {"name": "g-0"},
            "status": {"conditions": [{"type": "Ready", "status": "False"}]},
        },
        {
            "metadata": {"name": "g-1"},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        },
    ]
    obs = st.observe_statefulset("g", 2, sts, pods, master_ordinal=0)
    assert obs.exists and not obs.rolling and not obs.all_ready
    assert obs.not_ready_pods == ("g-0",)
    assert obs.master_ready is False
    assert st.observe_statefulset("g", 2, None, []).exists is False


def test_terminating_pod_is_not_ready() -> None:
    pod = {
        "metadata": {"name": "p", "deletionTimestamp": T0},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }
    assert st.pod_is_ready(pod) is False


def test_long_pod_lists_are_shortened() -> None:
    pods = tuple(f"p-{i}" for i in range(9))
    out = compute(
        1, [settled("a", replicas=9, ready=0, not_ready_pods=pods)], ClusterStatus(), None, T0
    )
    assert "and 4 more" in conditions(out)["Ready"]["message"]


def test_with_failure_keeps_the_other_conditions() -> None:
    ready = compute(2, [settled("a")], ClusterStatus(), None, T0)
    previous = ClusterStatus.model_validate(ready)
    builder = st.StatusBuilder(ClusterStatus, previous, 2, T1)
    builder.fail(Failure("ApiError", "apply StatefulSet a: 500; retrying"))
    patch = builder.patch()
    c = conditions(patch)
    assert patch["phase"] == "Failed"
    assert c["ReconcileFailed"]["status"] == "True" and c["ReconcileFailed"]["reason"] == "ApiError"
    assert c["ReconcileFailed"]["lastTransitionTime"] == T1
    assert c["Ready"] == {**conditions(ready)["Ready"]}
    assert set(c) == {"Ready", "Progressing", "Degraded", "ReconcileFailed"}
    assert "ready" not in patch  # a merge patch: pod counts from the last good pass stay


# --- the builder: a merge patch of what was set, conditions stamped in one place ---


def running(
    previous: ClusterStatus | None = None, now: str = T0
) -> st.StatusBuilder[ClusterStatus]:
    builder = st.StatusBuilder(ClusterStatus, previous or ClusterStatus(), 1, now)
    builder.observe([settled("a")], None)
    return builder


def test_patch_holds_only_what_was_set() -> None:
    builder = st.StatusBuilder(BrokerStatus, BrokerStatus(name_server_addr="ns:9876"), 1, T0)
    assert builder.patch() == {}  # nothing set: nothing written, the resource keeps its status
    builder.status.rollout = None  # set to nothing: written as null, which removes it
    builder.status.topic_synced_groups = [0, 1]
    assert builder.patch() == {"rollout": None, "topicSyncedGroups": [0, 1]}
    builder.status.rollout = RolloutStatus(pod="b-0-1", since=T0)
    assert builder.patch()["rollout"] == {"pod": "b-0-1", "since": T0}


def test_assignments_are_validated() -> None:
    builder = st.StatusBuilder(BrokerStatus, BrokerStatus(), 1, T0)
    with pytest.raises(ValueError, match="topic_synced_groups"):
        builder.status.topic_synced_groups = ["not a group"]  # type: ignore[list-item]


def test_stalled_roll_is_degraded_and_stops_progressing() -> None:
    builder = running()
    builder.rolling(rollout.Stalled("RolloutStalled", "p-1 not Ready"))
    out = builder.patch()
    c = conditions(out)
    assert c["Degraded"]["status"] == "True" and c["Degraded"]["reason"] == "RolloutStalled"
    assert c["Degraded"]["lastTransitionTime"] == T0
    assert c["Progressing"]["status"] == "False"
    assert c["Ready"]["status"] == "False"
    assert out["phase"] == "Degraded"


def test_stall_keeps_its_transition_time_across_passes() -> None:
    first = running()
    first.rolling(rollout.Stalled("RolloutStalled", "p-1 not Ready"))
    builder = running(ClusterStatus.model_validate(first.patch()), now=T1)
    builder.rolling(rollout.Stalled("RolloutStalled", "p-1 not Ready"))
    c = conditions(builder.patch())
    assert c["Degraded"]["status"] == "True" and c["Degraded"]["lastTransitionTime"] == T0
    assert c["Ready"]["lastTransitionTime"] == T0


def test_rolling_is_progressing() -> None:
    builder = running()
    builder.rolling(rollout.Roll("p-1", 0, "rolling slave p-1"))
    out = builder.patch()
    assert conditions(out)["Progressing"]["reason"] == "RollingUpdate"
    assert conditions(out)["Progressing"]["message"] == "rolling slave p-1"
    assert out["phase"] == "Updating"
    builder = running()
    builder.rolling(rollout.Wait("WaitingForReplication", "p-1 lags"))
    assert "p-1 lags" in conditions(builder.patch())["Progressing"]["message"]


def test_done_and_failed_statuses_are_left_alone() -> None:
    builder = running()
    builder.rolling(rollout.Done())
    assert builder.patch() == running().patch()
    failed = st.StatusBuilder(ClusterStatus, ClusterStatus(), 1, T0)
    failed.observe([settled("a")], Failure("ApplyRejected", "no"))
    failed.rolling(rollout.Wait("WaitingForPods", "x"))
    out = failed.patch()
    assert out["phase"] == "Failed"
    assert conditions(out)["Progressing"]["status"] == "False"


def test_a_kept_condition_is_written_unchanged() -> None:
    old = Condition(
        type="CertificateExpiring",
        status="False",
        reason="Valid",
        message="valid until 2027",
        last_transition_time=T0,
        observed_generation=1,
    )
    builder = st.StatusBuilder(ClusterStatus, ClusterStatus(conditions=[old]), 2, T1)
    builder.observe([settled("a")], None)
    builder.keep(old)
    c = conditions(builder.patch())
    assert c["CertificateExpiring"]["observedGeneration"] == 1
    assert c["Ready"]["observedGeneration"] == 2
