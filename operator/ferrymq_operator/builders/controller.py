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

from ferrymq_operator.builders import names, pod, template
from ferrymq_operator.builders.names import Owner
from ferrymq_operator.models import BrokerSpec

CONF_FILE = "controller.conf"
REPLICAS = 2
# the container port's name, which the liveness probe refers to
CONTROLLER_PORT_NAME = "controller"
CONTROLLER_REQUESTS = {"cpu": "50m", "memory": "64Mi"}
LEASE_DURATION_SECONDS = 10


# Failover defaults (issue 34; a Broker's spec.config may override the broker keys). A killed
# master costs the heartbeat timeout, up to one scan interval, then the promotion and the
# clients' route refresh (about 1 s): 6 + 1 + 1 s, under the 10 s target (upstream's 10 s
# timeout and 5 s scan cost 11 to 14.5 s). The other side: a master whose heartbeats stall for
# 6 s (a saturated node, a long pause) is replaced although alive, a false election; its lease
# (min(timeout / 2, timeout - 2 x interval) = 3 s, three heartbeat intervals) ends first, so
# it never acknowledges alongside its successor. controller/README.md has the trade-off.
BROKER_HEARTBEAT_TIMEOUT_MS = 6000
BROKER_HEARTBEAT_INTERVAL_MS = 1000
SCAN_NOT_ACTIVE_BROKER_INTERVAL_MS = 1000


def broker_failover_defaults() -> dict[str, str]:
    """broker.conf defaults of a controller-mode replica (the user's spec.config wins)."""
    return {
        "controllerHeartBeatTimeoutMills": str(BROKER_HEARTBEAT_TIMEOUT_MS),
        "brokerHeartbeatInterval": str(BROKER_HEARTBEAT_INTERVAL_MS),
    }


# On the host network the controller pods share the node's ports with the brokers of the same
# Broker: pod k listens on listenPort - 5 + k, below the fast channel of the first broker pod
# (listenPort - 2; in controller mode broker pods start at listenPort + 10).
HOST_NETWORK_PORT_OFFSET = -5


def enabled(spec: BrokerSpec) -> bool:
    return spec.failover == "controller"


def controller_port(spec: BrokerSpec, ordinal: int) -> int:
    """The port controller pod ``ordinal`` listens on."""
    if not spec.host_network:
        return names.CONTROLLER_PORT
    return spec.listen_port + HOST_NETWORK_PORT_OFFSET + ordinal


def port_range(spec: BrokerSpec) -> tuple[int, int]:
    """The node ports the controller pods open with host networking (inclusive)."""
    return controller_port(spec, 0), controller_port(spec, REPLICAS - 1)


def addresses(owner: Owner, spec: BrokerSpec | None = None) -> str:
    """``controllerAddr`` of the Broker's pods (and the operator's switchover calls)."""
    ports = [controller_port(spec, i) for i in range(REPLICAS)] if spec is not None else None
    return names.controller_addresses(owner.name, owner.namespace, REPLICAS, ports)


def _port_expr(spec: BrokerSpec) -> str:
    """The pod's own port in a shell command (the ordinal ends POD_NAME)."""
    return f"$(({controller_port(spec, 0)} + {pod.SHELL_ORDINAL}))"


def controller_conf(owner: Owner) -> dict[str, str]:
    """controller.conf (ferrymq.controller.config keys)."""
    return {
        "listenPort": str(names.CONTROLLER_PORT),
        "controllerStoreType": "kubernetes",
        "controllerNamespace": owner.namespace,
        "controllerStateConfigMap": names.controller_state_configmap(owner.name),
        "controllerLeaseName": names.controller(owner.name),
        "controllerLeaseDurationSeconds": str(LEASE_DURATION_SECONDS),
        "scanNotActiveBrokerInterval": str(SCAN_NOT_ACTIVE_BROKER_INTERVAL_MS),
    }


def broker_conf_keys(owner: Owner, spec: BrokerSpec | None = None) -> dict[str, str]:
    """What a controller-mode broker adds to its broker.conf (``spec``: for host-network ports;
    without it the default port)."""
    return {"enableControllerMode": "true", "controllerAddr": addresses(owner, spec)}


def _labels(owner: Owner) -> dict[str, str]:
    return names.common_labels(owner, names.COMPONENT_CONTROLLER)


def configmap(owner: Owner) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": names.metadata(owner, names.controller_configmap(owner.name), _labels(owner)),
        "data": {CONF_FILE: pod.properties_text(controller_conf(owner))},
    }


def service(owner: Owner, spec: BrokerSpec) -> dict[str, Any]:
    # headless publishes not-ready pods too: the standby must be resolvable before it leads;
    # on the host network the container declares no port, so the target is a number
    target = controller_port(spec, 0) if spec.host_network else None
    return pod.service(
        names.metadata(owner, names.controller(owner.name), _labels(owner)),
        names.selector_labels(owner, names.COMPONENT_CONTROLLER),
        [pod.service_port("controller", names.CONTROLLER_PORT, target=target)],
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


def _command(spec: BrokerSpec) -> dict[str, Any]:
    args = ["controller", "-c", f"{pod.CONFIG_DIR}/{CONF_FILE}"]
    if not spec.host_network:
        return {
            "args": args,
            "ports": [
                {
                    "name": CONTROLLER_PORT_NAME,
                    "containerPort": names.CONTROLLER_PORT,
                    "protocol": "TCP",
                }
            ],
        }
    # ferrymq reads FERRYMQ_<key> over controller.conf: each pod its own port (see namesrv.py)
    script = f'export FERRYMQ_listenPort="{_port_expr(spec)}"; exec ferrymq {" ".join(args)}'
    return {"command": ["/bin/sh", "-c", script]}


def statefulset(owner: Owner, spec: BrokerSpec) -> dict[str, Any]:
    selector = names.selector_labels(owner, names.COMPONENT_CONTROLLER)
    labels = _labels(owner)
    conf_hash = pod.config_hash(configmap(owner)["data"])
    container: dict[str, Any] = {
        "name": "controller",
        "image": spec.image,
        "imagePullPolicy": spec.image_pull_policy,
        **_command(spec),
        "env": pod.downward_env() + pod.probe_env(),
        # Not BestEffort: a BestEffort container gets the minimum CPU weight (2 shares) and, on a
        # busy node, the Lease renewals of a starved controller would lag (measured on the real
        # node: a BestEffort broker got 1 s of CPU in 10 min next to pods with requests).
        "resources": {"requests": dict(CONTROLLER_REQUESTS)},
        "livenessProbe": (
            pod.liveness_probe(_port_expr(spec))
            if spec.host_network
            # by the port's name: the API refuses a string port that is no name ("9878": "must
            # contain at least one letter"), which kept controller-mode Brokers off pod networks
            else pod.tcp_probe(CONTROLLER_PORT_NAME, period=20, failures=6)
        ),
        "securityContext": pod.container_security_context(),
        "volumeMounts": [
            {"name": "config", "mountPath": pod.CONFIG_DIR, "readOnly": True},
            {"name": "home", "mountPath": pod.HOME},
            {"name": "tmp", "mountPath": pod.TMP_DIR},
        ],
    }
    pod_spec: dict[str, Any] = {
        **pod.host_network(spec.host_network),
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
            "template": template.customise(
                pod.pod_template(labels, conf_hash, pod_spec),
                spec.template.controller_pod,
                spec.rack,
                selector,
            ),
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
        service(owner, spec),
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
