"""Health-gated rolling updates of broker pods (pure decisions; the reconciler does the I/O).

Model: Strimzi's KafkaRoller. The broker StatefulSets use ``updateStrategy: OnDelete``, so the
StatefulSet controller never replaces a pod by itself; the operator picks one pod at a time and
deletes it, the controller recreates it at the new revision. The order:

* group by group (lowest index first), one pod in the whole Broker at a time;
* inside a group, slaves (highest brokerId first) before the master (brokerId 0);
* the next pod is deleted only when every pod is Ready and every slave has caught up with its
  master (replication state read from GET_BROKER_RUNTIME_INFO), so the master is never taken down
  while a slave lags behind it, and a slave is never taken down while another replica is out;
* a pod that is not ready and needs rolling anyway is rolled first: it is not serving, and its
  new revision may be the fix;
* a pod at the new revision that the scheduler cannot place because of pod anti-affinity, while
  pods of its group still run the old revision, unblocks the roll by rolling those old pods: their
  old scheduling rules may be what keeps it out (switching podAntiAffinity from Required to
  Preferred: the old master's Required rule keeps the new slave off the master's node, and waiting
  for the slave would wait forever);
* with ``spec.failover: controller`` the master is whichever pod the controller elected
  (``GroupState.master``, by pod ordinal): it is rolled last, and before it is deleted mastership
  is handed over (:class:`SwitchOver`, the controller's ELECT_MASTER) to a Ready replica already
  at the new revision and in the SyncStateSet, so the group never lacks a writable master during
  a planned roll; with no such replica the roll waits (``WaitingForSyncStateSet``);
* a roll that does not finish within ``stall_seconds`` (pod not Ready, slave not caught up) stops:
  :class:`Stalled` (the reconciler sets Degraded/RolloutStalled) and nothing more is deleted until
  the spec changes or the pod recovers.

A pod needs rolling when its ``controller-revision-hash`` label differs from the StatefulSet's
``updateRevision``, or when a manual rolling restart was requested after the pod was created.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

REVISION_LABEL = "controller-revision-hash"
# Replication lag (bytes of commit log) a slave may have and still count as caught up: under
# steady traffic the lag is never exactly 0, and a restarted slave that is within one batch of
# its master is as safe to rely on as one that never restarted.
DEFAULT_MAX_LAG_BYTES = 1024 * 1024
DEFAULT_STALL_SECONDS = 600.0


@dataclass(frozen=True)
class PodState:
    """One broker pod as observed from the API."""

    name: str
    ordinal: int
    revision: str = ""
    ready: bool = False
    terminating: bool = False
    created: str = ""  # RFC 3339 creationTimestamp
    # The scheduler's message when it cannot place the pod (PodScheduled=False, Unschedulable).
    unschedulable: str = ""

    @property
    def kept_out_by_anti_affinity(self) -> bool:
        return "anti-affinity" in self.unschedulable


@dataclass(frozen=True)
class SlaveSync:
    """Replication state of one slave against its master, as the brokers report it."""

    caught_up: bool | None  # None: unknown (broker unreachable, fields missing)
    detail: str = ""


@dataclass(frozen=True)
class GroupState:
    """A broker group: its StatefulSet revision, its pods, and its slaves' replication state."""

    group: int
    statefulset: str
    update_revision: str
    replicas: int
    pods: tuple[PodState, ...] = ()
    # brokerId (>0) -> replication state; a slave missing here counts as unknown.
    sync: Mapping[int, SlaveSync] = field(default_factory=dict)
    # spec.failover controller: the ordinal of the elected master (None: none right now) and the
    # ordinals in its SyncStateSet; without a controller the master is ordinal 0
    controller_mode: bool = False
    master: int | None = 0
    in_sync: frozenset[int] = frozenset()

    @property
    def master_ordinal(self) -> int | None:
        return self.master if self.controller_mode else 0


@dataclass(frozen=True)
class InFlight:
    """The pod the operator deleted last and when (kept in status.rollout between passes)."""

    pod: str
    since: str  # RFC 3339


@dataclass(frozen=True)
class Policy:
    stall_seconds: float = DEFAULT_STALL_SECONDS
    max_lag_bytes: int = DEFAULT_MAX_LAG_BYTES


@dataclass(frozen=True)
class Done:
    """Every pod runs the current revision (and was restarted if a restart was asked for)."""


@dataclass(frozen=True)
class Wait:
    """Something must happen first (a pod becoming Ready, a slave catching up); check again."""

    reason: str
    message: str


@dataclass(frozen=True)
class Roll:
    """Delete this pod now; the StatefulSet controller recreates it at the new revision."""

    pod: str
    group: int
    message: str


