"""The pure Lease decision of the controller's Kubernetes leader election (k8s_store.lease_action)."""

from __future__ import annotations

from datetime import UTC, datetime

from ferrymq.controller.k8s_store import LeaseAction, LeaseRecord, lease_action

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _held(holder: str, duration: int = 10) -> LeaseRecord:
    return LeaseRecord(holder=holder, duration_s=duration, renew_time=T0, transitions=0)


def test_no_lease_is_created() -> None:
    assert lease_action(None, "a", observed_at=0.0, now=0.0) is LeaseAction.CREATE


def test_own_lease_is_renewed_even_when_old() -> None:
    assert lease_action(_held("a"), "a", observed_at=0.0, now=1000.0) is LeaseAction.RENEW


def test_someone_elses_fresh_lease_is_left_alone() -> None:
    assert lease_action(_held("b", 10), "a", observed_at=100.0, now=109.9) is LeaseAction.WAIT


def test_someone_elses_lease_unchanged_for_its_duration_is_taken() -> None:
    assert lease_action(_held("b", 10), "a", observed_at=100.0, now=110.0) is LeaseAction.TAKE


def test_released_lease_is_taken_at_once() -> None:
    assert lease_action(_held("", 10), "a", observed_at=100.0, now=100.0) is LeaseAction.TAKE
