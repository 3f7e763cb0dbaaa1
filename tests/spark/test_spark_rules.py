"""Pure rules: lag, Burrow-style statuses from crafted windows, rebalance findings."""

from __future__ import annotations

import pytest
from ferrymq_spark import rules
from ferrymq_spark.rules import MQ, Finding, GroupStatus, QueueStatus, Sample, Severity
from hypothesis import given
from hypothesis import strategies as st

pytestmark = pytest.mark.spark


def window(*pairs: tuple[int, int]) -> list[Sample]:
    """(consumer offset, broker offset) per sample, one minute apart."""
    return [Sample(60_000 * i, c, b) for i, (c, b) in enumerate(pairs)]


def test_queue_lag_is_never_negative() -> None:
    assert rules.queue_lag(100, 40) == 60
    assert rules.queue_lag(100, 120) == 0


@pytest.mark.parametrize(
    ("samples", "live", "expected"),
    [
        # caught up now
        (window((10, 20), (30, 30)), True, QueueStatus.OK),
        # lag touched zero inside the window
        (window((10, 10), (15, 20), (20, 30)), True, QueueStatus.OK),
        # lag shrinking at some step: consumer keeps up
        (window((10, 50), (40, 60), (60, 70)), True, QueueStatus.OK),
        # advancing, lag never shrinks
        (window((10, 50), (20, 60), (30, 80)), True, QueueStatus.WARN),
        # not advancing, a live owner: stalled
        (window((10, 50), (10, 60), (10, 60)), True, QueueStatus.STALL),
        # not advancing, nobody owns it: stopped
        (window((10, 50), (10, 60), (10, 60)), False, QueueStatus.STOP),
        # stopped takes precedence even if lag was zero earlier (Burrow checks STOP first)
        (window((10, 10), (10, 60)), False, QueueStatus.STOP),
        # offset went backwards
        (window((40, 50), (20, 60), (30, 70)), True, QueueStatus.REWIND),
        # one sample: no trend
        (window((10, 50)), False, QueueStatus.OK),
    ],
)
def test_evaluate_queue(samples: list[Sample], live: bool, expected: QueueStatus) -> None:
    """Burrow's table, with no lag counted as healthy (OK limits of zero)."""
    strict = rules.OkLimits(lag=0, time_lag_ms=0)
    assert rules.evaluate_queue(samples, live_owner=live, ok=strict) is expected


def test_flat_lag_of_one_is_ok() -> None:
    """A busy healthy consumer commits with its next pull: lag 1 at each of 10 samples is OK."""
    flat = window(*((1000 * i + 999, 1000 * i + 1000) for i in range(10)))
    assert rules.evaluate_queue(flat, live_owner=True) is QueueStatus.OK
    # even with no OK limit at all: a flat lag does not grow
    assert rules.evaluate_queue(flat, live_owner=True, ok=rules.OkLimits(0, 0)) is QueueStatus.OK


def test_ok_limits_and_growth() -> None:
    growing = window((0, 500), (100, 700), (200, 900))
    assert rules.evaluate_queue(growing, live_owner=True) is QueueStatus.WARN
    # under the limits, small growth is still healthy
    small = window((0, 5), (10, 17), (20, 29))
    assert rules.evaluate_queue(small, live_owner=True) is QueueStatus.OK
    assert rules.evaluate_queue(small, live_owner=True, ok=rules.OkLimits(5, 0)) is QueueStatus.WARN
    # a known time lag above its limit takes a queue out of the OK band
    old = [Sample(60_000 * i, 10, 12, time_lag_ms=600_000) for i in range(3)]
    assert rules.evaluate_queue(old, live_owner=True) is QueueStatus.STALL
    # unknown time lag does not count against the queue
    unknown = [Sample(60_000 * i, 10, 12) for i in range(3)]
    assert rules.evaluate_queue(unknown, live_owner=True) is QueueStatus.OK
    # nobody consuming is STOP whatever the limits
    assert rules.evaluate_queue(unknown, live_owner=False) is QueueStatus.STOP
    with pytest.raises(ValueError, match=">= 0"):
        rules.OkLimits(lag=-1)


def test_evaluate_queue_rejects_bad_windows() -> None:
    with pytest.raises(ValueError, match="at least one"):
        rules.evaluate_queue([], live_owner=True)
    with pytest.raises(ValueError, match="ordered"):
        rules.evaluate_queue([Sample(2, 0, 1), Sample(1, 0, 1)], live_owner=True)


