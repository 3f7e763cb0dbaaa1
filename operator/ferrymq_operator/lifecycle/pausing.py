"""Pausing: ``ferrymq.io/pause-reconciliation: "true"`` on a NameServer or Broker makes the
operator change nothing (no apply, no roll, no drain) and set the condition
``ReconciliationPaused``; removing it resumes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ferrymq_operator import models
from ferrymq_operator.lifecycle.pods import Events
from ferrymq_operator.status import StatusBuilder

PAUSE_ANNOTATION = "ferrymq.io/pause-reconciliation"
RECONCILIATION_PAUSED = "ReconciliationPaused"
TRUE_VALUES = frozenset({"true", "yes", "1", "on"})


def annotations_of(body: Mapping[str, Any]) -> Mapping[str, str]:
    return (body.get("metadata") or {}).get("annotations") or {}


def is_paused(body: Mapping[str, Any]) -> bool:
    return str(annotations_of(body).get(PAUSE_ANNOTATION, "")).strip().lower() in TRUE_VALUES


def paused_status(builder: StatusBuilder[Any]) -> None:
    """The previous status with ReconciliationPaused=True added (nothing else is re-observed)."""
    builder.from_previous()
    builder.condition(
        RECONCILIATION_PAUSED,
        True,
        "AnnotationSet",
        f"{PAUSE_ANNOTATION} is set: the operator changes nothing until it is removed",
    )


def paused_events(previous: models.ClusterStatus) -> Events:
    already = any(
        c.type == RECONCILIATION_PAUSED and c.status == "True" for c in previous.conditions
    )
    if already:
        return []
    return [("Normal", RECONCILIATION_PAUSED, f"{PAUSE_ANNOTATION} set: reconciliation paused")]


def resumed_events(previous: models.ClusterStatus) -> Events:
    if any(c.type == RECONCILIATION_PAUSED and c.status == "True" for c in previous.conditions):
        return [("Normal", "ReconciliationResumed", f"{PAUSE_ANNOTATION} removed")]
    return []
