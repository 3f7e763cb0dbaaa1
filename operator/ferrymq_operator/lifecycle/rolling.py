"""Rolling: the health-gated roll-out of broker pods, one pod at a time (decisions in
ferrymq_operator.rollout), and the one-shot ``ferrymq.io/manual-rolling-restart`` annotation (any
value): every broker pod is restarted with the same health gates as an update; the annotation is
removed when the restart is done."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol

from ferrymq_operator import k8s, models, rollout, timeouts
from ferrymq_operator.builders import names
from ferrymq_operator.builders.names import Owner
from ferrymq_operator.lifecycle.pausing import annotations_of
from ferrymq_operator.lifecycle.pods import Events, PortOf, pod_address
from ferrymq_operator.security import session
from ferrymq_operator.status import WorkloadObservation

RESTART_ANNOTATION = "ferrymq.io/manual-rolling-restart"
# asyncio sleeps on the monotonic clock; a little more keeps the wall clock past the full second.
RESTART_CLOCK_MARGIN_S = 0.05


def restart_requested(body: Mapping[str, Any]) -> bool:
    return RESTART_ANNOTATION in annotations_of(body)


class RuntimeInfo(Protocol):
    async def __call__(self, addr: str) -> dict[str, str]:
        """GET_BROKER_RUNTIME_INFO of one broker."""


def remoting_runtime_info(namesrv_addr: str, timeout: float) -> RuntimeInfo:
    """GET_BROKER_RUNTIME_INFO through ferrymq's AdminClient."""

    async def call(addr: str) -> dict[str, str]:
        from ferrymq.client.admin import AdminClient

        async with AdminClient(namesrv_addr, timeout=timeout, security=session.current()) as admin:
            return await timeouts.within(timeout * 2, admin.broker_runtime_info(addr))

    return call


def _utc(value: datetime.datetime) -> str:
    return value.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def group_states(
    owner: Owner,
    replicas_per_group: int,
    stateful_sets: Mapping[int, Mapping[str, Any]],
    pods: Sequence[Mapping[str, Any]],
    groups: int,
) -> list[rollout.GroupState]:
    out = []
    for group in range(groups):
        sts = stateful_sets.get(group)
        if sts is None:
            continue
        name = names.broker_statefulset(owner.name, group)
        own = [
            rollout.pod_state(p)
            for p in pods
            if (p.get("metadata") or {}).get("labels", {}).get(names.LABEL_GROUP) == name
        ]
        own = [p for p in own if 0 <= p.ordinal < replicas_per_group]
        out.append(
            rollout.GroupState(
                group=group,
                statefulset=name,
                update_revision=str((sts.get("status") or {}).get("updateRevision") or ""),
                replicas=replicas_per_group,
                pods=tuple(sorted(own, key=lambda p: p.ordinal)),
            )
        )
    return out


def with_controller(
    states: Sequence[rollout.GroupState], masters: Sequence[Mapping[str, Any]]
) -> list[rollout.GroupState]:
    """spec.failover controller: each group's elected master and SyncStateSet (status
    ``groupMasters``, replica ids) as pod ordinals (replica id = ordinal + 1)."""
    by_name = {str(m.get("brokerName")): m for m in masters}
    out = []
    for g in states:
        m = by_name.get(g.statefulset, {})
        master = m.get("masterBrokerId")
        out.append(
            dataclasses.replace(
                g,
                controller_mode=True,
                master=None if master is None else int(master) - 1,
                in_sync=frozenset(int(b) - 1 for b in m.get("syncStateSet", [])),
            )
        )
    return out


class SwitchOverCall(Protocol):
    async def __call__(self, group: int, to_ordinal: int) -> None:
        """Make the pod of ``to_ordinal`` the group's master (raises with a reason if refused)."""


def remoting_switchover(
    owner: Owner, timeout: float, addrs: Sequence[str] | None = None
) -> SwitchOverCall:
    """CONTROLLER_ELECT_MASTER (upstream mqadmin electMaster) to whichever controller leads
    (``addrs``: the controller pods by DNS unless given)."""
    from ferrymq_operator.builders import controller

    targets = list(addrs or controller.broker_conf_keys(owner)["controllerAddr"].split(";"))

    async def call(group: int, to_ordinal: int) -> None:
        from ferrymq.controller.protocol import ControllerRequestCode
        from ferrymq.remoting.client import RemotingClient
        from ferrymq.remoting.command import RemotingCommand

        errors = []
        client = RemotingClient(name="operator-switchover")
        try:
            for addr in targets:
                request = RemotingCommand.request(
                    ControllerRequestCode.CONTROLLER_ELECT_MASTER,
                    {
                        "brokerName": names.broker_name(owner.name, group),
                        "brokerId": to_ordinal + 1,
                    },
                )
                try:
                    answer = await client.invoke(addr, request, timeout)
                except Exception as exc:  # unreachable: try the other controller
                    errors.append(f"{addr}: {exc!r}")
                    continue
                # 2011 CONTROLLER_MASTER_STILL_EXIST: the named replica is the master already
                if answer.code in (0, 2011):
                    return
                errors.append(f"{addr}: {answer.remark or answer.code}")
        finally:
            await client.close()
        raise RuntimeError("; ".join(errors))

    return call


