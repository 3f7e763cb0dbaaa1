"""Draining: the groups above spec.groups are drained (writes stopped, consumers caught up) and
only then removed (decisions and admin calls in ferrymq_operator.drain)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ferrymq_operator import drain, k8s, models
from ferrymq_operator.builders import names
from ferrymq_operator.builders.names import Owner
from ferrymq_operator.lifecycle.pods import Events, PortOf, pod_address


async def drain_groups(
    kube: k8s.Kube,
    owner: Owner,
    extra: Sequence[int],
    previous: Sequence[models.DrainStatus],
    admin: drain.DrainAdmin,
    namesrv_addr: str,
    domain: str,
    delete_claims: bool,
    events: Events,
    now: str,
    port_of: PortOf | None = None,
    master_of: Mapping[int, int] | None = None,
) -> list[dict[str, Any]]:
    """Drain each group above spec.groups; remove the ones that are drained. Returns status.drains
    for the groups still there. ``master_of``: group -> its elected master's ordinal
    (spec.failover controller); else ordinal 0."""
    masters = master_of or {}
    before = {d.group: d for d in previous}
    out = []
    # Drains called off by raising spec.groups again: the group takes writes again.
    for off in previous:
        if off.group in extra:
            continue
        broker = names.broker_name(owner.name, off.group)
        addr = pod_address(owner, off.group, masters.get(off.group, 0), domain, port_of)
        try:
            await admin.resume_writes(namesrv_addr, broker, addr)
        except drain.DrainUnavailable as error:
            out.append(
                {
                    "group": off.group,
                    "reason": "ResumeWritesPending",
                    "message": f"{broker}: scale-in called off; {error}; retrying",
                    "since": off.since or now,
                }
            )
            continue
        events.append(
            ("Normal", "DrainCancelled", f"{broker}: scale-in called off, writes back on")
        )
    for group in sorted(extra):
        broker = names.broker_name(owner.name, group)
        addr = pod_address(owner, group, masters.get(group, 0), domain, port_of)
        old = before.get(group)
        since = old.since if old is not None and old.since else now
        if old is None:
            events.append(("Normal", "DrainStarted", f"{broker}: stopping writes before scale-in"))
        try:
            await admin.stop_writes(namesrv_addr, broker, addr)
            backlog = await admin.lags(namesrv_addr, addr)
            result = drain.assess(broker, backlog.groups, backlog.unread)
        except drain.DrainUnavailable as error:
            result = drain.Assessment(
                False,
                "DrainUnavailable",
                f"{broker}: {error}; the group is kept until its messages can be checked",
            )
        if result.drained:
            await remove_group(kube, owner, group, delete_claims, events)
            events.append(("Normal", "Drained", result.message))
            continue
        if old is None or (old.reason, old.message) != (result.reason, result.message):
            kind = "Warning" if result.reason in ("DrainBlocked", "DrainUnavailable") else "Normal"
            if old is None or old.reason != result.reason or kind == "Normal":
                events.append((kind, result.reason, result.message))
        out.append(
            {"group": group, "reason": result.reason, "message": result.message, "since": since}
        )
    return out


async def remove_group(
    kube: k8s.Kube, owner: Owner, group: int, delete_claims: bool, events: Events
) -> None:
    ns = owner.namespace
    sts = names.broker_statefulset(owner.name, group)
    if await kube.delete("apps/v1", "StatefulSet", ns, sts):
        events.append(("Normal", "GroupRemoved", f"deleted StatefulSet {sts} (drained)"))
    await kube.delete("v1", "ConfigMap", ns, names.broker_configmap(owner.name, group))
    for api_version in ("policy/v1", "policy/v1beta1"):
        try:
            await kube.delete(
                api_version, "PodDisruptionBudget", ns, names.broker_pdb(owner.name, group)
            )
            break
        except k8s.Rejected:
            continue  # this server does not serve that version
    if not delete_claims:
        return
    from ferrymq_operator.claims import parse_claim

    selector = ",".join(
        f"{k}={v}" for k, v in sorted(names.selector_labels(owner, names.COMPONENT_BROKER).items())
    )
    for claim in await kube.list("v1", "PersistentVolumeClaim", ns, selector):
        claim_name = claim["metadata"]["name"]
        parsed = parse_claim(owner.name, claim_name)
        if (
            parsed is not None
            and parsed[0] == group
            and await kube.delete("v1", "PersistentVolumeClaim", ns, claim_name)
        ):
            events.append(("Normal", "ClaimDeleted", f"deleted PersistentVolumeClaim {claim_name}"))


def drain_pending(drains: Sequence[Mapping[str, Any]]) -> str | None:
    if not drains:
        return None
    return "scale-in: " + "; ".join(str(d["message"]) for d in drains)
