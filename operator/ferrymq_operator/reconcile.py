"""Reconcile one NameServer or Broker: parse, build the desired children, apply them, observe,
write the status. Framework-free (no kopf import): handlers.py adapts the result to kopf.

Every child is server-side applied on every pass, so drift is corrected and deleted children come
back; what exists is observed from the API each time, never remembered in the process.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ferrymq_operator import (
    broker_admin,
    conf_check,
    drain,
    failover_mode,
    host_ports,
    k8s,
    models,
    rollout,
    sync_state,
)
from ferrymq_operator.builders import audit as audit_builder
from ferrymq_operator.builders import broker as broker_builder
from ferrymq_operator.builders import controller as controller_builder
from ferrymq_operator.builders import listeners as listener_builder
from ferrymq_operator.builders import names
from ferrymq_operator.builders import namesrv as namesrv_builder
from ferrymq_operator.builders import proxy as proxy_builder
from ferrymq_operator.builders.names import Owner
from ferrymq_operator.claims import claims_to_delete
from ferrymq_operator.lifecycle import (
    advertising,
    draining,
    namesrv_push,
    pausing,
    rolling,
    storage_growth,
)
from ferrymq_operator.lifecycle.pods import PortOf
from ferrymq_operator.listener_models import ListenerStatus
from ferrymq_operator.security import netpol
from ferrymq_operator.security import secrets as security_secrets
from ferrymq_operator.security import session as security_session
from ferrymq_operator.settings import OperatorSettings
from ferrymq_operator.status import (
    PROXY_READY,
    Failure,
    S,
    StatusBuilder,
    WorkloadObservation,
    observe_statefulset,
)

T = TypeVar("T")

# (type "Normal"|"Warning", reason, message) -> posts a Kubernetes Event on the custom resource.
EventSink = Callable[[str, str, str], None]


@dataclass
class Context:
    """Everything a reconcile needs, built once at start-up and passed in."""

    kube: k8s.Kube
    settings: OperatorSettings
    versions: k8s.ApiVersions
    admin: broker_admin.TopicAdmin
    # Drained scale-in admin calls; None: RemotingDrainAdmin (ferrymq's AdminClient).
    drain_admin: drain.DrainAdmin | None = None
    # Every hostNetwork NameServer and Broker the operator watches (kopf indexes in handlers.py).
    port_users: Callable[[], list[host_ports.PortUser]] | None = None


@dataclass
class Result:
    """What happened; handlers.py turns ``retry``/``failure`` into kopf errors."""

    status: dict[str, Any]
    failure: Failure | None = None
    # Seconds after which to try again (missing NameServer, transient API error), else None.
    retry: float | None = None
    events: list[tuple[str, str, str]] = field(default_factory=list)


def _utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def now() -> str:
    return _utcnow().strftime("%Y-%m-%dT%H:%M:%SZ")


def owner_of(body: Mapping[str, Any]) -> Owner:
    meta = body["metadata"]
    return Owner(
        api_version=body.get("apiVersion", models.API_VERSION),
        kind=body["kind"],
        name=meta["name"],
        namespace=meta["namespace"],
        uid=meta["uid"],
    )


def _selector(labels: Mapping[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


async def apply_all(
    kube: k8s.Kube, objects: list[dict[str, Any]], result: Result
) -> Failure | None:
    """Apply in order; the first object the API refuses stops the pass and becomes the failure."""
    for obj in objects:
        what = f"{obj['kind']} {obj['metadata']['name']}"
        try:
            outcome = await kube.apply(obj)
        except k8s.Rejected as error:
            return Failure("ApplyRejected", f"the API refused {what}: {error}")
        if outcome is k8s.Outcome.CREATED:
            result.events.append(("Normal", "Created", f"created {what}"))
        elif outcome is k8s.Outcome.CONFIGURED:
            result.events.append(("Normal", "Updated", f"updated {what}"))
    return None


def _transition_events(
    previous: models.ClusterStatus, status: dict[str, Any]
) -> list[tuple[str, str, str]]:
    """Events for changes a user should see: phase changes and a new failure."""
    events: list[tuple[str, str, str]] = []
    old_failure = next(
        (c for c in previous.conditions if c.type == "ReconcileFailed" and c.status == "True"), None
    )
    new_failure = next(
        (
            c
            for c in status["conditions"]
            if c["type"] == "ReconcileFailed" and c["status"] == "True"
        ),
        None,
    )
    if new_failure is not None and (
        old_failure is None
        or (old_failure.reason, old_failure.message)
        != (new_failure["reason"], new_failure["message"])
    ):
        events.append(("Warning", new_failure["reason"], new_failure["message"]))
    if status["phase"] != previous.phase:
        ready = next(c for c in status["conditions"] if c["type"] == "Ready")
        kind = "Warning" if status["phase"] in ("Degraded", "Failed") else "Normal"
        events.append((kind, status["phase"], ready["message"] or status["phase"]))
    return events


def _conf_failure(
    report: conf_check.ConfReport,
    previous: models.ClusterStatus,
    generation: int,
    result: Result,
) -> Failure | None:
    """Bad values refuse the spec; unknown keys get one Warning event per spec generation."""
    if report.unknown and previous.observed_generation != generation:
        result.events.append(
            (
                "Warning",
                "UnknownConfigKey",
                f"spec.config: {', '.join(report.unknown)} unknown to this operator's ferrymq "
                f"version; the server ignores unknown keys, check the spelling",
            )
        )
    if report.problems:
        return Failure("InvalidSpec", "spec.config: " + "; ".join(report.problems))
    return None


def port_conflict(
    ctx: Context, body: Mapping[str, Any], ranges: tuple[host_ports.PortRange, ...]
) -> Failure | None:
    """PortConflict when this hostNetwork resource's ports overlap an earlier one's."""
    if not ranges or ctx.port_users is None:
        return None
    me = port_user(body, ranges)
    clashes = host_ports.conflicts(me, ctx.port_users())
    if not clashes:
        return None
    return Failure("PortConflict", host_ports.conflict_message(me, clashes))


def port_user(
    body: Mapping[str, Any], ranges: tuple[host_ports.PortRange, ...]
) -> host_ports.PortUser:
    meta = body["metadata"]
    created = meta.get("creationTimestamp") or ""
    if isinstance(created, datetime.datetime):
        created = created.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return host_ports.PortUser(
        str(body["kind"]), str(meta["namespace"]), str(meta["name"]), str(created), ranges
    )


# --- NameServer ---


def begin(body: Mapping[str, Any], kind: type[S]) -> tuple[Owner, StatusBuilder[S], Result]:
    """What every pass starts from: the owner, a status builder over the status the resource
    has, an empty result."""
    previous = kind.model_validate(body.get("status") or {})
    generation = int(body["metadata"].get("generation", 1))
    return owner_of(body), StatusBuilder(kind, previous, generation, now()), Result(status={})


def _paused(body: Mapping[str, Any], builder: StatusBuilder[Any], result: Result) -> bool:
    """The pause annotation, alike for every kind: when set, only ReconciliationPaused is added to
    the previous status; when just removed, a ReconciliationResumed event says so."""
    if pausing.is_paused(body):
        pausing.paused_status(builder)
        result.status = builder.patch()
        result.events.extend(pausing.paused_events(builder.previous))
        return True
    result.events.extend(pausing.resumed_events(builder.previous))
    return False


async def observe_nameserver(
    kube: k8s.Kube, owner: Owner, replicas: int
) -> list[WorkloadObservation]:
    sts_name = names.namesrv_statefulset(owner.name)
    sts = await kube.get("apps/v1", "StatefulSet", owner.namespace, sts_name)
    pods = await kube.list(
        "v1",
        "Pod",
        owner.namespace,
        _selector(names.selector_labels(owner, names.COMPONENT_NAMESRV)),
    )
    return [observe_statefulset(sts_name, replicas, sts, pods)]


async def reconcile_nameserver(ctx: Context, body: Mapping[str, Any]) -> Result:
    owner, builder, result = begin(body, models.NameServerStatus)
    previous, generation = builder.previous, builder.generation
    if _paused(body, builder, result):
        return result
    failure: Failure | None = None
    secured = security_secrets.SecurityOutcome()
    replicas = 0
    try:
        spec = models.parse_nameserver_spec(body.get("spec") or {})
        replicas = spec.replicas
        objects = namesrv_builder.desired(owner, spec, ctx.versions.pdb)
        report = conf_check.check_namesrv(namesrv_builder.namesrv_conf(spec), list(spec.config))
    except ValueError as error:  # InvalidSpec, or a name too long for pod names
        failure = Failure("InvalidSpec", str(error))
    else:
        failure = _conf_failure(report, previous, generation, result)
        if failure is None:
            failure = port_conflict(ctx, body, host_ports.nameserver_ranges(spec))
        if failure is None:
            secured = await security_secrets.ensure(
                ctx.kube,
                owner,
                names.COMPONENT_NAMESRV,
                spec,
                ctx.settings.cluster_domain,
                _utcnow(),
            )
            result.events.extend(secured.events)
            failure = secured.failure
        if failure is None:
            failure = await apply_all(ctx.kube, objects, result)
        if failure is None and listener_builder.namesrv_external(spec) is None:
            await remove_namesrv_external(ctx, owner, result)
    workloads = await observe_nameserver(ctx.kube, owner, replicas) if replicas else []
    builder.observe(workloads, failure)
    if replicas:
        result.events += security_secrets.decorate_status(builder, secured, spec, _utcnow())
        builder.status.addresses = names.namesrv_addresses(
            owner.name,
            owner.namespace,
            replicas,
            ctx.settings.cluster_domain,
            spec.port,
            per_pod=spec.host_network,
        )
        builder.status.listeners = [
            ListenerStatus.model_validate(entry)
            for entry in await advertising.nameserver_listeners(
                ctx.kube, owner, spec, builder.status.addresses
            )
        ]
    return finish(builder, failure, result)


async def remove_namesrv_external(ctx: Context, owner: Owner, result: Result) -> None:
    """The NameServer's external Service once its nodeport/loadbalancer listener is removed."""
    name = listener_builder.namesrv_external_service_name(owner.name)
    if await ctx.kube.delete("v1", "Service", owner.namespace, name):
        result.events.append(("Normal", "Deleted", f"deleted Service {name}"))


