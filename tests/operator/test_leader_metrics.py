"""Leader election's rule (pure) and the operator's reconcile metrics."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest
from ferrymq_operator import leader, metrics
from ferrymq_operator.leader import Decision, LeaseView


def test_a_free_or_missing_lease_is_taken() -> None:
    assert leader.decide(None, "a", 100.0) is Decision.ACQUIRE
    assert leader.decide(LeaseView(None, None, 15), "a", 100.0) is Decision.ACQUIRE


def test_the_holder_renews_and_others_wait_while_it_is_live() -> None:
    lease = LeaseView("a", 100.0, 15)
    assert leader.decide(lease, "a", 110.0) is Decision.RENEW
    assert leader.decide(lease, "b", 110.0) is Decision.WAIT
    assert leader.decide(lease, "b", 115.0) is Decision.WAIT  # exactly at the end: still live


def test_an_expired_lease_is_taken_over() -> None:
    assert leader.decide(LeaseView("a", 100.0, 15), "b", 115.5) is Decision.ACQUIRE
    assert leader.decide(LeaseView("a", None, 15), "b", 0.0) is Decision.ACQUIRE


def test_the_leader_stops_before_anyone_may_take_over() -> None:
    # a leader unable to renew gives up after RENEW_DEADLINE_S, before the Lease expires for
    # the others (LEASE_DURATION_S): never two reconciling replicas
    assert leader.RENEW_DEADLINE_S + leader.RETRY_PERIOD_S < leader.LEASE_DURATION_S


def sample(name: str, **labels: str) -> float:
    value = metrics.REGISTRY.get_sample_value(name, labels)
    return 0.0 if value is None else value


@dataclass
class Failure:
    reason: str


@dataclass
class Outcome:
    failure: Failure | None


def test_reconciles_failures_and_durations_are_counted_per_kind() -> None:
    kind = "TestKind"
    before = sample("ferrymq_operator_reconciles_total", kind=kind)

    async def ok() -> Outcome:
        return Outcome(None)

    async def refused() -> Outcome:
        return Outcome(Failure("InvalidSpec"))

    async def broken() -> Outcome:
        raise RuntimeError("API down")

    asyncio.run(metrics.timed(kind, ok))
    asyncio.run(metrics.timed(kind, refused))
    with pytest.raises(RuntimeError):
        asyncio.run(metrics.timed(kind, broken))
    assert sample("ferrymq_operator_reconciles_total", kind=kind) == before + 3
    assert sample("ferrymq_operator_reconcile_failures_total", kind=kind, reason="InvalidSpec") >= 1
    assert (
        sample("ferrymq_operator_reconcile_failures_total", kind=kind, reason="RuntimeError") >= 1
    )
    assert sample("ferrymq_operator_reconcile_duration_seconds_count", kind=kind) >= 3


def test_operator_dashboard_queries_only_metrics_the_operator_exports() -> None:
    import json
    import re
    from pathlib import Path

    async def refused() -> Outcome:
        return Outcome(Failure("InvalidSpec"))

    asyncio.run(metrics.timed("Dashboard", refused))  # every labelled series exists once
    board = Path(__file__).resolve().parents[2] / "charts/ferrymq-operator/dashboards/operator"
    exported = {
        sample.name for family in metrics.REGISTRY.collect() for sample in family.samples
    } | {f.name for f in metrics.REGISTRY.collect()}
    panels = json.loads((board / "ferrymq-operator.json").read_text())["panels"]
    assert len(panels) >= 4
    for panel in panels:
        for target in panel["targets"]:
            for name in re.findall(r"ferrymq_operator_[a-z_]+", target["expr"]):
                assert name in exported, (panel["title"], name)
