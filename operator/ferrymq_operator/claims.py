"""Which PersistentVolumeClaims a slave scale-down leaves behind, and which may go (pure).

A StatefulSet never deletes the claims of removed pods (Kubernetes 1.20 has no retention policy),
so lowering ``replicasPerGroup`` leaves ``store-<group>-<id>`` claims holding a slave's copy of the
CommitLog. They are deleted only when the user opted in with ``storage.deleteClaimOnScaleDown``,
only for ordinals the spec no longer has (never a master, ordinal 0), and only once the pod is
gone, so a claim in use is never touched.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from ferrymq_operator.builders import broker as broker_builder
from ferrymq_operator.builders import names


def parse_claim(cr_name: str, claim: str) -> tuple[int, int] | None:
    """(group, brokerId) of a broker store claim of this Broker, else None."""
    prefix = f"{broker_builder.STORE_VOLUME}-{cr_name}-broker-"
    match = re.fullmatch(r"(0|[1-9][0-9]*)-(0|[1-9][0-9]*)", claim.removeprefix(prefix))
    if not claim.startswith(prefix) or match is None:
        return None
    return int(match.group(1)), int(match.group(2))


def claims_to_delete(
    cr_name: str,
    claims: Iterable[str],
    pods: Iterable[str],
    groups: int,
    replicas_per_group: int,
) -> list[str]:
    """Claims of slaves removed by a scale-down whose pods no longer exist, sorted."""
    live = set(pods)
    out = []
    for claim in claims:
        parsed = parse_claim(cr_name, claim)
        if parsed is None:
            continue
        group, broker_id = parsed
        if broker_id == 0 or broker_id < replicas_per_group or group >= groups:
            continue
        if names.broker_pod(cr_name, group, broker_id) in live:
            continue
        out.append(claim)
    return sorted(out)