# --- Broker ---


async def referenced_spec(
    ctx: Context, namespace: str, kind: str, name: str, parse: Callable[[dict[str, Any]], T]
) -> T | Failure:
    """The parsed spec of the ``kind`` resource a ``spec.<kind>Ref`` names, or the Failure
    (``<kind>NotFound``, ``<kind>Invalid``) saying what to fix."""
    body = await ctx.kube.get(models.API_VERSION, kind, namespace, name)
    field = f"spec.{kind[0].lower()}{kind[1:]}Ref.name"
    if body is None:
        return Failure(
            f"{kind}NotFound",
            f"{field}: no {kind} {name!r} in namespace {namespace!r}; create it or fix the name",
        )
    try:
        return parse(body.get("spec") or {})
    except models.InvalidSpec as error:
        return Failure(f"{kind}Invalid", f"{kind} {name!r} has an invalid spec: {error}")


async def namesrv_addr_of(ctx: Context, owner: Owner, spec: models.BrokerSpec) -> str | Failure:
    ref = spec.name_server_ref.name
    ns_spec = await referenced_spec(
        ctx, owner.namespace, "NameServer", ref, models.parse_nameserver_spec
    )
    if isinstance(ns_spec, Failure):
        return ns_spec
    return names.namesrv_addresses(
        ref,
        owner.namespace,
        ns_spec.replicas,
        ctx.settings.cluster_domain,
        ns_spec.port,
        per_pod=ns_spec.host_network,
    )


