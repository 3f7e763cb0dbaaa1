"""Reconcile Topic and ConsumerGroup resources against the broker groups of their Broker.

Framework-free (no kopf import): ``topics.handlers`` adapts the results to kopf. Every pass reads
what each group's master holds (never remembered in the process), writes what differs, and
reports it: a change the spec did not ask for (another tool's drift) is put back with a Warning
event. Addresses come from :class:`Addresses` (cluster DNS in a cluster).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ferrymq_operator import k8s
from ferrymq_operator import models as cr_models
from ferrymq_operator.broker_admin import AdminUnavailable
from ferrymq_operator.builders import broker as broker_builder
from ferrymq_operator.builders import names
from ferrymq_operator.reconcile import Result, now, owner_of
from ferrymq_operator.security import session
from ferrymq_operator.status import Failure
from ferrymq_operator.topics import conditions, plan, unmanaged
from ferrymq_operator.topics import models as tm
from ferrymq_operator.topics.admin import AdminRefused, ObjectAdmin

TOPIC, GROUP = "Topic", "ConsumerGroup"


class Addresses(Protocol):
    def broker(self, broker: str, namespace: str, group: int) -> str:
        """``host:port`` of the master of one broker group of a Broker."""

    def namesrv(self, broker_body: Mapping[str, Any]) -> str | None:
        """namesrvAddr (``;``-separated) of a Broker's NameServers, None while unknown."""


@dataclass(frozen=True)
class DnsAddresses:
    """Pod DNS names, as the operator reaches brokers inside the cluster."""

    domain: str

    def broker(self, broker: str, namespace: str, group: int) -> str:
        return names.broker_pod_address(broker, namespace, group, 0, self.domain)

    def master(self, broker_body: Mapping[str, Any], group: int) -> str:
        """The master of ``group`` on its own port: per-pod ports on the host network, and in
        controller mode the elected master of ``status.groupMasters`` (brokerId = ordinal + 1)."""
        meta = broker_body["metadata"]
        spec = cr_models.parse_broker_spec(dict(broker_body.get("spec") or {}))
        ordinal, broker_id = master_pod(broker_body, spec, group)
        port = spec.pod_ports(group, broker_id)[0]
        return names.broker_pod_address(
            meta["name"], meta["namespace"], group, ordinal, self.domain, port
        )

    def namesrv(self, broker_body: Mapping[str, Any]) -> str | None:
        addr = (broker_body.get("status") or {}).get("nameServerAddr")
        return str(addr) if addr else None


def master_pod(
    broker_body: Mapping[str, Any], spec: cr_models.BrokerSpec, group: int
) -> tuple[int, int]:
    """(pod ordinal, brokerId) of the master of ``group`` (pure)."""
    if spec.failover != "controller":
        return 0, 0
    name = names.broker_name(broker_body["metadata"]["name"], group)
    for entry in (broker_body.get("status") or {}).get("groupMasters") or []:
        master_id = entry.get("masterBrokerId")
        if entry.get("brokerName") == name and isinstance(master_id, int) and master_id >= 1:
            return master_id - 1, master_id
    return 0, 1  # no election seen yet: pod 0, the first replica


def _master_addr(
    ctx: TopicContext, broker_body: Mapping[str, Any], ref: str, namespace: str, group: int
) -> str:
    """In the cluster, the master by DNS on its own port; an ``Addresses`` given for an operator
    outside the cluster network maps groups to addresses itself."""
    if isinstance(ctx.addresses, DnsAddresses):
        return ctx.addresses.master(broker_body, group)
    return ctx.addresses.broker(ref, namespace, group)


@dataclass
class TopicContext:
    kube: k8s.Kube
    admin: ObjectAdmin
    addresses: Addresses
    retry_delay_seconds: float


class Retry(Exception):
    """A deletion that cannot finish yet (the finalizer stays; try again later)."""


@dataclass
class _Target:
    """A resource's parsed spec, name and Broker (or the failure that stopped the pass)."""

    spec: Any = None
    name: str = ""
    broker: Mapping[str, Any] | None = None
    broker_spec: cr_models.BrokerSpec | None = None
    failure: conditions.Outcome | None = None
    events: list[tuple[str, str, str]] = field(default_factory=list)


