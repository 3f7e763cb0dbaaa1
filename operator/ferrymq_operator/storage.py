"""Growing ``spec.storage.size`` (pure decision; carried out by lifecycle.storage_growth).

A StatefulSet's volumeClaimTemplates cannot change, and its claims are not resized with it. As
Strimzi does: every existing claim smaller than the new size is patched to it (the CSI driver grows
the volume, online where it can), then the StatefulSet object is deleted with ``propagationPolicy:
Orphan`` (its pods keep running, untouched) and applied again with the new template, which adopts
the same pods. Only if every claim's StorageClass has ``allowVolumeExpansion: true``; otherwise
nothing changes and the Broker says which class refuses. Claims never shrink.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ferrymq_operator.models import parse_quantity

SHRINK_REASON = "StorageShrinkUnsupported"
RESIZE_REASON = "StorageResizeUnsupported"


@dataclass(frozen=True)
class Claim:
    name: str
    size: str
    storage_class: str | None


@dataclass(frozen=True)
class StoragePlan:
    """What to do; ``template_size`` is what the StatefulSets' claim templates must carry."""

    template_size: str
    expand: list[str] = field(default_factory=list)
    recreate: list[str] = field(default_factory=list)
    # (reason, message) when the new size cannot be had; then nothing is changed
    refused: tuple[str, str] | None = None


def claim_of(pvc: Mapping[str, Any]) -> Claim:
    spec = pvc.get("spec") or {}
    return Claim(
        name=pvc["metadata"]["name"],
        size=str(((spec.get("resources") or {}).get("requests") or {}).get("storage", "0")),
        storage_class=spec.get("storageClassName"),
    )


def template_size(sts: Mapping[str, Any]) -> str | None:
    """Size in a StatefulSet's first claim template (None: it has none, e.g. ephemeral)."""
    templates = (sts.get("spec") or {}).get("volumeClaimTemplates") or []
    if not templates:
        return None
    requests = ((templates[0].get("spec") or {}).get("resources") or {}).get("requests") or {}
    size = requests.get("storage")
    return str(size) if size else None


def plan(
    desired: str,
    templates: Mapping[str, str],
    claims: Sequence[Claim],
    expandable: Mapping[str, bool],
) -> StoragePlan:
    """``templates``: StatefulSet name -> its claim template size (existing ones only);
    ``expandable``: StorageClass name -> allowVolumeExpansion (a class absent there, or a claim
    without a class, cannot be expanded as far as the operator can tell)."""
    want = parse_quantity(desired)
    largest = max((parse_quantity(s) for s in templates.values()), default=want)
    current = next((s for s in templates.values() if parse_quantity(s) == largest), desired)
    if want < largest:
        return StoragePlan(
            current,
            refused=(
                SHRINK_REASON,
                f"spec.storage.size {desired} is smaller than the claims' {current}; claims "
                f"cannot shrink: set it back to {current} or more",
            ),
        )
    small = [c for c in claims if parse_quantity(c.size) < want]
    stuck = sorted({c.storage_class or "<none>" for c in small if not _can_grow(c, expandable)})
    if stuck:
        return StoragePlan(
            current,
            refused=(
                RESIZE_REASON,
                f"spec.storage.size {desired}: StorageClass {', '.join(stuck)} does not allow "
                f"volume expansion (allowVolumeExpansion), so the claims stay at {current} and "
                f"nothing was changed; set the size back to {current}, or use a class that can "
                f"expand",
            ),
        )
    recreate = sorted(name for name, size in templates.items() if parse_quantity(size) != want)
    return StoragePlan(desired, expand=sorted(c.name for c in small), recreate=recreate)


def _can_grow(claim: Claim, expandable: Mapping[str, bool]) -> bool:
    return claim.storage_class is not None and expandable.get(claim.storage_class, False)