async def existing_groups(kube: k8s.Kube, owner: Owner) -> dict[int, dict[str, Any]]:
    """Broker StatefulSets of this Broker that exist now, by group index."""
    items = await kube.list(
        "apps/v1",
        "StatefulSet",
        owner.namespace,
        _selector(names.selector_labels(owner, names.COMPONENT_BROKER)),
    )
    found = {}
    for sts in items:
        group = names.group_of_statefulset(owner.name, sts["metadata"]["name"])
        if group is not None:
            found[group] = sts
    return found


async def observe_broker(
    kube: k8s.Kube,
    owner: Owner,
    spec: models.BrokerSpec,
    stateful_sets: Mapping[int, dict[str, Any]],
    master_of: Mapping[int, int] | None = None,
) -> list[WorkloadObservation]:
    """``master_of``: spec.failover controller, group -> its elected master's ordinal (a group
    missing there has no master); else every group's master is ordinal 0."""
    pods = await kube.list(
        "v1",
        "Pod",
        owner.namespace,
        _selector(names.selector_labels(owner, names.COMPONENT_BROKER)),
    )
    out = []
    for group in range(spec.groups):
        sts_name = names.broker_statefulset(owner.name, group)
        group_pods = [
            p
            for p in pods
            if p.get("metadata", {}).get("labels", {}).get(names.LABEL_GROUP) == sts_name
        ]
        out.append(
            observe_statefulset(
                sts_name,
                spec.replicas_per_group,
                stateful_sets.get(group),
                group_pods,
                master_ordinal=0 if master_of is None else master_of.get(group, -1),
            )
        )
    return out


