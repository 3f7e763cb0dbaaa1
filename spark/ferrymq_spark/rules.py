"""Pure decision rules of the audit jobs: lag, Burrow-style queue/group status, rebalance findings.

Nothing here touches Spark or files; the jobs group their DataFrames and hand each group's rows to
these functions, so every rule is unit-tested on plain values.

Burrow (github.com/linkedin/Burrow, "Consumer Lag Evaluation Rules") judges a partition over a
sliding window of consumer offset commits. A snapshot history samples offsets instead of seeing
commits, so two of its rules are adapted and the adaptation is stated here once:

* STOP ("the consumer stopped committing") becomes: the offset did not move over the window and no
  live client of the group reports owning the queue (or, when ownership is not reported, no live
  client subscribes to the topic). Nobody is there to consume.
* STALL ("commits arrive but the offset does not move") becomes: the offset did not move over the
  window although a live client owns the queue. Someone is there, stuck.

The rest is Burrow's: a queue whose lag is zero now, or at any sample in the window, is OK; an
offset that goes backwards is REWIND; an offset that advances while the lag grows is WARN.
A group is the worst of its queues, where STOP, STALL and REWIND count as ERR (Burrow's group rule).

One rule is tuned for RocketMQ: a client commits its offset with its next pull, so a busy, healthy
consumer shows a small steady lag (typically 1 per queue) at every sample, which Burrow's "lag never
shrinks" would call WARN. Here a flat lag is not WARN: the lag must grow across the window (never
shrink, end above where it started), and a queue whose lag and time lag stay within
:class:`OkLimits` is OK unless nobody consumes it (STOP), its offset went backwards (REWIND), or
its offset is stuck while its lag grows (STALL).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple


class QueueStatus(StrEnum):
    OK = "OK"
    WARN = "WARN"
    STALL = "STALL"
    STOP = "STOP"
    REWIND = "REWIND"


class GroupStatus(StrEnum):
    OK = "OK"
    WARN = "WARN"
    ERR = "ERR"


_GROUP_OF: dict[QueueStatus, GroupStatus] = {
    QueueStatus.OK: GroupStatus.OK,
    QueueStatus.WARN: GroupStatus.WARN,
    QueueStatus.STALL: GroupStatus.ERR,
    QueueStatus.STOP: GroupStatus.ERR,
    QueueStatus.REWIND: GroupStatus.ERR,
}
_GROUP_RANK = {GroupStatus.OK: 0, GroupStatus.WARN: 1, GroupStatus.ERR: 2}
_QUEUE_RANK = {
    QueueStatus.OK: 0,
    QueueStatus.WARN: 1,
    QueueStatus.REWIND: 2,
    QueueStatus.STALL: 3,
    QueueStatus.STOP: 4,
}


DEFAULT_OK_LAG = 100
DEFAULT_OK_TIME_LAG_MS = 60_000


@dataclass(frozen=True)
class OkLimits:
    """Lag a healthy queue may show at every sample: ``lag`` messages and ``time_lag_ms``.

    A time lag that is not known (no store time collected) does not count against a queue.
    """

    lag: int = DEFAULT_OK_LAG
    time_lag_ms: int = DEFAULT_OK_TIME_LAG_MS

    def __post_init__(self) -> None:
        if self.lag < 0 or self.time_lag_ms < 0:
            raise ValueError(f"OK limits must be >= 0, got lag={self.lag} ms={self.time_lag_ms}")

    def within(self, window: Sequence[Sample]) -> bool:
        return all(
            s.lag <= self.lag and (s.time_lag_ms is None or s.time_lag_ms <= self.time_lag_ms)
            for s in window
        )


class Sample(NamedTuple):
    """One snapshot's view of one (group, queue); ``time_lag_ms`` when a store time is known."""

    taken_at: int
    consumer_offset: int
    broker_offset: int
    time_lag_ms: int | None = None

    @property
    def lag(self) -> int:
        return queue_lag(self.broker_offset, self.consumer_offset)


