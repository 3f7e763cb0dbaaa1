"""The operator's own /metrics (prometheus-client): reconciles, their duration and failures per
kind, and whether this replica leads. Served by :func:`serve` on ``FERRYMQ_OPERATOR_METRICS_PORT``.

Names follow Prometheus conventions (``_total`` counters, ``_seconds`` histograms); the chart's
alerts and dashboard (rules/ferrymq-operator.rules.yaml, dashboards/ferrymq-operator.json) use them.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

REGISTRY = CollectorRegistry(auto_describe=True)
RECONCILES = Counter(
    "ferrymq_operator_reconciles",
    "Reconcile passes run, by kind of custom resource.",
    ["kind"],
    registry=REGISTRY,
)
FAILURES = Counter(
    "ferrymq_operator_reconcile_failures",
    "Reconcile passes that ended in ReconcileFailed or an API error, by kind and reason.",
    ["kind", "reason"],
    registry=REGISTRY,
)
DURATION = Histogram(
    "ferrymq_operator_reconcile_duration_seconds",
    "Wall time of one reconcile pass, by kind.",
    ["kind"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
    registry=REGISTRY,
)
LEADER = Gauge(
    "ferrymq_operator_leader",
    "1 while this replica holds the leader Lease (or runs without leader election).",
    registry=REGISTRY,
)

T = TypeVar("T")


def failure_reason(outcome: object) -> str | None:
    """The reason of a reconcile result's failure (``result.failure.reason``), if any."""
    failure = getattr(outcome, "failure", None)
    reason = getattr(failure, "reason", None)
    return str(reason) if reason else None


async def timed(kind: str, call: Callable[[], Awaitable[T]]) -> T:
    """Run one reconcile pass and record it; an exception counts as a failure named by its type."""
    start = time.monotonic()
    RECONCILES.labels(kind).inc()
    try:
        outcome = await call()
    except Exception as error:
        FAILURES.labels(kind, type(error).__name__).inc()
        raise
    finally:
        DURATION.labels(kind).observe(time.monotonic() - start)
    reason = failure_reason(outcome)
    if reason is not None:
        FAILURES.labels(kind, reason).inc()
    return outcome


def serve(port: int, address: str = "0.0.0.0") -> None:
    """Start the /metrics HTTP server in a daemon thread (0: none)."""
    if port:
        prometheus_client.start_http_server(port, addr=address, registry=REGISTRY)