def _claims(items: list[dict[str, Any]]) -> list[plan.Claim]:
    return [c for c in (plan.claim_of(i) for i in items) if c is not None]


async def _resolve(
    ctx: TopicContext,
    body: Mapping[str, Any],
    kind: str,
    previous: tm.ObjectStatus,
) -> _Target:
    meta = body["metadata"]
    namespace, resource = meta["namespace"], meta["name"]
    target = _Target()
    try:
        if kind == TOPIC:
            target.spec = tm.parse_topic_spec(dict(body.get("spec") or {}))
        else:
            target.spec = tm.parse_group_spec(dict(body.get("spec") or {}))
        target.name = plan.managed_name(
            target.spec.name, resource, "topic" if kind == TOPIC else "consumer group"
        )
    except ValueError as error:
        target.failure = conditions.Outcome(str(error), "InvalidSpec")
        return target
    if previous.name and previous.broker_groups and previous.name != target.name:
        target.failure = conditions.Outcome(
            f"spec.name cannot change once the {kind} exists on the brokers (it manages "
            f"{previous.name!r}); set it back, or create a new {kind} for {target.name!r}",
            "InvalidSpec",
        )
        target.name = previous.name
        return target
    ref = target.spec.broker_ref.name
    mine = plan.Claim(resource, ref, target.name, str(meta.get("creationTimestamp") or ""))
    rivals = await ctx.kube.list(cr_models.API_VERSION, kind, namespace, "")
    earlier = plan.earlier_claim(mine, _claims(rivals))
    if earlier is not None:
        target.failure = conditions.Outcome(
            f"{kind.lower()} {target.name!r} of Broker {ref!r} is already managed by {kind} "
            f"{earlier.resource!r}; this resource changes nothing: delete it or set another "
            f"spec.name",
            "DuplicateName",
        )
        return target
    broker = await ctx.kube.get(cr_models.API_VERSION, "Broker", namespace, ref)
    if broker is None:
        target.failure = conditions.Outcome(
            f"spec.brokerRef.name: no Broker {ref!r} in namespace {namespace!r}; create it or "
            f"fix the name",
            "BrokerNotFound",
        )
        return target
    try:
        target.broker_spec = cr_models.parse_broker_spec(dict(broker.get("spec") or {}))
    except cr_models.InvalidSpec as error:
        target.failure = conditions.Outcome(
            f"Broker {ref!r} has an invalid spec: {error}", "BrokerNotFound"
        )
        return target
    await session.use_for_broker(ctx.kube, namespace, target.broker_spec, ref)  # admin calls sign
    target.broker = broker
    return target


def _converged(previous: tm.ObjectStatus, generation: int) -> bool:
    """The last pass reached this very spec everywhere: a difference now is someone else's change
    (drift), not the operator's unfinished work."""
    ready = {c.type: c for c in previous.conditions}.get(conditions.READY)
    return (
        previous.observed_generation == generation and ready is not None and ready.status == "True"
    )


def _groups(target: _Target) -> list[tuple[str, int]]:
    assert target.broker_spec is not None
    ref = target.spec.broker_ref.name
    return [(names.broker_name(ref, g), g) for g in range(target.broker_spec.groups)]


def _result(
    previous: tm.ObjectStatus,
    generation: int,
    outcome: conditions.Outcome,
    retry: float | None,
    events: list[tuple[str, str, str]],
    **fields: Any,
) -> Result:
    status = conditions.build(previous, generation, outcome, now(), **fields)
    result = Result(status=status, events=events, retry=retry)
    if outcome.reason in conditions.FAILURES:
        result.failure = Failure(outcome.reason or "", outcome.message)
    # One Warning when the reason changes, not one per pass while it lasts (a shrink's counts
    # and an unreachable master's error text change from pass to pass).
    old = {c.type: c for c in previous.conditions}.get(conditions.READY)
    if outcome.reason is not None and (
        old is None
        or old.status == "True"
        or old.reason != outcome.reason
        or old.observed_generation != generation
    ):
        events.append(("Warning", outcome.reason, outcome.message))
    return result