@dataclass(frozen=True)
class SwitchOver:
    """Ask the controller to make ``to_ordinal`` the group's master before its master is rolled."""

    group: int
    from_pod: str
    to_ordinal: int
    message: str


@dataclass(frozen=True)
class Stalled:
    """The roll made no progress in time: stop and say why (condition Degraded)."""

    reason: str
    message: str
    gate: str = ""  # the Wait reason that timed out (WaitingForPods, WaitingForReplication)


Decision = Done | Wait | Roll | SwitchOver | Stalled
REPLICATION_GATE = "WaitingForReplication"
SWITCHOVER_GATE = "WaitingForSyncStateSet"


def parse_time(value: str) -> datetime.datetime | None:
    if not value:
        return None
    try:
        parsed = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=datetime.UTC)


def needs_roll(pod: PodState, update_revision: str, restart_since: str | None) -> bool:
    """The pod runs an old revision, or predates a requested manual rolling restart."""
    if update_revision and pod.revision != update_revision:
        return True
    if restart_since:
        since, created = parse_time(restart_since), parse_time(pod.created)
        if since is not None and (created is None or created < since):
            return True
    return False


def roll_order(group: GroupState) -> list[PodState]:
    """Slaves (highest brokerId first), then the master."""
    master = group.master_ordinal
    return sorted(group.pods, key=lambda p: (p.ordinal == master, -p.ordinal))


def _elapsed(since: str, now: datetime.datetime) -> float | None:
    start = parse_time(since)
    return None if start is None else (now - start).total_seconds()


def _pods_missing(group: GroupState) -> list[str]:
    present = {p.ordinal for p in group.pods}
    return [f"{group.statefulset}-{i}" for i in range(group.replicas) if i not in present]


def next_step(
    groups: Sequence[GroupState],
    now: datetime.datetime,
    in_flight: InFlight | None = None,
    restart_since: str | None = None,
    policy: Policy = Policy(),
) -> Decision:
    """The next thing the roll-out should do (see the module docstring for the rules)."""
    ordered = sorted(groups, key=lambda g: g.group)
    stale = [
        (g, p)
        for g in ordered
        for p in roll_order(g)
        if needs_roll(p, g.update_revision, restart_since)
    ]

    if not stale and in_flight is None:
        return Done()  # nothing to roll; pods coming up or lagging are ordinary health

    # 1. A pod that is not Ready and needs rolling anyway goes first: it serves nothing now, and
    #    its new revision may be the fix (a bad image). Never while another pod terminates.
    terminating = [f"{p.name} is terminating" for g in ordered for p in g.pods if p.terminating]
    broken = [(g, p) for g, p in stale if not p.ready]
    if broken and not terminating:
        g, p = broken[0]
        return Roll(p.name, g.group, f"{p.name} is not Ready and runs an old revision")

    # 1b. A current pod the scheduler keeps out because of anti-affinity: roll the old pods of its
    #     group (their old rules may be the reason), or the roll would wait for it forever.
    if not terminating:
        for g in ordered:
            for p in g.pods:
                if not p.kept_out_by_anti_affinity or needs_roll(
                    p, g.update_revision, restart_since
                ):
                    continue
                old = [q for q in roll_order(g) if needs_roll(q, g.update_revision, restart_since)]
                if old:
                    return Roll(
                        old[0].name,
                        g.group,
                        f"{p.name} cannot be scheduled ({p.unschedulable}); rolling {old[0].name}, "
                        f"whose old anti-affinity rules keep it out",
                    )

    # 2. Health gate: nothing terminating, nothing missing, every current pod Ready.
    blockers = list(terminating)
    for g in ordered:
        blockers += [f"{name} does not exist yet" for name in _pods_missing(g)]
        blockers += [
            f"{p.name} is not Ready"
            for p in g.pods
            if not p.terminating
            and not p.ready
            and not needs_roll(p, g.update_revision, restart_since)
        ]
    if blockers:
        return _wait_or_stall("WaitingForPods", "; ".join(blockers[:5]), in_flight, now, policy)

    # 3. Replication gate: every slave caught up with its master.
    lagging: list[str] = []
    for g in ordered:
        for p in g.pods:
            if p.ordinal == g.master_ordinal:
                continue
            sync = g.sync.get(p.ordinal)
            if sync is None or sync.caught_up is None:
                detail = sync.detail if sync and sync.detail else "replication state unknown"
                lagging.append(f"{p.name}: {detail}")
            elif not sync.caught_up:
                lagging.append(f"{p.name} has not caught up with its master ({sync.detail})")
    if not stale:
        if lagging and in_flight is not None:
            return _wait_or_stall(REPLICATION_GATE, "; ".join(lagging[:5]), in_flight, now, policy)
        return Done()
    if lagging:
        return _wait_or_stall(REPLICATION_GATE, "; ".join(lagging[:5]), in_flight, now, policy)

    g, p = stale[0]
    if g.controller_mode and p.ordinal == g.master_ordinal:
        return _switchover(g, p, restart_since, in_flight, now, policy)
    role = "master" if p.ordinal == g.master_ordinal else "slave"
    return Roll(p.name, g.group, f"rolling {role} {p.name} of group {g.group}")