async def roll_pods(
    ctx: Context,
    owner: Owner,
    spec: models.BrokerSpec,
    body: Mapping[str, Any],
    previous: models.BrokerStatus,
    existing: Mapping[int, dict[str, Any]],
    workloads: list[WorkloadObservation],
    addr: str,
    result: Result,
) -> tuple[rolling.RolloutOutcome, list[WorkloadObservation], list[rollout.GroupState]]:
    """One step of the roll-out, one pod at a time (ferrymq_operator.lifecycle.rolling); returns
    the outcome, the workloads as the roll-out sees them and the groups' pod states."""
    domain = ctx.settings.cluster_domain
    timeout = ctx.settings.admin_timeout_seconds
    pods = await ctx.kube.list(
        "v1",
        "Pod",
        owner.namespace,
        _selector(names.selector_labels(owner, names.COMPONENT_BROKER)),
    )
    states = rolling.group_states(owner, spec.replicas_per_group, existing, pods, spec.groups)
    switchover: rolling.SwitchOverCall | None = None
    if controller_builder.enabled(spec):
        states = rolling.with_controller(states, await group_masters(ctx.kube, owner))
        switchover = rolling.remoting_switchover(
            owner, timeout, controller_builder.addresses(owner, spec).split(";")
        )
    workloads = rolling.settle_on_delete(workloads, states)
    policy = rollout.Policy(ctx.settings.rollout_stall_seconds, ctx.settings.rollout_max_lag_bytes)
    runtime_info = rolling.remoting_runtime_info(addr, timeout)

    port_of = _port_of(spec)

    async def fetch_sync(groups: Sequence[rollout.GroupState]) -> list[rollout.GroupState]:
        return await rolling.with_sync(
            owner, groups, runtime_info, domain, policy.max_lag_bytes, port_of
        )

    restart = rolling.restart_requested(body)
    outcome = await rolling.roll(
        ctx.kube,
        owner,
        states,
        previous.rollout,
        restart,
        fetch_sync,
        policy,
        result.events,
        datetime.datetime.now(datetime.UTC),
        switchover,
    )
    if outcome.remove_restart_annotation:
        await ctx.kube.patch_annotations(
            models.API_VERSION,
            "Broker",
            owner.namespace,
            owner.name,
            {rolling.RESTART_ANNOTATION: None},
        )
        result.events.append(("Normal", "RollingRestartDone", "every broker pod was restarted"))
    return outcome, workloads, states


async def push_namesrv(
    ctx: Context,
    owner: Owner,
    spec: models.BrokerSpec,
    previous: models.BrokerStatus,
    states: Sequence[rollout.GroupState],
    addr: str,
    result: Result,
) -> str | None:
    """A changed namesrvAddr pushed to the ready broker pods; a note while some could not be."""
    if not previous.name_server_addr or previous.name_server_addr == addr:
        return None
    ready = {p.name for g in states for p in g.pods if p.ready}
    failed = await namesrv_push.push_namesrv_addr(
        owner,
        spec.groups,
        spec.replicas_per_group,
        ready,
        addr,
        namesrv_push.remoting_config_update(addr, ctx.settings.admin_timeout_seconds),
        ctx.settings.cluster_domain,
        _port_of(spec),
    )
    if failed:
        return "namesrvAddr not yet updated on " + "; ".join(failed[:3])
    result.events.append(
        ("Normal", "NameServersUpdated", f"namesrvAddr={addr} set on running brokers")
    )
    return None


def _port_of(spec: models.BrokerSpec) -> PortOf:
    # callers pass the pod ordinal; the ports follow the brokerId, ordinal + 1 in controller
    # mode (else the roll asked pod 0 on the port of brokerId 0: "master not reachable")
    shift = 1 if controller_builder.enabled(spec) else 0

    def port_of(group: int, ordinal: int) -> int:
        return spec.pod_ports(group, ordinal + shift)[0]

    return port_of


def initial_synced_groups(previous: models.BrokerStatus, groups: int) -> list[int]:
    """Groups considered to hold the cluster's topics.

    On the very first reconcile every group is new and there are no topics to copy; afterwards a
    group counts only once topics were copied to it (kept in status.topicSyncedGroups).
    """
    if previous.observed_generation is None and not previous.topic_synced_groups:
        return list(range(groups))
    return sorted(set(previous.topic_synced_groups))