# --- Topic ---


async def reconcile_topic(ctx: TopicContext, body: Mapping[str, Any]) -> Result:
    generation = int(body["metadata"].get("generation", 1))
    namespace = body["metadata"]["namespace"]
    previous = tm.TopicStatus.model_validate(body.get("status") or {})
    target = await _resolve(ctx, body, TOPIC, previous)
    keep = {
        "name": previous.name,
        "brokerGroups": previous.broker_groups,
        "queues": previous.queues,
    }
    if target.failure is not None:
        retry = ctx.retry_delay_seconds if target.failure.reason == "BrokerNotFound" else None
        return _result(previous, generation, target.failure, retry, target.events, **keep)

    spec: tm.TopicSpec = target.spec
    desired = plan.desired_topic(spec)
    drift_possible = _converged(previous, generation)
    events = target.events
    present: list[str] = []
    unavailable: list[str] = []
    shrinking: list[str] = []
    queues: set[str] = set()
    for broker_name, group in _groups(target):
        assert target.broker is not None
        addr = _master_addr(ctx, target.broker, spec.broker_ref.name, namespace, group)
        try:
            actual = (await ctx.admin.topics(addr)).get(target.name)
            removed = plan.removed_read_queues(desired, actual)
            left: dict[str, int] = {}
            if removed:
                left = plan.undrained(
                    await ctx.admin.backlogs(addr, broker_name, target.name, removed)
                )
                if left:
                    shrinking.append(plan.shrink_message(broker_name, removed, left))
            wanted = plan.target_topic(desired, actual, drained=not left)
            if actual is None:
                await ctx.admin.put_topic(addr, target.name, wanted, None)
                if drift_possible and broker_name in previous.broker_groups:
                    events.append(
                        (
                            "Warning",
                            "DriftCorrected",
                            f"topic {target.name} was missing on {broker_name} (removed by "
                            f"another tool); created it again",
                        )
                    )
                else:
                    events.append(
                        ("Normal", "Created", f"created topic {target.name} on {broker_name}")
                    )
            elif wanted != actual:
                diff = "; ".join(plan.differences(wanted, actual))
                await ctx.admin.put_topic(addr, target.name, wanted, actual)
                known = broker_name in previous.broker_groups
                if drift_possible and known and not (removed and not left):
                    events.append(
                        (
                            "Warning",
                            "DriftCorrected",
                            f"topic {target.name} on {broker_name} was changed by another "
                            f"tool; put back: {diff}",
                        )
                    )
                else:
                    events.append(
                        ("Normal", "Updated", f"topic {target.name} on {broker_name}: {diff}")
                    )
            present.append(broker_name)
            queues.add(wanted.queues)
        except (AdminUnavailable, AdminRefused) as error:
            unavailable.append(f"{broker_name}: {error}")
            if broker_name in previous.broker_groups:
                present.append(broker_name)  # last known; the next pass checks again

    fields = {
        "name": target.name,
        "brokerGroups": present,
        "queues": ",".join(sorted(queues)) or previous.queues,
    }
    if unavailable:
        outcome = conditions.Outcome(
            "cannot reach the master of " + plan.listed(unavailable) + "; retrying",
            "BrokerUnavailable",
        )
        return _result(previous, generation, outcome, ctx.retry_delay_seconds, events, **fields)
    if shrinking:
        outcome = conditions.Outcome("; ".join(shrinking), "ShrinkPending")
        return _result(previous, generation, outcome, ctx.retry_delay_seconds, events, **fields)
    outcome = conditions.Outcome(
        f"topic {target.name} on {len(present)} broker groups with {desired.queues} "
        f"read/write queues"
    )
    return _result(previous, generation, outcome, None, events, **fields)


