"""Broker spec with ``failover: controller`` -> the controller that elects each group's master.

Objects: ConfigMap (controller.conf), headless Service, StatefulSet of 2 pods, ServiceAccount and a
Role/RoleBinding that let it read and write exactly its Lease and its state ConfigMap. A
StatefulSet, not a Deployment: brokers list every controller pod in ``controllerAddr`` by its
stable DNS name (as upstream lists every controller); only the Lease holder answers, the other is a
warm standby that takes over when the Lease expires. The controller's state lives in the API
(``controllerStoreType=kubernetes``), so the pods need no volume.
"""

from __future__ import annotations

from typing import Any

import orjson
from ferrymq.controller.state import STATE_FILE, GroupState

from ferrymq_operator.builders import names, pod
from ferrymq_operator.builders.names import Owner
from ferrymq_operator.models import BrokerSpec

CONF_FILE = "controller.conf"
REPLICAS = 2
LEASE_DURATION_SECONDS = 10


def enabled(spec: BrokerSpec) -> bool:
    return spec.failover == "controller"


def controller_conf(owner: Owner) -> dict[str, str]:
    """controller.conf (ferrymq.controller.config keys)."""
    return {
        "listenPort": str(names.CONTROLLER_PORT),
        "controllerStoreType": "kubernetes",
        "controllerNamespace": owner.namespace,
        "controllerStateConfigMap": names.controller_state_configmap(owner.name),
        "controllerLeaseName": names.controller(owner.name),
        "controllerLeaseDurationSeconds": str(LEASE_DURATION_SECONDS),
    }


def broker_conf_keys(owner: Owner) -> dict[str, str]:
    """What a controller-mode broker adds to its broker.conf."""
    return {
        "enableControllerMode": "true",
        "controllerAddr": names.controller_addresses(owner.name, owner.namespace, REPLICAS),
    }


def _labels(owner: Owner) -> dict[str, str]:
    return names.common_labels(owner, names.COMPONENT_CONTROLLER)


def configmap(owner: Owner) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": names.metadata(owner, names.controller_configmap(owner.name), _labels(owner)),
        "data": {CONF_FILE: pod.properties_text(controller_conf(owner))},
    }


def service(owner: Owner) -> dict[str, Any]:
    # headless publishes not-ready pods too: the standby must be resolvable before it leads
    return pod.service(
        names.metadata(owner, names.controller(owner.name), _labels(owner)),
        names.selector_labels(owner, names.COMPONENT_CONTROLLER),
        [pod.service_port("controller", names.CONTROLLER_PORT)],
        headless=True,
    )


def service_account(owner: Owner) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": names.metadata(owner, names.controller(owner.name), _labels(owner)),
    }


def role(owner: Owner) -> dict[str, Any]:
    """Its own Lease and state ConfigMap only (create cannot be limited by name in RBAC)."""
    lease = names.controller(owner.name)
    state = names.controller_state_configmap(owner.name)
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": names.metadata(owner, lease, _labels(owner)),
        "rules": [
            {
                "apiGroups": ["coordination.k8s.io"],
                "resources": ["leases"],
                "resourceNames": [lease],
                "verbs": ["get", "update"],
            },
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
            {
                "apiGroups": [""],
                "resources": ["configmaps"],
                "resourceNames": [state],
                "verbs": ["get", "update"],
            },
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]},
        ],
    }


def role_binding(owner: Owner) -> dict[str, Any]:
    name = names.controller(owner.name)
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": names.metadata(owner, name, _labels(owner)),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": owner.namespace}],
    }


def statefulset(owner: Owner, spec: BrokerSpec) -> dict[str, Any]:
    selector = names.selector_labels(owner, names.COMPONENT_CONTROLLER)
    labels = _labels(owner)
    conf_hash = pod.config_hash(configmap(owner)["data"])
    container: dict[str, Any] = {
        "name": "controller",
        "image": spec.image,
        "imagePullPolicy": spec.image_pull_policy,
        "args": ["controller", "-c", f"{pod.CONFIG_DIR}/{CONF_FILE}"],
        "ports": [
            {"name": "controller", "containerPort": names.CONTROLLER_PORT, "protocol": "TCP"}
        ],
        "env": pod.downward_env(),
        "livenessProbe": pod.tcp_probe(str(names.CONTROLLER_PORT), period=20, failures=6),
        "securityContext": pod.container_security_context(),
        "volumeMounts": [
            {"name": "config", "mountPath": pod.CONFIG_DIR, "readOnly": True},
            {"name": "home", "mountPath": pod.HOME},
            {"name": "tmp", "mountPath": pod.TMP_DIR},
        ],
    }
    pod_spec: dict[str, Any] = {
        "serviceAccountName": names.controller(owner.name),
        "securityContext": pod.pod_security_context(),
        "terminationGracePeriodSeconds": 15,
        "containers": [container],
        "volumes": [
            {"name": "config", "configMap": {"name": names.controller_configmap(owner.name)}},
            {"name": "home", "emptyDir": {}},
            {"name": "tmp", "emptyDir": {}},
        ],
        **pod.scheduling(spec, selector),
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": names.metadata(owner, names.controller(owner.name), labels),
        "spec": {
            "replicas": REPLICAS,
            "serviceName": names.controller(owner.name),
            "podManagementPolicy": "Parallel",
            "updateStrategy": {"type": "RollingUpdate"},
            "selector": {"matchLabels": selector},
            "template": pod.pod_template(labels, conf_hash, pod_spec),
        },
    }


def desired(owner: Owner, spec: BrokerSpec) -> list[dict[str, Any]]:
    """The controller's objects in apply order (RBAC and config before the pods); none unless
    ``spec.failover`` is ``controller``."""
    if not enabled(spec):
        return []
    return [
        service_account(owner),
        role(owner),
        role_binding(owner),
        configmap(owner),
        service(owner),
        statefulset(owner, spec),
    ]


def group_masters(data: dict[str, str] | None) -> list[dict[str, Any]]:
    """Broker status ``groupMasters`` from the ``data`` of the controller's state ConfigMap;
    [] when the controller has not written it yet or it is unreadable."""
    raw = (data or {}).get(STATE_FILE)
    if not raw:
        return []
    try:
        groups = [GroupState.from_json(g, 0) for g in orjson.loads(raw).get("groups", [])]
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
        return []
    return [
        {
            "brokerName": g.broker_name,
            "masterBrokerId": g.master_id,
            "masterAddress": g.replica_info().master_addr,
            "masterEpoch": g.master_epoch,
            "syncStateSet": sorted(g.sync_state_set),
        }
        for g in sorted(groups, key=lambda g: g.broker_name)
    ]