async def sync_topics(
    ctx: Context,
    owner: Owner,
    spec: models.BrokerSpec,
    workloads: list[WorkloadObservation],
    synced: list[int],
    result: Result,
    master_of: Mapping[int, int] | None = None,
) -> tuple[list[int], str | None]:
    """Copy topics to every new group whose master is ready; returns (synced groups, pending note).
    ``master_of``: group -> the elected master's pod ordinal (spec.failover controller), else 0."""
    masters = master_of or {}
    ready_master = {i: w.master_ready is True for i, w in enumerate(workloads)}
    sources = [g for g in synced if g < spec.groups and ready_master.get(g)]
    pending = [g for g in range(spec.groups) if g not in synced]
    domain = ctx.settings.cluster_domain
    cluster = broker_builder.cluster_name(owner, spec)
    all_brokers = [names.broker_name(owner.name, g) for g in range(spec.groups)]
    notes = []
    for group in pending:
        if not ready_master.get(group):
            notes.append(f"{names.broker_name(owner.name, group)}: waiting for its master")
            continue
        if not sources and synced:
            notes.append(f"{names.broker_name(owner.name, group)}: no ready master to copy from")
            continue
        try:
            created = await broker_admin.copy_topics(
                ctx.admin,
                [broker_admin_address(owner, spec, g, domain, masters.get(g, 0)) for g in sources],
                broker_admin_address(owner, spec, group, domain, masters.get(group, 0)),
                cluster,
                all_brokers,
            )
        except Exception as error:  # any admin failure leaves the group pending, retried later
            notes.append(f"{names.broker_name(owner.name, group)}: topic copy failed: {error}")
            continue
        synced = sorted({*synced, group})
        result.events.append(
            (
                "Normal",
                "TopicsCopied",
                f"created {len(created)} topics on {names.broker_name(owner.name, group)}",
            )
        )
    return synced, ("copying topics to new groups: " + "; ".join(notes)) if notes else None


async def remove_audit(ctx: Context, owner: Owner, result: Result) -> None:
    """spec.audit was removed: stop the schedule (the claim with the history stays until the
    Broker is deleted, so re-enabling continues the same history)."""
    name = audit_builder.audit_name(owner.name)
    if await ctx.kube.get(ctx.versions.cronjob, "CronJob", owner.namespace, name) is None:
        return
    # Background: the garbage collector removes the CronJob's Jobs and their pods as well.
    if await ctx.kube.delete(
        ctx.versions.cronjob, "CronJob", owner.namespace, name, propagation="Background"
    ):
        result.events.append(("Normal", "AuditDisabled", f"deleted CronJob {name}"))


async def remove_unwanted_proxy(
    ctx: Context, owner: Owner, spec: models.BrokerSpec, result: Result
) -> None:
    """The proxy's objects once spec.proxy is removed (its PodDisruptionBudget below 2 replicas)."""
    name = proxy_builder.proxy_name(owner.name)
    doomed: list[tuple[str, str]] = []
    if spec.proxy is None:
        doomed += proxy_builder.KINDS
    if spec.proxy is None or spec.proxy.replicas < 2:
        doomed.append((ctx.versions.pdb, "PodDisruptionBudget"))
    for api_version, kind in doomed:
        if await ctx.kube.delete(api_version, kind, owner.namespace, name):
            result.events.append(("Normal", "Deleted", f"deleted {kind} {name}"))


@dataclass(frozen=True)
class ProxyObservation:
    """The proxy Deployment as the pass found it: status.proxy, ProxyReady and its message."""

    entry: dict[str, Any]
    ready: bool
    message: str

    @property
    def pending(self) -> str | None:
        """What keeps the Broker from Ready (upstream-like: the 5.x endpoint is part of it)."""
        return None if self.ready else f"proxy: {self.message}"


async def observe_proxy(
    ctx: Context, owner: Owner, spec: models.BrokerSpec
) -> ProxyObservation | None:
    if spec.proxy is None:
        return None
    name = proxy_builder.proxy_name(owner.name)
    deploy = await ctx.kube.get("apps/v1", "Deployment", owner.namespace, name)
    svc = await ctx.kube.get("v1", "Service", owner.namespace, name)
    entry, ready, message = proxy_builder.status(
        owner, spec.proxy, ctx.settings.cluster_domain, deploy, svc
    )
    return ProxyObservation(entry, ready, message)