async def finalize_topic(ctx: TopicContext, body: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """Remove the topic from every broker group and the NameServers (raises Retry while a master
    or the NameServers cannot be reached); the retain annotation keeps it."""
    return await _finalize(ctx, body, TOPIC)


# --- ConsumerGroup ---


async def reconcile_group(ctx: TopicContext, body: Mapping[str, Any]) -> Result:
    generation = int(body["metadata"].get("generation", 1))
    namespace = body["metadata"]["namespace"]
    previous = tm.ConsumerGroupStatus.model_validate(body.get("status") or {})
    target = await _resolve(ctx, body, GROUP, previous)
    keep = {"name": previous.name, "brokerGroups": previous.broker_groups}
    if target.failure is not None:
        retry = ctx.retry_delay_seconds if target.failure.reason == "BrokerNotFound" else None
        return _result(previous, generation, target.failure, retry, target.events, **keep)

    spec: tm.ConsumerGroupSpec = target.spec
    desired = plan.desired_group(spec)
    drift_possible = _converged(previous, generation)
    events = target.events
    present: list[str] = []
    unavailable: list[str] = []
    lag: dict[str, int] = {}
    for broker_name, group in _groups(target):
        assert target.broker is not None
        addr = _master_addr(ctx, target.broker, spec.broker_ref.name, namespace, group)
        try:
            actual = (await ctx.admin.groups(addr)).get(target.name)
            if actual is None or plan.group_differences(desired, actual):
                diff = "; ".join(plan.group_differences(desired, actual or {}))
                await ctx.admin.put_group(addr, target.name, desired)
                if actual is None and not (
                    drift_possible and broker_name in previous.broker_groups
                ):
                    events.append(
                        ("Normal", "Created", f"created group {target.name} on {broker_name}")
                    )
                elif drift_possible and broker_name in previous.broker_groups:
                    events.append(
                        (
                            "Warning",
                            "DriftCorrected",
                            f"group {target.name} on {broker_name} was changed or removed by "
                            f"another tool; put back: {diff}",
                        )
                    )
                else:
                    events.append(
                        ("Normal", "Updated", f"group {target.name} on {broker_name}: {diff}")
                    )
            present.append(broker_name)
            for topic, count in (await ctx.admin.group_lag(addr, target.name)).items():
                lag[topic] = lag.get(topic, 0) + count
        except (AdminUnavailable, AdminRefused) as error:
            unavailable.append(f"{broker_name}: {error}")
            if broker_name in previous.broker_groups:
                present.append(broker_name)

    fields: dict[str, Any] = {"name": target.name, "brokerGroups": present}
    if unavailable:
        outcome = conditions.Outcome(
            "cannot reach the master of " + plan.listed(unavailable) + "; retrying",
            "BrokerUnavailable",
        )
        return _result(previous, generation, outcome, ctx.retry_delay_seconds, events, **fields)
    fields["lag"] = sum(lag.values())
    fields["lagByTopic"] = dict(sorted(lag.items()))
    outcome = conditions.Outcome(f"group {target.name} on {len(present)} broker groups")
    return _result(previous, generation, outcome, None, events, **fields)


async def finalize_group(ctx: TopicContext, body: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """Remove the subscription group from every broker group (offsets are kept)."""
    return await _finalize(ctx, body, GROUP)


# --- deletion ---


def retained(body: Mapping[str, Any]) -> bool:
    annotations = (body.get("metadata") or {}).get("annotations") or {}
    return str(annotations.get(tm.RETAIN_ANNOTATION, "")).lower() == tm.RETAIN


async def _finalize(
    ctx: TopicContext, body: Mapping[str, Any], kind: str
) -> list[tuple[str, str, str]]:
    meta = body["metadata"]
    namespace, resource = meta["namespace"], meta["name"]
    status = tm.ObjectStatus.model_validate(body.get("status") or {})
    what = "topic" if kind == TOPIC else "group"
    name = status.name
    if not name or not status.broker_groups:
        return []  # never written to a broker: nothing to remove
    if retained(body):
        return [
            (
                "Normal",
                "Retained",
                f"{what} {name} kept on the brokers ({tm.RETAIN_ANNOTATION}: {tm.RETAIN})",
            )
        ]
    ref = ((body.get("spec") or {}).get("brokerRef") or {}).get("name", "")
    live = [
        item
        for item in await ctx.kube.list(cr_models.API_VERSION, kind, namespace, "")
        if not item["metadata"].get("deletionTimestamp")
    ]
    others = [
        c for c in _claims(live) if c.resource != resource and (c.broker, c.name) == (ref, name)
    ]
    if others:
        return [
            (
                "Normal",
                "HandedOver",
                f"{what} {name} kept: {kind} {others[0].resource} also declares it",
            )
        ]
    broker = await ctx.kube.get(cr_models.API_VERSION, "Broker", namespace, ref)
    if broker is None:
        return [("Normal", "BrokerGone", f"Broker {ref} is gone; nothing to remove")]
    broker_spec = cr_models.parse_broker_spec(dict(broker.get("spec") or {}))
    await session.use_for_broker(ctx.kube, namespace, broker_spec, ref)  # admin calls sign
    # Every master is asked first, and nothing is removed unless all answered: a deletion is
    # done everywhere or not started (so a retain annotation added meanwhile still keeps it all).
    holding: list[str] = []
    failed: list[str] = []
    for group in range(broker_spec.groups):
        addr = _master_addr(ctx, broker, ref, namespace, group)
        try:
            table = await (ctx.admin.topics(addr) if kind == TOPIC else ctx.admin.groups(addr))
        except (AdminUnavailable, AdminRefused) as error:
            failed.append(f"{names.broker_name(ref, group)}: {error}")
            continue
        if name in table:
            holding.append(addr)
    if failed:
        raise Retry(
            f"cannot remove {what} {name} yet, nothing removed: {plan.listed(failed)}; retrying "
            f"(annotate {tm.RETAIN_ANNOTATION}={tm.RETAIN} to delete the resource and keep the "
            f"{what})"
        )
    for addr in holding:
        try:
            if kind == TOPIC:
                await ctx.admin.delete_topic(addr, name)
            else:
                await ctx.admin.delete_group(addr, name)
        except (AdminUnavailable, AdminRefused) as error:
            failed.append(f"{addr}: {error}")
    if kind == TOPIC and not failed:
        namesrv = ctx.addresses.namesrv(broker)
        if namesrv is None:
            failed.append(f"the NameServers of Broker {ref} are not known yet")
        else:
            cluster = broker_builder.cluster_name(owner_of(broker), broker_spec)
            try:
                await ctx.admin.delete_route(namesrv, name, cluster)
            except (AdminUnavailable, AdminRefused) as error:
                failed.append(f"NameServers {namesrv}: {error}")
    if failed:
        raise Retry(
            f"cannot remove {what} {name} yet: {plan.listed(failed)}; retrying (annotate "
            f"{tm.RETAIN_ANNOTATION}={tm.RETAIN} to delete the resource and keep the {what})"
        )
    return [("Normal", "Deleted", f"removed {what} {name} from Broker {ref}")]


# --- the Broker's unmanaged count ---


async def unmanaged_status(ctx: TopicContext, broker_body: Mapping[str, Any]) -> dict[str, Any]:
    """``{"unmanaged": {"topics": n, "groups": m}}`` for a Broker's status; empty when no master
    answered (the last count stays)."""
    meta = broker_body["metadata"]
    namespace, ref = meta["namespace"], meta["name"]
    try:
        spec = cr_models.parse_broker_spec(dict(broker_body.get("spec") or {}))
    except cr_models.InvalidSpec:
        return {}
    inventories = []
    for group in range(spec.groups):
        try:
            inventories.append(
                await ctx.admin.inventory(_master_addr(ctx, broker_body, ref, namespace, group))
            )
        except (AdminUnavailable, AdminRefused):
            continue
    if not inventories:
        return {}
    managed: dict[str, list[str]] = {}
    for kind in (TOPIC, GROUP):
        items = await ctx.kube.list(cr_models.API_VERSION, kind, namespace, "")
        managed[kind] = [c.name for c in _claims(items) if c.broker == ref]
    return {"unmanaged": unmanaged.count(inventories, managed[TOPIC], managed[GROUP])}