def queue_lag(broker_offset: int, consumer_offset: int) -> int:
    """Message lag of a queue: broker max offset minus consumer offset, never negative.

    A consumer offset above the max offset (possible for a moment after a broker truncates) is
    no backlog, so it counts as zero rather than a negative lag that would cancel real lag in sums.
    """
    return max(0, broker_offset - consumer_offset)


def evaluate_queue(
    window: Sequence[Sample],
    *,
    live_owner: bool,
    min_samples: int = 2,
    ok: OkLimits = OkLimits(),  # frozen: one shared default is safe
) -> QueueStatus:
    """Burrow-style status of one queue over ``window`` (oldest first; see the module docstring).

    With fewer than ``min_samples`` samples there is no trend: the queue is OK (its lag is still
    reported by the job).
    """
    if not window:
        raise ValueError("evaluate_queue needs at least one sample")
    if any(b.taken_at < a.taken_at for a, b in itertools.pairwise(window)):
        raise ValueError("window samples must be ordered by taken_at")
    if window[-1].lag == 0 or len(window) < min_samples:
        return QueueStatus.OK
    offsets = [s.consumer_offset for s in window]
    unmoved = all(o == offsets[0] for o in offsets)
    if unmoved and not live_owner:
        return QueueStatus.STOP
    if any(s.lag == 0 for s in window):
        return QueueStatus.OK
    if any(b < a for a, b in itertools.pairwise(offsets)):
        return QueueStatus.REWIND
    lags = [s.lag for s in window]
    grew = lags[-1] > lags[0] and all(b >= a for a, b in itertools.pairwise(lags))
    healthy = ok.within(window)
    # A stuck offset under a growing lag is STALL however small; a flat small lag on a quiet
    # queue is only the commit that rides on the next pull.
    if unmoved and (grew or not healthy):
        return QueueStatus.STALL
    if healthy:
        return QueueStatus.OK
    return QueueStatus.WARN if grew else QueueStatus.OK


def group_status(statuses: Iterable[QueueStatus]) -> GroupStatus:
    """Worst status of a group's queues, with STOP/STALL/REWIND counted as ERR."""
    worst = GroupStatus.OK
    for s in statuses:
        g = _GROUP_OF[s]
        if _GROUP_RANK[g] > _GROUP_RANK[worst]:
            worst = g
    return worst


def worst_queue_status(statuses: Iterable[QueueStatus]) -> QueueStatus:
    """The most severe queue status (used to label a topic within a group)."""
    worst = QueueStatus.OK
    for s in statuses:
        if _QUEUE_RANK[s] > _QUEUE_RANK[worst]:
            worst = s
    return worst


class TimeLag(NamedTuple):
    """Age (ms) of the oldest unconsumed message and where the figure comes from.

    ``source`` is ``none`` (no lag), ``store`` (store time of the message at the consumer offset,
    from the store files or the collector), or ``last-consumed`` (an upper bound: the store time of
    the last consumed message; the oldest unconsumed one was stored at or after it).
    """

    ms: int | None
    source: str


def time_lag(
    taken_at: int,
    lag: int,
    *,
    oldest_unconsumed_ts: int | None,
    last_consumed_ts: int | None,
) -> TimeLag:
    """Time lag of a queue at ``taken_at`` from the best store time available."""
    if lag <= 0:
        return TimeLag(0, "none")
    if oldest_unconsumed_ts is not None and oldest_unconsumed_ts > 0:
        return TimeLag(max(0, taken_at - oldest_unconsumed_ts), "store")
    if last_consumed_ts is not None and last_consumed_ts > 0:
        return TimeLag(max(0, taken_at - last_consumed_ts), "last-consumed")
    return TimeLag(None, "unknown")


# ---------------------------------------------------------------------------------------------
# Rebalance audit
# ---------------------------------------------------------------------------------------------


