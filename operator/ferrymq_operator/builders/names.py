"""Object names, labels, owner references and DNS addresses of the children of a custom resource.

One place decides every name so builders, the reconciler and the tests agree:

* NameServer ``n``: StatefulSet/Service/PDB ``n-namesrv``, headless Service ``n-namesrv-hs``,
  ConfigMap ``n-namesrv-config``; pods ``n-namesrv-<i>``.
* Broker ``b``: per group ``g`` a StatefulSet/PDB ``b-broker-<g>`` (also the upstream ``brokerName``),
  ConfigMap ``b-broker-<g>-config``; one headless Service ``b-broker-hs``; pods ``b-broker-<g>-<id>``
  where the pod ordinal is the ``brokerId`` (0 = master).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ferrymq_operator import models

# Defaults of spec.listenPort / spec.port (the models own them).
BROKER_PORT = models.DEFAULT_LISTEN_PORT
NAMESRV_PORT = models.DEFAULT_NAMESRV_PORT

LABEL_NAME = "app.kubernetes.io/name"
LABEL_INSTANCE = "app.kubernetes.io/instance"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_PART_OF = "app.kubernetes.io/part-of"
LABEL_GROUP = "ferrymq.io/broker-group"
LABEL_GROUP_INDEX = "ferrymq.io/group-index"
ANNOTATION_CONFIG_HASH = "ferrymq.io/config-hash"
# Set by the StatefulSet controller on every pod it creates.
LABEL_POD_NAME = "statefulset.kubernetes.io/pod-name"

APP_NAME = "ferrymq"
MANAGED_BY = "ferrymq-operator"
COMPONENT_NAMESRV = "namesrv"
COMPONENT_BROKER = "broker"

# A StatefulSet pod carries the label controller-revision-hash=<sts name>-<10 chars>, at most 63
# characters, so the longest StatefulSet name is 52; "-broker-<g>" takes up to 10 of them.
MAX_CR_NAME = 40


@dataclass(frozen=True)
class Owner:
    """The custom resource that owns the children (for ownerReferences and labels)."""

    api_version: str
    kind: str
    name: str
    namespace: str
    uid: str

    def check_name(self) -> None:
        """Refuse names whose derived pod/StatefulSet names would exceed Kubernetes limits."""
        if len(self.name) > MAX_CR_NAME:
            raise ValueError(
                f"metadata.name {self.name!r} has {len(self.name)} characters; ferrymq needs at most "
                f"{MAX_CR_NAME} so that StatefulSet and pod names stay within 63; use a shorter name"
            )


def owner_reference(owner: Owner) -> dict[str, Any]:
    """Controller reference: the garbage collector deletes the child with its owner."""
    return {
        "apiVersion": owner.api_version,
        "kind": owner.kind,
        "name": owner.name,
        "uid": owner.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def selector_labels(owner: Owner, component: str) -> dict[str, str]:
    """Labels that select the pods of one custom resource (stable: never add keys here)."""
    return {LABEL_NAME: APP_NAME, LABEL_INSTANCE: owner.name, LABEL_COMPONENT: component}


def common_labels(owner: Owner, component: str) -> dict[str, str]:
    return {
        **selector_labels(owner, component),
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_PART_OF: APP_NAME,
    }


def metadata(
    owner: Owner, name: str, labels: dict[str, str], annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": owner.namespace,
        "labels": dict(labels),
        "ownerReferences": [owner_reference(owner)],
    }
    if annotations:
        meta["annotations"] = dict(annotations)
    return meta


# --- NameServer ---


def namesrv_statefulset(cr_name: str) -> str:
    return f"{cr_name}-namesrv"


def namesrv_service(cr_name: str) -> str:
    return f"{cr_name}-namesrv"


def namesrv_headless_service(cr_name: str) -> str:
    return f"{cr_name}-namesrv-hs"


def namesrv_configmap(cr_name: str) -> str:
    return f"{cr_name}-namesrv-config"


def namesrv_pdb(cr_name: str) -> str:
    return f"{cr_name}-namesrv"


def namesrv_addresses(
    cr_name: str,
    namespace: str,
    replicas: int,
    cluster_domain: str,
    port: int = NAMESRV_PORT,
    per_pod: bool = False,
) -> str:
    """``namesrvAddr`` listing every NameServer pod by its stable DNS name and its own port
    (``port + ordinal`` with ``per_pod``, i.e. on the host network).

    A broker registers with each address in the list, so the load-balanced client Service would be
    wrong here (a broker would reach one random NameServer per heartbeat); pod IPs would go stale.
    """
    sts = namesrv_statefulset(cr_name)
    hs = namesrv_headless_service(cr_name)
    return ";".join(
        f"{sts}-{i}.{hs}.{namespace}.svc.{cluster_domain}:{port + i if per_pod else port}"
        for i in range(replicas)
    )


# --- Broker ---


def broker_name(cr_name: str, group: int) -> str:
    """Upstream ``brokerName`` of a group; also its StatefulSet and PDB name."""
    return f"{cr_name}-broker-{group}"


def broker_statefulset(cr_name: str, group: int) -> str:
    return broker_name(cr_name, group)


def broker_pdb(cr_name: str, group: int) -> str:
    return broker_name(cr_name, group)


def broker_configmap(cr_name: str, group: int) -> str:
    return f"{broker_name(cr_name, group)}-config"


def broker_headless_service(cr_name: str) -> str:
    return f"{cr_name}-broker-hs"


def broker_pod(cr_name: str, group: int, broker_id: int) -> str:
    return f"{broker_statefulset(cr_name, group)}-{broker_id}"


EXTERNAL_SUFFIX = "-external"


def broker_external_service(cr_name: str, group: int, broker_id: int) -> str:
    """NodePort Service of one broker pod (externalAccess NodePort)."""
    return f"{broker_pod(cr_name, group, broker_id)}{EXTERNAL_SUFFIX}"


def broker_conf_file(broker_id: int) -> str:
    """ConfigMap key (and file name) of one pod's broker.conf, chosen by the pod ordinal."""
    return f"broker-{broker_id}.conf"


