"""Status of a Topic or ConsumerGroup (pure; the reconciler writes it).

Conditions, each with ``observedGeneration``:

* ``Ready``: the object is on every broker group of its Broker as the spec says. ``False`` with the
  reason of what stands in the way: ``InvalidSpec``, ``BrokerNotFound``, ``DuplicateName``,
  ``BrokerUnavailable`` (a group's master did not answer), ``ShrinkPending`` (removed queues still
  hold messages).
* ``ReconcileFailed``: ``True`` when the spec was refused or an admin call failed (same reason and
  message); ``False`` otherwise (a pending shrink is waiting, not failing).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ferrymq_operator.models import Condition
from ferrymq_operator.status import carry_transition_times
from ferrymq_operator.topics.models import ObjectStatus

READY = "Ready"
RECONCILE_FAILED = "ReconcileFailed"

# Reasons that are failures (ReconcileFailed=True); others only keep Ready False.
FAILURES = frozenset(
    {"InvalidSpec", "BrokerNotFound", "DuplicateName", "BrokerUnavailable", "AdminRefused"}
)


@dataclass(frozen=True)
class Outcome:
    """What one pass found: ``reason`` None means ready."""

    message: str
    reason: str | None = None


def build(
    previous: ObjectStatus, generation: int, outcome: Outcome, now: str, **fields: Any
) -> dict[str, Any]:
    """The whole status (camelCase, ready to merge-patch); ``fields`` are the kind's extras."""
    ready = outcome.reason is None
    failed = outcome.reason in FAILURES
    conditions = [
        _cond(READY, ready, "Reconciled" if ready else str(outcome.reason), outcome.message),
        _cond(
            RECONCILE_FAILED,
            failed,
            str(outcome.reason) if failed else "Reconciled",
            outcome.message if failed else "every broker group was reconciled or is waiting",
        ),
    ]
    return {
        "observedGeneration": generation,
        "conditions": [
            c.model_dump(by_alias=True, exclude_none=True)
            for c in carry_transition_times(conditions, previous.conditions, generation, now)
        ],
        **fields,
    }


def _cond(kind: str, status: bool, reason: str, message: str) -> Condition:
    # never an empty message: Kubernetes 1.20 decodes "" in a custom resource as null
    return Condition(
        type=kind, status="True" if status else "False", reason=reason, message=message or reason
    )


def ready_reason(status: dict[str, Any]) -> tuple[str, str] | None:
    """(reason, message) of a Ready=False condition in a built status, else None."""
    for cond in status.get("conditions", []):
        if cond["type"] == READY and cond["status"] == "False":
            return str(cond["reason"]), str(cond["message"])
    return None