class MQ(NamedTuple):
    """A message queue, ordered as upstream MessageQueue.compareTo: topic, brokerName, queueId."""

    topic: str
    brokerName: str
    queueId: int

    def label(self) -> str:
        return f"{self.brokerName}:{self.queueId}"


AllocateFn = Callable[[str, str, str, list[MQ], list[str]], list[MQ]]
"""``allocate(strategy, consumer_group, current_cid, mq_all, cid_all) -> owned queues``."""

AVERAGE_STRATEGIES = frozenset({"AVG", "AVG_BY_CIRCLE"})
DEFAULT_STRATEGY = "AVG"


class Finding(StrEnum):
    ORPHAN_QUEUE = "ORPHAN_QUEUE"
    DUPLICATE_OWNER = "DUPLICATE_OWNER"
    IMBALANCE = "IMBALANCE"
    ALLOCATION_MISMATCH = "ALLOCATION_MISMATCH"
    SUBSCRIPTION_MISMATCH = "SUBSCRIPTION_MISMATCH"
    STRATEGY_MISMATCH = "STRATEGY_MISMATCH"
    CONSUMER_VIEW_MISMATCH = "CONSUMER_VIEW_MISMATCH"
    ALLOCATION_CHURN = "ALLOCATION_CHURN"


class Severity(StrEnum):
    INFO = "INFO"
    WARN = "WARN"
    ERROR = "ERROR"


@dataclass(frozen=True)
class AuditFinding:
    kind: Finding
    severity: Severity
    group: str
    topic: str | None
    detail: str
    clients: tuple[str, ...] = ()
    queues: tuple[str, ...] = ()


@dataclass(frozen=True)
class TopicView:
    """What one snapshot says about one (group, topic) in clustering mode.

    ``owned`` maps each client that reported running info to the queues it owns; clients of
    ``cid_all`` absent from ``owned`` did not report (ownership unknown for them).
    """

    group: str
    topic: str
    mq_all: tuple[MQ, ...]
    cid_all: tuple[str, ...]
    owned: Mapping[str, frozenset[MQ]]
    strategy: str = DEFAULT_STRATEGY


