"""Burrow-style consumer status, tuned for RocketMQ, as pure functions of a sample window.

linkedin/Burrow judges a partition over a window of committed offsets. A RocketMQ consumer
commits the offset of what it has processed with its *next* pull (and every
persistConsumerOffsetInterval), so a busy, healthy group always shows a small, steady lag that
is seldom zero. The rules below therefore never warn about lag being non-zero, only about lag or
time lag that *keeps growing*, and they tell a consumer that is gone (STOP) from one that is
connected but stuck (STALL).

Queue rules, first match wins (``evaluate_queue``):

1. no samples: NOTFOUND
2. lag 0 in the newest sample: OK
3. the committed offset went backwards between two samples in the window: REWIND
   (an offset reset; it shows for one window, then the usual rules apply)
4. fewer than ``min_samples`` samples: OK (not enough evidence to accuse a consumer)
5. the committed offset did not move over the whole window while lag stayed above 0:
   STOP when no consumer of the group is online, STALL when one is
6. the committed offset moved but lag kept growing (it rose in at least ``growth_steps`` of the
   window's steps and by more than ``lag_tolerance`` overall), or time lag kept growing (it rose
   in ``growth_steps`` of the steps and by at least ``latency_growth`` of the window's span):
   WARN
7. otherwise OK

Group status (``evaluate_group``), as Burrow's: the worst of its queues where a queue in STOP,
STALL or REWIND makes the group ERR; NOTFOUND when it has no queues. The numbers are Burrow's
StatusConstant values, so dashboards and alerts can compare them (``>= ERR``).

ETA (``eta_seconds``): seconds until the backlog clears at the current net drain rate (the fall
of the lag over the ETA window, i.e. consume rate minus produce rate); 0 when there is no lag,
``NOT_CLEARING`` (-1) when the lag is not falling.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import NamedTuple


class LagStatus(IntEnum):
    """Burrow's StatusConstant numbers."""

    NOTFOUND = 0
    OK = 1
    WARN = 2
    ERR = 3
    STOP = 4
    STALL = 5
    REWIND = 6


NOT_CLEARING = -1.0
"""The ETA of a backlog that does not shrink at the current rates."""

_ERROR_STATES = frozenset({LagStatus.STOP, LagStatus.STALL, LagStatus.REWIND, LagStatus.ERR})


class Sample(NamedTuple):
    """One observation of a queue (or of a group's topic, summed over queues). A tuple of ints:
    the collector stops tracking it, so windows of many queues cost the GC nothing."""

    at_ms: int
    commit_offset: int
    max_offset: int
    latency_ms: int
    """now minus the store time of the oldest unconsumed message; 0 without lag."""

    @property
    def lag(self) -> int:
        return max(0, self.max_offset - self.commit_offset)


@dataclass(frozen=True, slots=True)
class Rules:
    min_samples: int = 3
    growth_steps: float = 0.75
    """Share of the window's steps in which lag (or time lag) must rise to count as growing."""
    lag_tolerance: int = 64
    """Lag growth over the window below this is noise (about two pull batches)."""
    latency_growth: float = 0.25
    """Time lag must grow by at least this share of the window's span to count as growing."""


def _rising(values: Sequence[int], share: float) -> bool:
    steps = len(values) - 1
    if steps <= 0:
        return False
    rises = sum(1 for a, b in itertools.pairwise(values) if b > a)
    return rises >= share * steps


def evaluate_queue(
    samples: Sequence[Sample], *, consumer_online: bool, rules: Rules = Rules()
) -> LagStatus:
    """The status of one queue from its window of samples (oldest first)."""
    if not samples:
        return LagStatus.NOTFOUND
    last = samples[-1]
    if last.max_offset <= last.commit_offset:  # no lag (the common case: one comparison)
        return LagStatus.OK
    commits = [s.commit_offset for s in samples]
    if any(b < a for a, b in itertools.pairwise(commits)):
        return LagStatus.REWIND
    if len(samples) < rules.min_samples:
        return LagStatus.OK
    first = samples[0]
    if first.commit_offset == last.commit_offset and all(s.lag > 0 for s in samples):
        return LagStatus.STALL if consumer_online else LagStatus.STOP
    lags = [s.lag for s in samples]
    if _rising(lags, rules.growth_steps) and last.lag - first.lag > rules.lag_tolerance:
        return LagStatus.WARN
    span = last.at_ms - first.at_ms
    latencies = [s.latency_ms for s in samples]
    if (
        span > 0
        and _rising(latencies, rules.growth_steps)
        and last.latency_ms - first.latency_ms >= rules.latency_growth * span
    ):
        return LagStatus.WARN
    return LagStatus.OK


def evaluate_group(queue_statuses: Iterable[LagStatus]) -> LagStatus:
    """Burrow's group status: ERR if any queue is STOP/STALL/REWIND, else the worst of OK/WARN."""
    worst = LagStatus.NOTFOUND
    for status in queue_statuses:
        if status in _ERROR_STATES:
            return LagStatus.ERR
        worst = max(worst, status)
    return worst


def eta_seconds(samples: Sequence[Sample]) -> float:
    """Seconds until the lag of the newest sample reaches 0 at the net drain rate of the window
    (lag fall per second between the oldest and newest sample); ``NOT_CLEARING`` if not falling."""
    if not samples or samples[-1].lag == 0:
        return 0.0
    first, last = samples[0], samples[-1]
    span_s = (last.at_ms - first.at_ms) / 1000
    if span_s <= 0:
        return NOT_CLEARING
    drain_rate = (first.lag - last.lag) / span_s
    if drain_rate <= 0:
        return NOT_CLEARING
    return last.lag / drain_rate