def test_group_status_is_worst_with_err_for_stop_stall_rewind() -> None:
    assert rules.group_status([]) is GroupStatus.OK
    assert rules.group_status([QueueStatus.OK, QueueStatus.WARN]) is GroupStatus.WARN
    for bad in (QueueStatus.STALL, QueueStatus.STOP, QueueStatus.REWIND):
        assert rules.group_status([QueueStatus.WARN, bad, QueueStatus.OK]) is GroupStatus.ERR


@given(
    st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 1000)), min_size=1, max_size=12),
    st.booleans(),
)
def test_evaluate_queue_total_and_zero_lag_is_ok(pairs: list[tuple[int, int]], live: bool) -> None:
    samples = window(*pairs)
    status = rules.evaluate_queue(samples, live_owner=live)
    assert isinstance(status, QueueStatus)
    if samples[-1].lag == 0:
        assert status is QueueStatus.OK


def test_time_lag_sources() -> None:
    assert rules.time_lag(1000, 0, oldest_unconsumed_ts=None, last_consumed_ts=None) == (0, "none")
    assert rules.time_lag(1000, 5, oldest_unconsumed_ts=400, last_consumed_ts=300) == (600, "store")
    assert rules.time_lag(1000, 5, oldest_unconsumed_ts=None, last_consumed_ts=300) == (
        700,
        "last-consumed",
    )
    assert rules.time_lag(1000, 5, oldest_unconsumed_ts=None, last_consumed_ts=0) == (
        None,
        "unknown",
    )


# --------------------------------------------------------------------------- rebalance audit


def mqs(topic: str, broker: str, *ids: int) -> frozenset[MQ]:
    return frozenset(MQ(topic, broker, i) for i in ids)


def averagely(
    strategy: str, group: str, cid: str, mq_all: list[MQ], cid_all: list[str]
) -> list[MQ]:
    """The client's own strategies (ferrymq.client.allocate), as the audit job uses them."""
    from ferrymq.client.allocate import allocate

    return allocate(strategy, group, cid, mq_all, cid_all)


def view(owned: dict[str, frozenset[MQ]], cids: tuple[str, ...] = ("c1", "c2")) -> rules.TopicView:
    return rules.TopicView("g", "T", tuple(sorted(mqs("T", "b", 0, 1, 2, 3))), cids, owned)


def kinds(audit: rules.TopicAudit) -> set[Finding]:
    return {f.kind for f in audit.findings}


def test_healthy_topic_has_no_finding() -> None:
    audit = rules.audit_topic(
        view({"c1": mqs("T", "b", 0, 1), "c2": mqs("T", "b", 2, 3)}), averagely
    )
    assert audit.findings == []


def test_orphan_duplicate_imbalance_and_mismatch() -> None:
    orphan = rules.audit_topic(view({"c1": mqs("T", "b", 0, 1), "c2": mqs("T", "b", 2)}), averagely)
    assert kinds(orphan) == {Finding.ORPHAN_QUEUE, Finding.ALLOCATION_MISMATCH}
    assert orphan.findings[0].queues == ("b:3",)
    dup = rules.audit_topic(
        view({"c1": mqs("T", "b", 0, 1, 2), "c2": mqs("T", "b", 2, 3)}), averagely
    )
    assert Finding.DUPLICATE_OWNER in kinds(dup)
    skew = rules.audit_topic(view({"c1": mqs("T", "b", 0, 1, 2, 3), "c2": frozenset()}), averagely)
    assert Finding.IMBALANCE in kinds(skew)
    assert Finding.ORPHAN_QUEUE not in kinds(skew)
    swapped = rules.audit_topic(
        view({"c1": mqs("T", "b", 2, 3), "c2": mqs("T", "b", 0, 1)}), averagely
    )
    assert kinds(swapped) == {Finding.ALLOCATION_MISMATCH}


def test_unreported_ownership_is_a_note_not_a_finding() -> None:
    audit = rules.audit_topic(view({}), averagely)
    assert audit.findings == [] and audit.notes
    partial = rules.audit_topic(view({"c1": mqs("T", "b", 0, 1)}), averagely)
    assert Finding.ORPHAN_QUEUE not in kinds(partial)  # c2 did not report: not provably orphan
    assert any("c2" in n for n in partial.notes)