@dataclass
class TopicAudit:
    findings: list[AuditFinding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def readable_queues(topic: str, routes: Iterable[tuple[str, int, int]]) -> list[MQ]:
    """Queues a consumer rebalances over: ``(brokerName, readQueueNums, perm)`` per route entry.

    Mirrors upstream ``topicRouteData2TopicSubscribeInfo``: only readable brokers (perm bit 4),
    queue ids ``0..readQueueNums-1``; sorted as the client sorts them.
    """
    out = [
        MQ(topic, broker, qid)
        for broker, read_nums, perm in routes
        if perm & 4
        for qid in range(read_nums)
    ]
    return sorted(set(out))


def audit_topic(view: TopicView, allocate: AllocateFn | None) -> TopicAudit:
    """Ownership findings of one (group, topic): orphans, double owners, imbalance, mismatch."""
    res = TopicAudit()
    g, t = view.group, view.topic
    if not view.owned:
        res.notes.append(f"{g}/{t}: no client reported its queues; ownership not audited")
        return res
    unknown = sorted(set(view.cid_all) - set(view.owned))
    if unknown:
        res.notes.append(f"{g}/{t}: no ownership report from {', '.join(unknown)}")
    owners: dict[MQ, list[str]] = {}
    for cid, mqs in sorted(view.owned.items()):
        for mq in mqs:
            owners.setdefault(mq, []).append(cid)
    if not unknown:
        orphans = [mq for mq in view.mq_all if mq not in owners]
        if orphans:
            res.findings.append(
                AuditFinding(
                    Finding.ORPHAN_QUEUE,
                    Severity.ERROR,
                    g,
                    t,
                    f"{len(orphans)} of {len(view.mq_all)} queues have no owner",
                    queues=tuple(mq.label() for mq in orphans),
                )
            )
    for mq, cids in sorted(owners.items()):
        if len(cids) > 1:
            res.findings.append(
                AuditFinding(
                    Finding.DUPLICATE_OWNER,
                    Severity.ERROR,
                    g,
                    t,
                    f"queue {mq.label()} is owned by {len(cids)} clients",
                    clients=tuple(cids),
                    queues=(mq.label(),),
                )
            )
    if view.strategy in AVERAGE_STRATEGIES and not unknown and view.cid_all:
        counts = {cid: len(view.owned.get(cid, ())) for cid in view.cid_all}
        hi, lo = max(counts.values()), min(counts.values())
        if hi - lo > 1:
            res.findings.append(
                AuditFinding(
                    Finding.IMBALANCE,
                    Severity.WARN,
                    g,
                    t,
                    f"queues per client range from {lo} to {hi} under {view.strategy}",
                    clients=tuple(f"{c}={n}" for c, n in sorted(counts.items())),
                )
            )
    if allocate is None or not view.cid_all or not view.mq_all:
        return res
    mq_all, cid_all = sorted(view.mq_all), sorted(view.cid_all)
    for cid in cid_all:
        if cid not in view.owned:
            continue
        try:
            expected = frozenset(allocate(view.strategy, g, cid, list(mq_all), list(cid_all)))
        except (KeyError, ValueError) as exc:
            res.notes.append(f"{g}/{t}: expected allocation not computed ({exc})")
            return res
        actual = view.owned[cid]
        if expected != actual:
            missing = sorted(expected - actual)
            extra = sorted(actual - expected)
            res.findings.append(
                AuditFinding(
                    Finding.ALLOCATION_MISMATCH,
                    Severity.WARN,
                    g,
                    t,
                    f"{cid} owns {len(actual)} queues, {view.strategy} expects {len(expected)}"
                    f" (missing {[m.label() for m in missing]}, extra {[m.label() for m in extra]})",
                    clients=(cid,),
                    queues=tuple(m.label() for m in missing + extra),
                )
            )
    return res


def audit_group_clients(
    group: str,
    subscriptions: Mapping[str, Mapping[str, str]],
    strategies: Mapping[str, str | None],
    broker_cids: Sequence[str],
    seen: Mapping[str, Sequence[str] | None],
    broker_views: Mapping[str, Sequence[str]] | None = None,
) -> list[AuditFinding]:
    """Group-wide findings: differing subscriptions, strategies, or consumer lists between clients.

    ``subscriptions`` maps client -> {topic: subString}; ``seen`` maps client -> the consumer id
    list it last rebalanced with (None when it does not report one); ``broker_cids`` is the
    broker's connection list for the group; ``broker_views`` maps each broker address to the
    consumer id list it hands to rebalancing clients.
    """
    out: list[AuditFinding] = []
    mismatch = subscription_mismatch(group, subscriptions)
    if mismatch is not None:
        out.append(mismatch)
    named = {c: s for c, s in strategies.items() if s}
    if len(set(named.values())) > 1:
        out.append(
            AuditFinding(
                Finding.STRATEGY_MISMATCH,
                Severity.ERROR,
                group,
                None,
                "clients use different allocation strategies",
                clients=tuple(f"{c}={s}" for c, s in sorted(named.items())),
            )
        )
    views = {b: tuple(sorted(v)) for b, v in (broker_views or {}).items()}
    if len(set(views.values())) > 1:
        out.append(
            AuditFinding(
                Finding.CONSUMER_VIEW_MISMATCH,
                Severity.WARN,
                group,
                None,
                "brokers hand out different consumer lists, so clients rebalance on different "
                "views: " + "; ".join(f"{b}={list(v)}" for b, v in sorted(views.items())),
                clients=tuple(
                    sorted(
                        {c for v in views.values() for c in v}
                        ^ set.intersection(*(set(v) for v in views.values()))
                    )
                ),
            )
        )
    reference = tuple(sorted(broker_cids))
    odd_views = sorted(
        c for c, v in seen.items() if v is not None and tuple(sorted(v)) != reference
    )
    if odd_views:
        out.append(
            AuditFinding(
                Finding.CONSUMER_VIEW_MISMATCH,
                Severity.WARN,
                group,
                None,
                f"{len(odd_views)} clients rebalanced with a consumer list other than the broker's "
                f"{list(reference)}",
                clients=tuple(odd_views),
            )
        )
    return out


NOT_SUBSCRIBED = "(not subscribed)"


def unreceived_messages(topic: str, expressions: Mapping[str, str | None]) -> list[str]:
    """What no member handles when a group's clients subscribe ``topic`` differently.

    In clustering mode every client of the group takes a share of the topic's queues whatever it
    subscribes (upstream rebalances over the group's whole consumer list), and a client skips the
    messages of its queues that its own expression does not match. So on each client's queues, the
    messages another member wants but this client's expression excludes are never handled.
    """
    out = []
    for client, expr in sorted(expressions.items()):
        others = sorted({e for c, e in expressions.items() if c != client and e is not None})
        if expr is None:
            out.append(
                f"{topic}: every message in the queues allocated to {client} ({client} "
                f"does not subscribe {topic})"
            )
        elif expr.strip() != "*" and others and others != [expr]:
            wanted = (
                "any message"
                if "*" in (o.strip() for o in others)
                else ("messages matching " + " or ".join(repr(o) for o in others if o != expr))
            )
            out.append(
                f"{topic}: {wanted} not matching {expr!r} in the queues allocated to {client}"
            )
    return out


def subscription_mismatch(
    group: str, subscriptions: Mapping[str, Mapping[str, str]]
) -> AuditFinding | None:
    """ERROR when the group's clients subscribe differently, naming every client and expression.

    No side is called the majority: in a 1:1 split either may be the intended one, and both lose
    messages on their queues (see :func:`unreceived_messages`).
    """
    if len({tuple(sorted(s.items())) for s in subscriptions.values()}) <= 1:
        return None
    topics = sorted({t for s in subscriptions.values() for t in s})
    described = "; ".join(
        f"{client}: " + ", ".join(f"{t}={subs.get(t, NOT_SUBSCRIBED)!s}" for t in topics)
        for client, subs in sorted(subscriptions.items())
    )
    lost = [
        line
        for t in topics
        for line in unreceived_messages(t, {c: s.get(t) for c, s in subscriptions.items()})
    ]
    return AuditFinding(
        Finding.SUBSCRIPTION_MISMATCH,
        Severity.ERROR,
        group,
        None,
        f"{len(subscriptions)} clients subscribe differently ({described}); never handled: "
        + "; ".join(lost),
        clients=tuple(sorted(subscriptions)),
    )


def allocation_churn(previous: TopicView, current: TopicView) -> AuditFinding | None:
    """Queues whose owner changed between two snapshots of one (group, topic).

    Churn while neither the consumer list nor the queue list changed is a WARN (clients disagree
    or flap); churn that follows a membership change is the expected rebalance and only INFO.
    """
    changed = []
    for mq in sorted(set(previous.mq_all) & set(current.mq_all)):
        before = frozenset(c for c, mqs in previous.owned.items() if mq in mqs)
        after = frozenset(c for c, mqs in current.owned.items() if mq in mqs)
        if before != after and (before or after):
            changed.append(mq)
    if not changed or not previous.owned or not current.owned:
        return None
    membership_same = sorted(previous.cid_all) == sorted(current.cid_all) and sorted(
        previous.mq_all
    ) == sorted(current.mq_all)
    return AuditFinding(
        Finding.ALLOCATION_CHURN,
        Severity.WARN if membership_same else Severity.INFO,
        current.group,
        current.topic,
        f"{len(changed)} queues changed owner"
        + (
            " with no change of consumers or queues"
            if membership_same
            else " after a membership change"
        ),
        queues=tuple(mq.label() for mq in changed),
    )