async def with_sync(
    owner: Owner,
    states: Sequence[rollout.GroupState],
    runtime_info: RuntimeInfo,
    domain: str,
    max_lag_bytes: int,
    port_of: PortOf | None = None,
) -> list[rollout.GroupState]:
    """Add the slaves' replication state (runtime info of every pod, fetched concurrently)."""

    async def info(group: int, broker_id: int) -> dict[str, str] | None:
        addr = pod_address(owner, group, broker_id, domain, port_of)
        try:
            return await runtime_info(addr)
        except Exception:  # unreachable or refusing: replication state unknown, roll waits
            return None

    wanted = [(g.group, p.ordinal) for g in states if g.replicas > 1 for p in g.pods]
    answers = await asyncio.gather(*(info(g, i) for g, i in wanted))
    by_pod = dict(zip(wanted, answers, strict=True))
    out = []
    for g in states:
        master = by_pod.get((g.group, g.master_ordinal)) if g.master_ordinal is not None else None
        sync = {
            p.ordinal: rollout.slave_sync(master, by_pod.get((g.group, p.ordinal)), max_lag_bytes)
            for p in g.pods
            if p.ordinal != g.master_ordinal
        }
        out.append(dataclasses.replace(g, sync=sync))
    return out


def settle_on_delete(
    workloads: Sequence[WorkloadObservation], states: Sequence[rollout.GroupState]
) -> list[WorkloadObservation]:
    """With updateStrategy OnDelete, Kubernetes (1.20) never advances currentRevision; a group whose
    pods all run updateRevision has finished rolling, whatever currentRevision says."""
    done = {
        g.statefulset
        for g in states
        if len(g.pods) == g.replicas and all(p.revision == g.update_revision for p in g.pods)
    }
    return [
        dataclasses.replace(w, current_revision=w.update_revision) if w.name in done else w
        for w in workloads
    ]


@dataclasses.dataclass
class RolloutOutcome:
    decision: rollout.Decision
    status: dict[str, Any] | None  # status.rollout (None clears it)
    remove_restart_annotation: bool = False


async def roll(
    kube: k8s.Kube,
    owner: Owner,
    states: Sequence[rollout.GroupState],
    previous: models.RolloutStatus | None,
    restart: bool,
    fetch_sync: Callable[[Sequence[rollout.GroupState]], Awaitable[list[rollout.GroupState]]],
    policy: rollout.Policy,
    events: Events,
    now: datetime.datetime,
    switchover: SwitchOverCall | None = None,
) -> RolloutOutcome:
    """One step of the roll-out: decide, delete at most one pod (or hand a master over), say
    what happened."""
    in_flight = (
        rollout.InFlight(previous.pod, previous.since)
        if previous is not None and previous.pod and previous.since
        else None
    )
    restart_since = previous.restart_since if previous is not None else None
    if restart and not restart_since:
        # A pod needs the restart when it was created before restartSince, and creationTimestamp
        # has a resolution of one second: start at the next full second, so that every pod that
        # exists now was created before it, and every pod the roll creates, at or after it.
        start = now.replace(microsecond=0) + datetime.timedelta(seconds=1)
        await asyncio.sleep((start - now).total_seconds() + RESTART_CLOCK_MARGIN_S)
        now = start
        restart_since = _utc(start)
        events.append(("Normal", "RollingRestart", f"{RESTART_ANNOTATION}: restarting every pod"))
    decision = rollout.next_step(states, now, in_flight, restart_since, policy)
    # Replication state is asked of the brokers only when it is what the decision hinges on.
    gate = decision.reason if isinstance(decision, rollout.Wait) else ""
    if isinstance(decision, rollout.Stalled):
        gate = decision.gate
    if gate == rollout.REPLICATION_GATE:
        states = await fetch_sync(states)
        decision = rollout.next_step(states, now, in_flight, restart_since, policy)

    base: dict[str, Any] = {"restartSince": restart_since} if restart_since else {}
    if isinstance(decision, rollout.Roll):
        if await kube.delete("v1", "Pod", owner.namespace, decision.pod):
            events.append(("Normal", "RollingPod", decision.message))
        return RolloutOutcome(
            decision, {**base, "pod": decision.pod, "since": _utc(now), "message": decision.message}
        )
    if isinstance(decision, rollout.SwitchOver):
        message = decision.message
        if switchover is None:
            message = f"{message}: no controller to ask"
        else:
            try:
                await switchover(decision.group, decision.to_ordinal)
                events.append(("Normal", "SwitchOver", decision.message))
            except Exception as exc:
                message = f"{message}: the controller refused: {exc}"
                events.append(("Warning", "SwitchOverFailed", message))
        kept_switch = {**base, "message": message}
        if in_flight is not None:
            kept_switch.update(pod=in_flight.pod, since=in_flight.since)
        return RolloutOutcome(decision, kept_switch)
    if isinstance(decision, rollout.Done):
        if in_flight is not None:
            events.append(("Normal", "RolloutComplete", "every broker pod runs the current spec"))
        return RolloutOutcome(decision, None, remove_restart_annotation=restart)
    kept = {**base, "message": decision.message}
    if in_flight is not None:
        kept.update(pod=in_flight.pod, since=in_flight.since)
    if isinstance(decision, rollout.Stalled) and (
        previous is None or not (previous.message or "").startswith("stalled: ")
    ):
        events.append(("Warning", decision.reason, decision.message))
    if isinstance(decision, rollout.Stalled):
        kept["message"] = "stalled: " + decision.message
    return RolloutOutcome(decision, kept)
