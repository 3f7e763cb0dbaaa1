"""Status of a NameServer or Broker, computed from observations (pure; the reconciler writes it).

Conditions (Kubernetes convention, Strimzi-like):

* ``Ready``: every pod of every StatefulSet is ready at the current spec and the last reconcile
  succeeded.
* ``Progressing``: the operator applied a spec the pods have not reached yet (creation, scaling,
  a rolling update). Reason ``Creating`` until the cluster was first ready, then ``Updating``.
* ``Degraded``: nothing is rolling, yet pods are missing or not ready; ``MasterUnavailable`` when a
  broker group has no ready master (sends to that group fail), else ``PodsUnavailable``.
* ``ReconcileFailed``: the spec was refused or the API rejected a child; the message says what to fix.
* ``ProxyReady`` (Broker with ``spec.proxy``): every pod of the proxy Deployment is ready.
* ``ReplicasInSync`` (Broker in controller mode): every replica is in its group's SyncStateSet
  (ferrymq_operator.sync_state); False names the replicas outside it.

``readyGeneration`` remembers the last generation at which everything was ready; it is what tells
"never ready yet" (Progressing) from "was ready, lost pods" (Degraded), and it lives in the status,
not in operator memory.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from ferrymq_operator import rollout
from ferrymq_operator.models import ClusterStatus, Condition

READY = "Ready"
PROGRESSING = "Progressing"
DEGRADED = "Degraded"
RECONCILE_FAILED = "ReconcileFailed"
CONDITION_TYPES = (READY, PROGRESSING, DEGRADED, RECONCILE_FAILED)
# Broker with spec.proxy only: the proxy Deployment has every replica ready.
PROXY_READY = "ProxyReady"

PHASE_CREATING = "Creating"
PHASE_UPDATING = "Updating"
PHASE_RUNNING = "Running"
PHASE_DEGRADED = "Degraded"
PHASE_FAILED = "Failed"

MAX_LISTED = 5

S = TypeVar("S", bound=ClusterStatus)


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


class StatusBuilder(Generic[S]):
    """The one writer of a NameServer's or Broker's status; every path of a reconcile uses it.

    The status is written as a merge patch, so the builder starts empty: a field left unset keeps
    the value it has on the resource. Fields are set on the typed model :attr:`status`; conditions
    by type through :meth:`condition` (a type set again is replaced where it stands). :meth:`patch`
    stamps every condition with the generation and carries lastTransitionTime over from the
    previous status, so it changes only when a condition's status flips (Strimzi convention).
    """

    def __init__(self, kind: type[S], previous: S, generation: int, now: str) -> None:
        self.previous = previous
        self.generation = generation
        self.now = now
        self.status: S = kind()
        # None: the conditions are not written (the resource keeps its own)
        self._conditions: dict[str, Condition] | None = None
        # conditions taken over from the previous status as they were (not re-stamped)
        self._kept: set[str] = set()

    # --- conditions ---

    def condition(self, kind: str, status: bool, reason: str, message: str) -> None:
        """Set one condition. Never an empty message: Kubernetes 1.20 (as built here) decodes ""
        in a custom resource as null."""
        conditions = self._conditions if self._conditions is not None else {}
        conditions[kind] = Condition(
            type=kind,
            status="True" if status else "False",
            reason=reason,
            message=message or reason,
        )
        self._kept.discard(kind)
        self._conditions = conditions

    def keep(self, condition: Condition) -> None:
        """Write a condition of the previous status unchanged (a fact this pass did not check)."""
        conditions = self._conditions if self._conditions is not None else {}
        conditions[condition.type] = condition
        self._kept.add(condition.type)
        self._conditions = conditions

    def from_previous(self) -> None:
        """Start the conditions from the previous status's (then set the ones that change)."""
        self._conditions = {c.type: c for c in self.previous.conditions}

    def get(self, kind: str) -> Condition | None:
        return (self._conditions or {}).get(kind)

    def conditions(self) -> list[Condition]:
        """The conditions to write, stamped (:func:`carry_transition_times`)."""
        if self._conditions is None:
            return []
        stamped = carry_transition_times(
            [c for c in self._conditions.values() if c.type not in self._kept],
            self.previous.conditions,
            self.generation,
            self.now,
        )
        by_type = {c.type: c for c in stamped}
        return [by_type.get(c.type, c) for c in self._conditions.values()]

    # --- the status as a whole ---

    def observe(
        self,
        workloads: Sequence[WorkloadObservation],
        failure: Failure | None,
        pending: str | None = None,
    ) -> None:
        """Phase, pod counts and the four conditions from what the pass observed.

        ``pending`` names work the operator still has to do once the pods are ready (e.g. copying
        topics to a new broker group); until it is done the cluster is Progressing, not Ready.
        """
        previous, generation = self.previous, self.generation
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
            failure is None
            and not pods_ready
            and (bool(rolling) or never_ready_here or pending_only)
        )
        degraded = not pods_ready and not progressing
        not_ready = [pod for w in workloads for pod in w.not_ready_pods]
        missing = [w.name for w in workloads if not w.exists]
        masters_down = [w.name for w in workloads if w.master_ready is False]

        self._conditions = {}
        if all_ready:
            self.condition(READY, True, "AllPodsReady", f"{ready}/{desired} pods ready")
        elif failure is not None:
            self.condition(READY, False, failure.reason, failure.message)
        elif pending_only and pending is not None:
            self.condition(READY, False, "Pending", pending)
        else:
            detail = f"{ready}/{desired} pods ready"
            if not_ready:
                detail += f"; not ready: {_listed(not_ready)}"
            self.condition(READY, False, "PodsNotReady", detail)

        if progressing:
            reason = PHASE_CREATING if previous.ready_generation is None else PHASE_UPDATING
            if pending_only and pending is not None:
                message = pending
            else:
                waiting = rolling or [w.name for w in workloads if not w.all_ready]
                message = f"waiting for {_listed(waiting)} ({ready}/{desired} ready)"
            self.condition(PROGRESSING, True, reason, message)
        elif failure is not None:
            self.condition(PROGRESSING, False, "ReconcileFailed", "stopped: see ReconcileFailed")
        else:
            self.condition(PROGRESSING, False, "Complete", "every StatefulSet matches the spec")

        if degraded and workloads and not pods_settled:
            if masters_down:
                reason, message = "MasterUnavailable", f"no ready master in {_listed(masters_down)}"
            elif missing:
                reason, message = "WorkloadMissing", f"missing {_listed(missing)}"
            else:
                reason, message = "PodsUnavailable", f"not ready: {_listed(not_ready) or 'unknown'}"
            self.condition(DEGRADED, True, reason, message)
        else:
            self.condition(DEGRADED, False, "AsDesired", "no pod is missing or unready")

        if failure is not None:
            self.condition(RECONCILE_FAILED, True, failure.reason, failure.message)
        else:
            self.condition(RECONCILE_FAILED, False, "Reconciled", "every child object applied")

        if failure is not None:
            phase = PHASE_FAILED
        elif all_ready:
            phase = PHASE_RUNNING
        elif progressing:
            phase = PHASE_CREATING if previous.ready_generation is None else PHASE_UPDATING
        else:
            phase = PHASE_DEGRADED

        self.status.observed_generation = generation
        self.status.phase = phase
        self.status.ready = f"{ready}/{desired}"
        self.status.ready_generation = ready_generation

    def fail(self, failure: Failure) -> None:
        """The previous status with ReconcileFailed set and phase Failed, everything else kept.

        For failures that stop a reconcile before anything could be observed (the API answering
        errors): the user sees why, and the pod facts from the last good pass stay visible.
        """
        self.from_previous()
        self.condition(RECONCILE_FAILED, True, failure.reason, failure.message)
        self.status.phase = PHASE_FAILED

    def rolling(self, decision: rollout.Decision) -> None:
        """Put the roll-out on the conditions: Progressing while it rolls, Degraded when it
        stalls (after :meth:`observe`)."""
        if isinstance(decision, rollout.Done):
            return
        failed = self.status.phase == PHASE_FAILED
        if isinstance(decision, rollout.Stalled):
            self.condition(DEGRADED, True, decision.reason, decision.message)
            self.condition(PROGRESSING, False, decision.reason, "stopped: see Degraded")
            self.condition(READY, False, decision.reason, decision.message)
            if not failed:
                self.status.phase = PHASE_DEGRADED
            return
        if not failed:
            message = (
                decision.message
                if isinstance(decision, rollout.Roll)
                else f"rolling update: {decision.message}"
            )
            self.condition(PROGRESSING, True, "RollingUpdate", message)
            if self.status.phase == PHASE_RUNNING:
                self.status.phase = PHASE_UPDATING

    def patch(self) -> dict[str, Any]:
        """What to merge-patch into ``status``: the fields set, camelCase."""
        out = self.status.model_dump(by_alias=True, exclude_unset=True)
        out.pop("conditions", None)
        if self._conditions is not None:
            out["conditions"] = [
                c.model_dump(by_alias=True, exclude_none=True) for c in self.conditions()
            ]
        return out


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
