"""Carry out a storage.size change (ferrymq_operator.storage): expand the claims, then delete the
StatefulSet objects with orphan propagation so the apply that follows recreates them with the new
claim template, adopting the running pods."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from ferrymq_operator import k8s, models, storage
from ferrymq_operator.builders import names
from ferrymq_operator.builders.names import Owner
from ferrymq_operator.lifecycle.pods import Events
from ferrymq_operator.status import Failure

ORPHAN_POLL_S = 0.25
ORPHAN_WAIT_POLLS = 120  # 30 s


async def _gone(kube: k8s.Kube, namespace: str, name: str) -> bool:
    """Wait (bounded) until the orphaning deletion finished: the garbage collector first takes
    the pods' ownerReferences, then removes the object; applying before that would update the
    object being deleted (and be refused: claim templates cannot change)."""
    for _ in range(ORPHAN_WAIT_POLLS):
        if await kube.get("apps/v1", "StatefulSet", namespace, name) is None:
            return True
        await asyncio.sleep(ORPHAN_POLL_S)
    return False


async def grow(
    kube: k8s.Kube,
    owner: Owner,
    spec: models.BrokerSpec,
    existing: Mapping[int, dict[str, Any]],
    events: Events,
) -> Failure | None:
    """Expand and recreate as ``storage.plan`` says; a Failure (nothing changed) when it refuses."""
    if spec.storage.type == "ephemeral" or not existing:
        return None
    templates = {
        sts["metadata"]["name"]: size
        for sts in existing.values()
        if (size := storage.template_size(sts)) is not None
    }
    if not templates or all(s == spec.storage.size for s in templates.values()):
        return None
    labels = names.selector_labels(owner, names.COMPONENT_BROKER)
    selector = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
    pvcs = await kube.list("v1", "PersistentVolumeClaim", owner.namespace, selector)
    claims = [storage.claim_of(p) for p in pvcs]
    expandable: dict[str, bool] = {}
    for cls in {c.storage_class for c in claims if c.storage_class}:
        found = await kube.get("storage.k8s.io/v1", "StorageClass", "", cls)
        expandable[cls] = bool((found or {}).get("allowVolumeExpansion"))
    decision = storage.plan(spec.storage.size, templates, claims, expandable)
    if decision.refused is not None:
        return Failure(*decision.refused)
    for claim in decision.expand:
        try:
            await kube.patch(
                "v1",
                "PersistentVolumeClaim",
                owner.namespace,
                claim,
                {"spec": {"resources": {"requests": {"storage": spec.storage.size}}}},
            )
        except k8s.Rejected as error:
            # e.g. a claim not yet bound to a volume (only bound claims may grow)
            return Failure("StorageResizeRejected", f"growing claim {claim}: {error}")
        events.append(("Normal", "ClaimExpanding", f"{claim}: requested {spec.storage.size}"))
    for sts in decision.recreate:
        # Orphan: the pods stay; the StatefulSet applied next adopts them (same selector).
        await kube.delete("apps/v1", "StatefulSet", owner.namespace, sts, propagation="Orphan")
        if not await _gone(kube, owner.namespace, sts):
            return Failure(
                "StorageResizePending",
                f"{sts}: the garbage collector has not yet released its pods; retrying",
            )
        events.append(
            (
                "Normal",
                "StatefulSetRecreated",
                f"{sts}: recreated for claim size {spec.storage.size} (pods kept)",
            )
        )
    return None