def record_proxy(
    builder: StatusBuilder[models.BrokerStatus], proxy: ProxyObservation | None
) -> None:
    """status.proxy and the ProxyReady condition (after :meth:`StatusBuilder.observe`)."""
    if proxy is None:
        builder.status.proxy = None
        return
    builder.status.proxy = models.ProxyStatus.model_validate(proxy.entry)
    builder.condition(
        PROXY_READY,
        proxy.ready,
        "ProxyPodsReady" if proxy.ready else "ProxyPodsNotReady",
        proxy.message,
    )


async def remove_stale_external_services(
    ctx: Context, owner: Owner, spec: models.BrokerSpec, result: Result
) -> None:
    """NodePort Services of pods that no longer exist or no longer use NodePort access."""
    wanted = {svc["metadata"]["name"] for svc in broker_builder.node_port_services(owner, spec)}
    await _remove_unwanted(
        ctx,
        owner,
        "v1",
        "Service",
        wanted,
        result,
        only=lambda n: n.endswith(names.EXTERNAL_SUFFIX),
    )


async def remove_stale_network_policies(
    ctx: Context, owner: Owner, spec: models.BrokerSpec, result: Result
) -> None:
    """NetworkPolicies of removed groups, or all of them once spec.networkPolicy is off."""
    wanted = {p["metadata"]["name"] for p in netpol.desired(owner, spec)}
    await _remove_unwanted(ctx, owner, netpol.API_VERSION, "NetworkPolicy", wanted, result)


async def _remove_unwanted(
    ctx: Context,
    owner: Owner,
    api_version: str,
    kind: str,
    wanted: set[str],
    result: Result,
    only: Callable[[str], bool] = lambda _: True,
) -> None:
    """Delete the Broker's children of one kind that ``only`` selects and the spec no longer
    wants."""
    selector = _selector(names.selector_labels(owner, names.COMPONENT_BROKER))
    for obj in await ctx.kube.list(api_version, kind, owner.namespace, selector):
        name = obj["metadata"]["name"]
        if (
            only(name)
            and name not in wanted
            and await ctx.kube.delete(api_version, kind, owner.namespace, name)
        ):
            result.events.append(("Normal", "Deleted", f"deleted {kind} {name}"))


async def delete_removed_claims(
    ctx: Context, owner: Owner, spec: models.BrokerSpec, result: Result
) -> None:
    """Opt-in: delete the store claims of slaves removed by lowering replicasPerGroup."""
    selector = _selector(names.selector_labels(owner, names.COMPONENT_BROKER))
    claims = await ctx.kube.list("v1", "PersistentVolumeClaim", owner.namespace, selector)
    pods = await ctx.kube.list("v1", "Pod", owner.namespace, selector)
    doomed = claims_to_delete(
        owner.name,
        [c["metadata"]["name"] for c in claims],
        [p["metadata"]["name"] for p in pods],
        spec.groups,
        spec.replicas_per_group,
    )
    for claim in doomed:
        if await ctx.kube.delete("v1", "PersistentVolumeClaim", owner.namespace, claim):
            result.events.append(
                ("Normal", "ClaimDeleted", f"deleted PersistentVolumeClaim {claim} (scale-down)")
            )


async def group_masters(kube: k8s.Kube, owner: Owner) -> list[dict[str, Any]]:
    """Each group's master and epoch from the controller's state ConfigMap ([] until written)."""
    try:
        state = await kube.get(
            "v1", "ConfigMap", owner.namespace, names.controller_state_configmap(owner.name)
        )
    except k8s.ApiError:
        return []
    return controller_builder.group_masters((state or {}).get("data"))


def broker_admin_address(
    owner: Owner, spec: models.BrokerSpec, group: int, domain: str, ordinal: int = 0
) -> str:
    return broker_builder.pod_address(owner, spec, group, ordinal, domain)


def master_ordinals(owner: Owner, masters: Sequence[Mapping[str, Any]]) -> dict[int, int]:
    """group -> pod ordinal of its elected master (replica id - 1), for groups that have one."""
    out = {}
    for m in masters:
        group = names.group_of_statefulset(owner.name, str(m.get("brokerName", "")))
        if group is not None and m.get("masterBrokerId") is not None:
            out[group] = int(m["masterBrokerId"]) - 1
    return out