def switchover_target(group: GroupState, restart_since: str | None) -> PodState | None:
    """The replica to hand mastership to: Ready, already at the new revision, in the
    SyncStateSet (so it holds every acknowledged message); the lowest ordinal of those."""
    candidates = [
        p
        for p in group.pods
        if p.ordinal != group.master_ordinal
        and p.ready
        and not p.terminating
        and p.ordinal in group.in_sync
        and not needs_roll(p, group.update_revision, restart_since)
    ]
    return min(candidates, key=lambda p: p.ordinal) if candidates else None


def _switchover(
    g: GroupState,
    master: PodState,
    restart_since: str | None,
    in_flight: InFlight | None,
    now: datetime.datetime,
    policy: Policy,
) -> Decision:
    target = switchover_target(g, restart_since)
    if target is None:
        if g.replicas == 1:
            # nobody to hand over to: a single-replica group has a write outage either way
            return Roll(master.name, g.group, f"rolling {master.name}, the only replica")
        return _wait_or_stall(
            SWITCHOVER_GATE,
            f"no Ready replica of group {g.group} at the new revision is in the SyncStateSet "
            f"{sorted(g.in_sync)} to take over from master {master.name}",
            in_flight,
            now,
            policy,
        )
    return SwitchOver(
        g.group,
        master.name,
        target.ordinal,
        f"handing mastership of group {g.group} from {master.name} to {target.name} before "
        "rolling it",
    )


def _wait_or_stall(
    reason: str, message: str, in_flight: InFlight | None, now: datetime.datetime, policy: Policy
) -> Wait | Stalled:
    if in_flight is not None:
        elapsed = _elapsed(in_flight.since, now)
        if elapsed is not None and elapsed > policy.stall_seconds:
            return Stalled(
                "RolloutStalled",
                f"{in_flight.pod} was restarted {int(elapsed)}s ago and the roll-out cannot "
                f"continue: {message}; stopped (fix the spec or the pod, the roll resumes by "
                f"itself)",
                reason,
            )
    return Wait(reason, message)


# --- reading the observations ---


def pod_state(pod: Mapping[str, Any]) -> PodState:
    meta = pod.get("metadata") or {}
    name = str(meta.get("name", ""))
    try:
        ordinal = int(name.rsplit("-", 1)[1])
    except (IndexError, ValueError):
        ordinal = -1
    ready = False
    unschedulable = ""
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            ready = condition.get("status") == "True"
        elif (
            condition.get("type") == "PodScheduled"
            and condition.get("status") == "False"
            and condition.get("reason") == "Unschedulable"
        ):
            unschedulable = str(condition.get("message") or "unschedulable")
    created = meta.get("creationTimestamp") or ""
    if isinstance(created, datetime.datetime):
        created = created.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return PodState(
        name=name,
        ordinal=ordinal,
        revision=str((meta.get("labels") or {}).get(REVISION_LABEL, "")),
        ready=ready and not meta.get("deletionTimestamp"),
        terminating=bool(meta.get("deletionTimestamp")),
        created=str(created),
        unschedulable=unschedulable,
    )


def slave_sync(
    master_info: Mapping[str, str] | None,
    slave_info: Mapping[str, str] | None,
    max_lag_bytes: int = DEFAULT_MAX_LAG_BYTES,
) -> SlaveSync:
    """Caught up = the slave is connected to its master and its commit log is within
    ``max_lag_bytes`` of the master's (GET_BROKER_RUNTIME_INFO: haConnected, commitLogMaxOffset)."""
    if master_info is None:
        return SlaveSync(None, "master not reachable")
    if slave_info is None:
        return SlaveSync(None, "slave not reachable")
    if slave_info.get("haConnected", "").lower() != "true":
        error = slave_info.get("haLastError")
        return SlaveSync(False, "not connected to its master" + (f": {error}" if error else ""))
    try:
        master_max = int(master_info["commitLogMaxOffset"])
        slave_max = int(slave_info["commitLogMaxOffset"])
    except (KeyError, ValueError):
        return SlaveSync(None, "commitLogMaxOffset not reported")
    lag = master_max - slave_max
    if lag > max_lag_bytes:
        return SlaveSync(False, f"{lag} bytes behind")
    return SlaveSync(True, f"{max(lag, 0)} bytes behind")