def test_unknown_strategy_skips_expected_allocation() -> None:
    v = rules.TopicView(
        "g",
        "T",
        tuple(sorted(mqs("T", "b", 0, 1))),
        ("c1",),
        {"c1": mqs("T", "b", 0, 1)},
        strategy="CONFIG",
    )
    audit = rules.audit_topic(v, averagely)
    assert audit.findings == [] and any("not computed" in n for n in audit.notes)


def test_group_client_findings() -> None:
    healthy = rules.audit_group_clients(
        "g",
        {"c1": {"T": "*"}, "c2": {"T": "*"}},
        {"c1": "AVG", "c2": "AVG"},
        ["c1", "c2"],
        {"c1": ["c2", "c1"], "c2": None},
    )
    assert healthy == []
    found = rules.audit_group_clients(
        "g",
        {"c1": {"T": "*"}, "c2": {"T": "a||b"}, "c3": {"T": "*"}},
        {"c1": "AVG", "c2": "AVG_BY_CIRCLE", "c3": None},
        ["c1", "c2", "c3"],
        {"c1": ["c1", "c2", "c3"], "c2": ["c1", "c2"], "c3": None},
    )
    by_kind = {f.kind: f for f in found}
    assert set(by_kind) == {
        Finding.SUBSCRIPTION_MISMATCH,
        Finding.STRATEGY_MISMATCH,
        Finding.CONSUMER_VIEW_MISMATCH,
    }
    assert by_kind[Finding.SUBSCRIPTION_MISMATCH].clients == ("c1", "c2", "c3")
    assert by_kind[Finding.CONSUMER_VIEW_MISMATCH].clients == ("c2",)


def test_subscription_split_names_every_client_and_the_lost_messages() -> None:
    """A 1:1 split: no side is the majority; both clients, their expressions and losses named."""
    finding = rules.subscription_mismatch("g", {"cA": {"T": "a"}, "cB": {"T": "b"}})
    assert finding is not None and finding.severity is Severity.ERROR
    assert finding.clients == ("cA", "cB")
    assert "majority" not in finding.detail
    assert "cA: T=a" in finding.detail and "cB: T=b" in finding.detail
    assert (
        "T: messages matching 'b' not matching 'a' in the queues allocated to cA" in finding.detail
    )
    assert (
        "T: messages matching 'a' not matching 'b' in the queues allocated to cB" in finding.detail
    )
    # a client that does not subscribe the topic still takes a share of its queues
    absent = rules.subscription_mismatch("g", {"c1": {"T": "*"}, "c2": {"U": "*"}})
    assert absent is not None
    assert "T: every message in the queues allocated to c2" in absent.detail
    assert "U: every message in the queues allocated to c1" in absent.detail
    assert rules.subscription_mismatch("g", {"c1": {"T": "a"}, "c2": {"T": "a"}}) is None


def test_brokers_handing_out_different_consumer_lists() -> None:
    same = {"b1:10911": ["c1", "c2"], "b2:10911": ["c2", "c1"]}
    assert rules.audit_group_clients("g", {}, {}, ["c1", "c2"], {}, same) == []
    split = {"b1:10911": ["c1", "c2"], "b2:10911": ["c1"]}
    (f,) = rules.audit_group_clients("g", {}, {}, ["c1", "c2"], {}, split)
    assert f.kind is Finding.CONSUMER_VIEW_MISMATCH and f.clients == ("c2",)
    assert "b2:10911=['c1']" in f.detail


def test_churn() -> None:
    before = view({"c1": mqs("T", "b", 0, 1), "c2": mqs("T", "b", 2, 3)})
    assert rules.allocation_churn(before, before) is None
    flapped = view({"c1": mqs("T", "b", 0, 2), "c2": mqs("T", "b", 1, 3)})
    churn = rules.allocation_churn(before, flapped)
    assert churn is not None and churn.severity is Severity.WARN and churn.queues == ("b:1", "b:2")
    grown = view(
        {"c1": mqs("T", "b", 0), "c2": mqs("T", "b", 1), "c3": mqs("T", "b", 2, 3)},
        cids=("c1", "c2", "c3"),
    )
    churn = rules.allocation_churn(before, grown)
    assert churn is not None and churn.severity is Severity.INFO


def test_readable_queues_follow_perm_and_read_nums() -> None:
    got = rules.readable_queues("T", [("b2", 2, 6), ("b1", 1, 6), ("b3", 4, 2)])
    assert got == [MQ("T", "b1", 0), MQ("T", "b2", 0), MQ("T", "b2", 1)]