@dataclass
class Applied:
    """How far the apply steps of a Broker pass got."""

    # the spec the rest of the pass works with (a refused spec.failover change: the running mode)
    spec: models.BrokerSpec
    # namesrvAddr of the brokers; None when the NameServer could not be resolved
    addr: str | None
    secured: security_secrets.SecurityOutcome
    failure: Failure | None = None
    # status.listeners, once every child applied
    listeners: list[dict[str, Any]] | None = None

    @property
    def lifecycle_addr(self) -> str | None:
        """namesrvAddr when every child applied, so the lifecycle steps (drain, roll, pushes) may
        act; else None."""
        return self.addr if self.failure is None else None


async def apply_broker(
    ctx: Context,
    body: Mapping[str, Any],
    owner: Owner,
    spec: models.BrokerSpec,
    previous: models.BrokerStatus,
    generation: int,
    result: Result,
) -> Applied:
    """Resolve the NameServer, check the spec against the cluster, apply the children, remove the
    stale ones; the first step that fails ends the sequence."""
    security_session.use(None)  # set below for this cluster once its Secrets are read
    addr = await namesrv_addr_of(ctx, owner, spec)
    if isinstance(addr, Failure):
        result.retry = ctx.settings.retry_delay_seconds
        return Applied(spec, None, security_secrets.SecurityOutcome(), addr)
    # spec.acl/spec.tls Secrets first: a missing one stops the pass before any pod exists
    secured = await security_secrets.ensure(
        ctx.kube, owner, names.COMPONENT_BROKER, spec, ctx.settings.cluster_domain, _utcnow()
    )
    result.events.extend(secured.events)
    security_session.use(security_session.for_cluster(spec, secured.account, secured.client_cert))
    if secured.failure is not None:
        return Applied(spec, addr, secured, secured.failure)
    conf = broker_builder.broker_conf(owner, spec, addr, group=0, broker_id=0)
    report = conf_check.check_broker(conf, list(spec.config))
    failure = _conf_failure(report, previous, generation, result) or port_conflict(
        ctx, body, host_ports.broker_ranges(spec)
    )
    if failure is not None:
        return Applied(spec, addr, secured, failure)
    groups = await existing_groups(ctx.kube, owner)
    deployed = await failover_mode.observe(ctx.kube, owner, groups)
    failure = failover_mode.refusal(deployed, spec.failover)
    if failure is not None:
        if deployed is not None:
            # refused: the rest of the pass observes the cluster as it runs
            spec = spec.model_copy(update={"failover": deployed})
        return Applied(spec, addr, secured, failure)
    failure = await storage_growth.grow(ctx.kube, owner, spec, groups, result.events)
    if failure is not None:
        return Applied(spec, addr, secured, failure)
    objects = controller_builder.desired(owner, spec)
    objects += broker_builder.desired(owner, spec, addr, ctx.versions.pdb)
    objects += audit_builder.desired(owner, spec, addr, ctx.versions.cronjob)
    objects += netpol.desired(owner, spec)
    objects += proxy_builder.desired(owner, spec, addr, ctx.versions.pdb)
    failure = await apply_all(ctx.kube, objects, result)
    if failure is not None:
        return Applied(spec, addr, secured, failure)
    if spec.audit is None:
        await remove_audit(ctx, owner, result)
    await remove_stale_external_services(ctx, owner, spec, result)
    await remove_stale_network_policies(ctx, owner, spec, result)
    await remove_unwanted_proxy(ctx, owner, spec, result)
    if spec.storage.delete_claim_on_scale_down:
        await delete_removed_claims(ctx, owner, spec, result)
    advertised = await advertising.advertise_broker(
        ctx.kube, owner, spec, ctx.settings.cluster_domain
    )
    return Applied(spec, addr, secured, listeners=advertised)


async def drain_removed_groups(
    ctx: Context,
    owner: Owner,
    spec: models.BrokerSpec,
    previous: models.BrokerStatus,
    existing: dict[int, dict[str, Any]],
    addr: str,
    master_of: Mapping[int, int] | None,
    result: Result,
) -> tuple[list[dict[str, Any]], dict[int, dict[str, Any]]]:
    """Drain the groups above spec.groups (ferrymq_operator.lifecycle.draining); returns
    status.drains and the groups that exist after the drained ones were removed."""
    extra = [g for g in existing if g >= spec.groups]
    drains = await draining.drain_groups(
        ctx.kube,
        owner,
        extra,
        previous.drains,
        ctx.drain_admin or drain.RemotingDrainAdmin(ctx.settings.admin_timeout_seconds),
        addr,
        ctx.settings.cluster_domain,
        spec.storage.delete_claim_on_scale_down,
        result.events,
        now(),
        _port_of(spec),
        master_of,
    )
    if len(drains) != len(extra):
        existing = await existing_groups(ctx.kube, owner)
    return drains, existing