def broker_pod_address(
    cr_name: str, namespace: str, group: int, broker_id: int, domain: str, port: int = BROKER_PORT
) -> str:
    """``host:listenPort`` of one broker pod by DNS (used by the operator's admin calls)."""
    pod = broker_pod(cr_name, group, broker_id)
    return f"{pod}.{broker_headless_service(cr_name)}.{namespace}.svc.{domain}:{port}"


def group_of_statefulset(cr_name: str, sts_name: str) -> int | None:
    """Group index encoded in a broker StatefulSet name, or None if it is not one of ours."""
    prefix = f"{cr_name}-broker-"
    suffix = sts_name.removeprefix(prefix)
    if suffix == sts_name or not suffix.isdigit() or str(int(suffix)) != suffix:
        return None
    return int(suffix)


# --- Controller (spec.failover: controller) ---

COMPONENT_CONTROLLER = "controller"
CONTROLLER_PORT = 9878  # upstream controller listenPort default


def controller(cr_name: str) -> str:
    """StatefulSet, headless Service, ServiceAccount, Role, RoleBinding and Lease of the
    controller of Broker ``cr_name``; pods ``<cr>-controller-<i>``."""
    return f"{cr_name}-controller"


def controller_configmap(cr_name: str) -> str:
    return f"{cr_name}-controller-config"


def controller_state_configmap(cr_name: str) -> str:
    """Where the controller keeps every group's master, epoch and SyncStateSet (it writes it)."""
    return f"{cr_name}-controller-state"


def controller_addresses(
    cr_name: str, namespace: str, replicas: int, ports: Sequence[int] | None = None
) -> str:
    """``controllerAddr``: every controller pod by its stable DNS name (``<pod>.<svc>.<ns>.svc``,
    completed by the pod's DNS search path, so it needs no cluster domain). Only the Lease holder
    answers; a broker moves on to the next address when told CONTROLLER_NOT_LEADER. ``ports``:
    each pod's own port (host network), else every pod's is CONTROLLER_PORT."""
    sts = controller(cr_name)
    port_of = list(ports) if ports is not None else [CONTROLLER_PORT] * replicas
    return ";".join(f"{sts}-{i}.{sts}.{namespace}.svc:{port_of[i]}" for i in range(replicas))
