"""``spec.failover`` of a Broker that already runs: its brokers keep the mode they were made with.

Between ``none`` (brokerId 0 is the fixed master, slaves 1..n) and ``controller`` (every pod is a
replica with id ordinal + 1 and the controller elects the master) every pod's brokerId, role and
replication handshake differ, and so does what the NameServer routes to. A pod-by-pod roll would
leave a group half in each mode, with two masters or none, so the operator refuses the change:
condition ``Ready=False`` reason ``FailoverModeChangeUnsupported``, and nothing is applied until
spec.failover is set back (operator/README.md says how to migrate with a second Broker).

The mode in effect is read from the API each pass (the group ConfigMaps the pods load), never
remembered by the operator.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal

import javaproperties

from ferrymq_operator import k8s
from ferrymq_operator.builders import names
from ferrymq_operator.builders.names import Owner
from ferrymq_operator.status import Failure

Mode = Literal["none", "controller"]
REASON = "FailoverModeChangeUnsupported"
# the broker.conf key the operator writes for spec.failover controller (builders/controller.py)
CONTROLLER_MODE_KEY = "enableControllerMode"


def mode_of_conf(conf_text: str) -> Mode:
    """The failover mode a broker.conf runs its broker in."""
    conf = javaproperties.loads(conf_text)
    return "controller" if conf.get(CONTROLLER_MODE_KEY, "").strip().lower() == "true" else "none"


def deployed_mode(
    group_confs: Iterable[str | None], brokers_exist: bool, controller_exists: bool
) -> Mode | None:
    """The mode the Broker's pods run in: that of the first group's broker.conf found; with
    broker StatefulSets but no conf left (a deleted ConfigMap), whether the controller
    StatefulSet exists; None when no broker was deployed yet (any mode may be chosen)."""
    for text in group_confs:
        if text is not None:
            return mode_of_conf(text)
    if not brokers_exist:
        return None
    return "controller" if controller_exists else "none"


def refusal(deployed: Mode | None, wanted: str) -> Failure | None:
    """The failure that stops the pass when spec.failover differs from the deployed mode."""
    if deployed is None or deployed == wanted:
        return None
    return Failure(
        REASON,
        f"spec.failover is {wanted!r} but this Broker's pods run with failover {deployed!r}; "
        "the mode of a running Broker cannot change (brokerIds, roles and replication differ "
        f"between the modes), so nothing was changed: set spec.failover back to {deployed!r}, "
        "or migrate to a new Broker with the other mode (see the operator README)",
    )


async def observe(kube: k8s.Kube, owner: Owner, groups: Iterable[int]) -> Mode | None:
    """The deployed mode of ``owner``, whose broker StatefulSets exist for ``groups``."""
    existing = sorted(groups)
    confs: list[str | None] = []
    for group in existing:
        cm = await kube.get(
            "v1", "ConfigMap", owner.namespace, names.broker_configmap(owner.name, group)
        )
        data: Mapping[str, Any] = (cm or {}).get("data") or {}
        text = data.get(names.broker_conf_file(0))
        confs.append(text if isinstance(text, str) else None)
        if confs[-1] is not None:
            break
    controller = None
    if existing and all(c is None for c in confs):
        controller = await kube.get(
            "apps/v1", "StatefulSet", owner.namespace, names.controller(owner.name)
        )
    return deployed_mode(confs, bool(existing), controller is not None)
