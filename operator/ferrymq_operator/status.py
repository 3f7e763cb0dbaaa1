"""Status of a NameServer or Broker, computed from observations (pure; the reconciler writes it).

Conditions (Kubernetes convention, Strimzi-like):

* ``Ready``: every pod of every StatefulSet is ready at the current spec and the last reconcile
  succeeded.
* ``Progressing``: the operator applied a spec the pods have not reached yet (creation, scaling,
  a rolling update). Reason ``Creating`` until the cluster was first ready, then ``Updating``.
* ``Degraded``: nothing is rolling, yet pods are missing or not ready; ``MasterUnavailable`` when a
  broker group has no ready master (sends to that group fail), else ``PodsUnavailable``.
* ``ReconcileFailed``: the spec was refused or the API rejected a child; the message says what to fix.

``readyGeneration`` remembers the last generation at which everything was ready; it is what tells
"never ready yet" (Progressing) from "was ready, lost pods" (Degraded), and it lives in the status,
not in operator memory.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ferrymq_operator.models import ClusterStatus, Condition

READY = "Ready"
PROGRESSING = "Progressing"
DEGRADED = "Degraded"
RECONCILE_FAILED = "ReconcileFailed"
CONDITION_TYPES = (READY, PROGRESSING, DEGRADED, RECONCILE_FAILED)

PHASE_CREATING = "Creating"
PHASE_UPDATING = "Updating"
PHASE_RUNNING = "Running"
PHASE_DEGRADED = "Degraded"
PHASE_FAILED = "Failed"

MAX_LISTED = 5


@dataclass(frozen=True)
class Failure:
    """Why the last reconcile could not apply the spec (reason is CamelCase, message actionable)."""

    reason: str
    message: str


@dataclass(frozen=True)
class WorkloadObservation:
    """What one StatefulSet and its pods look like now."""

    name: str
    desired_replicas: int
    exists: bool = False
    generation: int = 0
    observed_generation: int = 0
    replicas: int = 0
    ready_replicas: int = 0
    updated_replicas: int = 0
    current_revision: str = ""
    update_revision: str = ""
    not_ready_pods: tuple[str, ...] = ()
    # For a broker group: is pod ordinal 0 (the master) ready? None for NameServers.
    master_ready: bool | None = None

    @property
    def rolling(self) -> bool:
        """The StatefulSet controller has not yet brought the pods to the applied template/size."""
        if not self.exists:
            return True
        return (
            self.observed_generation < self.generation
            or self.replicas != self.desired_replicas
            or (bool(self.update_revision) and self.update_revision != self.current_revision)
            or self.updated_replicas < self.desired_replicas
        )

    @property
    def all_ready(self) -> bool:
        return self.exists and not self.rolling and self.ready_replicas >= self.desired_replicas


def observe_statefulset(
    name: str,
    desired_replicas: int,
    sts: dict[str, Any] | None,
    pods: Iterable[dict[str, Any]],
    master_ordinal: int | None = None,
) -> WorkloadObservation:
    """Summarise a StatefulSet object and the pods it owns (dicts as returned by the API)."""
    if sts is None:
        return WorkloadObservation(name=name, desired_replicas=desired_replicas)
    status = sts.get("status") or {}
    not_ready: list[str] = []
    master_ready: bool | None = None
    for pod in pods:
        pod_name = str(pod.get("metadata", {}).get("name", ""))
        ready = pod_is_ready(pod)
        if not ready:
            not_ready.append(pod_name)
        if master_ordinal is not None and pod_name == f"{name}-{master_ordinal}":
            master_ready = ready
    if master_ordinal is not None and master_ready is None:
        master_ready = False  # the master pod does not exist
    return WorkloadObservation(
        name=name,
        desired_replicas=desired_replicas,
        exists=True,
        generation=int(sts.get("metadata", {}).get("generation", 0)),
        observed_generation=int(status.get("observedGeneration", 0)),
        replicas=int(status.get("replicas", 0)),
        ready_replicas=int(status.get("readyReplicas", 0)),
        updated_replicas=int(status.get("updatedReplicas", 0)),
        current_revision=str(status.get("currentRevision", "")),
        update_revision=str(status.get("updateRevision", "")),
        not_ready_pods=tuple(sorted(not_ready)),
        master_ready=master_ready,
    )


def pod_is_ready(pod: dict[str, Any]) -> bool:
    if pod.get("metadata", {}).get("deletionTimestamp"):
        return False
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return bool(condition.get("status") == "True")
    return False


def _listed(items: Sequence[str]) -> str:
    shown = ", ".join(items[:MAX_LISTED])
    more = len(items) - MAX_LISTED
    return f"{shown} and {more} more" if more > 0 else shown


def compute(
    generation: int,
    workloads: Sequence[WorkloadObservation],
    previous: ClusterStatus,
    failure: Failure | None,
    now: str,
    pending: str | None = None,
) -> dict[str, Any]:
    """The status fields common to both kinds (camelCase, ready to patch).

    ``pending`` names work the operator still has to do once the pods are ready (e.g. copying
    topics to a new broker group); until it is done the cluster is Progressing, not Ready.
    """
    desired = sum(w.desired_replicas for w in workloads)
    ready = sum(min(w.ready_replicas, w.desired_replicas) for w in workloads if w.exists)
    pods_settled = bool(workloads) and all(w.all_ready for w in workloads)
    pods_ready = pods_settled and pending is None
    all_ready = pods_ready and failure is None
    ready_generation = generation if all_ready else previous.ready_generation

    rolling = [w.name for w in workloads if w.rolling]
    never_ready_here = previous.ready_generation != generation and not pods_ready
    pending_only = pods_settled and pending is not None
    progressing = (
        failure is None and not pods_ready and (bool(rolling) or never_ready_here or pending_only)
    )
    degraded = not pods_ready and not progressing
    not_ready = [pod for w in workloads for pod in w.not_ready_pods]
    missing = [w.name for w in workloads if not w.exists]
    masters_down = [w.name for w in workloads if w.master_ready is False]

    conditions: list[Condition] = []

    if all_ready:
        conditions.append(_cond(READY, True, "AllPodsReady", f"{ready}/{desired} pods ready"))
    elif failure is not None:
        conditions.append(_cond(READY, False, failure.reason, failure.message))
    elif pending_only and pending is not None:
        conditions.append(_cond(READY, False, "Pending", pending))
    else:
        detail = f"{ready}/{desired} pods ready"
        if not_ready:
            detail += f"; not ready: {_listed(not_ready)}"
        conditions.append(_cond(READY, False, "PodsNotReady", detail))

    if progressing:
        reason = PHASE_CREATING if previous.ready_generation is None else PHASE_UPDATING
        if pending_only and pending is not None:
            message = pending
        else:
            waiting = rolling or [w.name for w in workloads if not w.all_ready]
            message = f"waiting for {_listed(waiting)} ({ready}/{desired} ready)"
        conditions.append(_cond(PROGRESSING, True, reason, message))
    else:
        if failure is not None:
            conditions.append(
                _cond(PROGRESSING, False, "ReconcileFailed", "stopped: see ReconcileFailed")
            )
        else:
            conditions.append(
                _cond(PROGRESSING, False, "Complete", "every StatefulSet matches the spec")
            )

    if degraded and workloads and not pods_settled:
        if masters_down:
            reason, message = "MasterUnavailable", f"no ready master in {_listed(masters_down)}"
        elif missing:
            reason, message = "WorkloadMissing", f"missing {_listed(missing)}"
        else:
            reason, message = "PodsUnavailable", f"not ready: {_listed(not_ready) or 'unknown'}"
        conditions.append(_cond(DEGRADED, True, reason, message))
    else:
        conditions.append(_cond(DEGRADED, False, "AsDesired", "no pod is missing or unready"))

    if failure is not None:
        conditions.append(_cond(RECONCILE_FAILED, True, failure.reason, failure.message))
    else:
        conditions.append(
            _cond(RECONCILE_FAILED, False, "Reconciled", "every child object applied")
        )

    if failure is not None:
        phase = PHASE_FAILED
    elif all_ready:
        phase = PHASE_RUNNING
    elif progressing:
        phase = PHASE_CREATING if previous.ready_generation is None else PHASE_UPDATING
    else:
        phase = PHASE_DEGRADED

    return {
        "observedGeneration": generation,
        "phase": phase,
        "ready": f"{ready}/{desired}",
        "readyGeneration": ready_generation,
        "conditions": [
            c.model_dump(by_alias=True, exclude_none=True)
            for c in carry_transition_times(conditions, previous.conditions, generation, now)
        ],
    }


def _cond(kind: str, status: bool, reason: str, message: str) -> Condition:
    # Never an empty message: Kubernetes 1.20 (as built here) decodes "" in a custom resource as null.
    message = message or reason
    return Condition(
        type=kind, status="True" if status else "False", reason=reason, message=message
    )


def carry_transition_times(
    new: Sequence[Condition], old: Sequence[Condition], generation: int, now: str
) -> list[Condition]:
    """lastTransitionTime changes only when a condition's status flips."""
    previous = {c.type: c for c in old}
    out = []
    for cond in new:
        before = previous.get(cond.type)
        if before is not None and before.status == cond.status and before.last_transition_time:
            since = before.last_transition_time
        else:
            since = now
        out.append(
            cond.model_copy(
                update={"last_transition_time": since, "observed_generation": generation}
            )
        )
    return out


def failed_only(
    previous: ClusterStatus, generation: int, failure: Failure, now: str
) -> dict[str, Any]:
    """Status when the spec cannot even be parsed: keep pod facts unknown, say what to fix."""
    return compute(generation, [], previous, failure, now)


def with_failure(
    previous: ClusterStatus, generation: int, failure: Failure, now: str
) -> dict[str, Any]:
    """The previous status with ReconcileFailed set and phase Failed, everything else kept.

    For failures that stop a reconcile before anything could be observed (the API answering
    errors): the user sees why, and the pod facts from the last good pass stay visible.
    """
    conditions = [c for c in previous.conditions if c.type != RECONCILE_FAILED]
    conditions.append(_cond(RECONCILE_FAILED, True, failure.reason, failure.message))
    return {
        "phase": PHASE_FAILED,
        "conditions": [
            c.model_dump(by_alias=True, exclude_none=True)
            for c in carry_transition_times(conditions, previous.conditions, generation, now)
        ],
    }
