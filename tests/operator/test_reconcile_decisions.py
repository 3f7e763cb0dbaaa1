"""The pure decisions inside reconcile.py (no cluster)."""

from __future__ import annotations

from ferrymq_operator import conf_check, models, reconcile
from ferrymq_operator.builders.names import Owner
from ferrymq_operator.status import Failure

OWNER = Owner("ferrymq.io/v1alpha1", "Broker", "orders", "prod", "uid")

# Scale-in is no longer refused: groups are drained first (tests/operator/test_drain.py,
# tests/operator/test_lifecycle.py, tests/k8s/test_lifecycle_*.py).


def test_initial_groups_hold_topics_only_on_first_reconcile() -> None:
    assert reconcile.initial_synced_groups(models.BrokerStatus(), 3) == [0, 1, 2]
    later = models.BrokerStatus(observed_generation=1, topic_synced_groups=[0, 1])
    assert reconcile.initial_synced_groups(later, 3) == [0, 1]


def test_transition_events_only_on_change() -> None:
    previous = models.ClusterStatus(phase="Creating")
    status = {
        "phase": "Running",
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "AllPodsReady",
                "message": "2/2 pods ready",
            },
            {"type": "ReconcileFailed", "status": "False", "reason": "Reconciled", "message": "ok"},
        ],
    }
    assert reconcile._transition_events(previous, status) == [
        ("Normal", "Running", "2/2 pods ready")
    ]
    same = models.ClusterStatus.model_validate(status)
    assert reconcile._transition_events(same, status) == []


def test_failure_event_once_per_distinct_failure() -> None:
    failed = {
        "phase": "Failed",
        "conditions": [
            {"type": "Ready", "status": "False", "reason": "InvalidSpec", "message": "x"},
            {"type": "ReconcileFailed", "status": "True", "reason": "InvalidSpec", "message": "x"},
        ],
    }
    events = reconcile._transition_events(models.ClusterStatus(phase="Running"), failed)
    assert ("Warning", "InvalidSpec", "x") in events
    again = reconcile._transition_events(models.ClusterStatus.model_validate(failed), failed)
    assert again == []


def test_unknown_config_key_warns_once_per_generation() -> None:
    report = conf_check.ConfReport(problems=[], unknown=["fileReserveTime"])
    result = reconcile.Result(status={})
    previous = models.ClusterStatus(observed_generation=1)
    assert reconcile._conf_failure(report, previous, 2, result) is None
    assert [e[1] for e in result.events] == ["UnknownConfigKey"]
    result = reconcile.Result(status={})
    reconcile._conf_failure(report, models.ClusterStatus(observed_generation=2), 2, result)
    assert result.events == []


def test_bad_config_value_is_a_failure() -> None:
    report = conf_check.ConfReport(problems=["fileReservedTime='x': not an int"], unknown=[])
    failure = reconcile._conf_failure(
        report, models.ClusterStatus(), 1, reconcile.Result(status={})
    )
    assert failure == Failure("InvalidSpec", "spec.config: fileReservedTime='x': not an int")