async def reconcile_broker(ctx: Context, body: Mapping[str, Any]) -> Result:
    """Parse, apply, then (when everything applied) drain, roll and push; observe; report.
    Observation and the status come whatever the apply steps reached."""
    owner, builder, result = begin(body, models.BrokerStatus)
    previous, generation = builder.previous, builder.generation
    if _paused(body, builder, result):
        return result
    try:
        spec = models.parse_broker_spec(body.get("spec") or {})
        owner.check_name()
    except ValueError as error:
        return refused(builder, Failure("InvalidSpec", str(error)), result)

    applied = await apply_broker(ctx, body, owner, spec, previous, generation, result)
    spec = applied.spec
    existing = await existing_groups(ctx.kube, owner)
    masters = await group_masters(ctx.kube, owner) if controller_builder.enabled(spec) else None
    master_of = master_ordinals(owner, masters) if masters is not None else None
    drains: list[dict[str, Any]] = []
    addr = applied.lifecycle_addr
    if addr is not None:
        drains, existing = await drain_removed_groups(
            ctx, owner, spec, previous, existing, addr, master_of, result
        )
    workloads = await observe_broker(ctx.kube, owner, spec, existing, master_of)
    outcome: rolling.RolloutOutcome | None = None
    namesrv_note: str | None = None
    if addr is not None:
        outcome, workloads, states = await roll_pods(
            ctx, owner, spec, body, previous, existing, workloads, addr, result
        )
        namesrv_note = await push_namesrv(ctx, owner, spec, previous, states, addr, result)
    synced, pending = await sync_topics(
        ctx,
        owner,
        spec,
        workloads,
        initial_synced_groups(previous, spec.groups),
        result,
        master_of,
    )
    proxy = await observe_proxy(ctx, owner, spec)
    notes = [
        n
        for n in (
            pending,
            draining.drain_pending(drains),
            namesrv_note,
            proxy.pending if proxy is not None else None,
        )
        if n
    ]
    pending = "; ".join(notes) if notes else None

    builder.observe(workloads, applied.failure, pending=pending)
    builder.status.topic_synced_groups = synced
    result.events += security_secrets.decorate_status(builder, applied.secured, spec, _utcnow())
    builder.status.drains = [models.DrainStatus.model_validate(d) for d in drains]
    record_proxy(builder, proxy)
    if masters is not None:
        builder.status.group_masters = [models.GroupMaster.model_validate(m) for m in masters]
        verdict = sync_state.replicas_in_sync(masters, spec.replicas_per_group)
        if verdict is not None:
            builder.condition(
                sync_state.REPLICAS_IN_SYNC, verdict.in_sync, verdict.reason, verdict.message
            )
    if applied.listeners is not None:
        builder.status.listeners = [
            ListenerStatus.model_validate(entry) for entry in applied.listeners
        ]
    if applied.addr is not None:
        builder.status.name_server_addr = applied.addr
        if namesrv_note is not None and previous.name_server_addr:
            builder.status.name_server_addr = previous.name_server_addr  # pushed again next pass
    if outcome is not None:
        builder.status.rollout = (
            None if outcome.status is None else models.RolloutStatus.model_validate(outcome.status)
        )
        builder.rolling(outcome.decision)
        if not isinstance(outcome.decision, rollout.Done) and result.retry is None:
            result.retry = ctx.settings.retry_delay_seconds
    if pending is not None and result.retry is None:
        result.retry = ctx.settings.retry_delay_seconds
    return finish(builder, applied.failure, result)


def refused(builder: StatusBuilder[Any], failure: Failure, result: Result) -> Result:
    """The spec cannot be parsed: say what to fix, keep pod facts unknown."""
    builder.observe([], failure)
    return finish(builder, failure, result)


def finish(builder: StatusBuilder[Any], failure: Failure | None, result: Result) -> Result:
    """The status patch, the failure and the transition events of one pass."""
    result.status, result.failure = builder.patch(), failure
    result.events.extend(_transition_events(builder.previous, result.status))
    return result
