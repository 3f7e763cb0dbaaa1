"""Broker spec -> per group a StatefulSet (pod ordinal = brokerId), ConfigMap and PDB; one headless
Service for the whole Broker.

Each group's ConfigMap holds one complete ``broker-<id>.conf`` per pod, in upstream property names,
so ``kubectl get configmap -o yaml`` shows exactly what every broker runs with. The container picks
its file by the ordinal at the end of its hostname (a StatefulSet pod's hostname is its name).
"""

from __future__ import annotations

from typing import Any

from ferrymq_operator.builders import names, pod
from ferrymq_operator.builders.names import Owner
from ferrymq_operator.models import BrokerSpec

STORE_DIR = f"{pod.HOME}/store"
STORE_VOLUME = "store"
# Recovery of a large store after a crash rebuilds queues from the CommitLog: give it up to
# 30 minutes before liveness may restart the pod.
STARTUP_FAILURES = 180
STARTUP_PERIOD = 10


def cluster_name(owner: Owner, spec: BrokerSpec) -> str:
    return spec.cluster_name or owner.name


def broker_conf(
    owner: Owner, spec: BrokerSpec, namesrv_addr: str, group: int, broker_id: int
) -> dict[str, str]:
    """The broker.conf settings of one pod: the user's extras, then the operator-owned keys."""
    role = spec.broker_role if broker_id == 0 else "SLAVE"
    return {
        **spec.config,
        "brokerClusterName": cluster_name(owner, spec),
        "brokerName": names.broker_name(owner.name, group),
        "brokerId": str(broker_id),
        "brokerRole": role,
        "flushDiskType": spec.flush_disk_type,
        "namesrvAddr": namesrv_addr,
        "listenPort": str(names.BROKER_PORT),
        "haListenPort": str(names.BROKER_HA_PORT),
        "storePathRootDir": STORE_DIR,
    }


def configmap(owner: Owner, spec: BrokerSpec, namesrv_addr: str, group: int) -> dict[str, Any]:
    labels = group_labels(owner, group)
    data = {
        names.broker_conf_file(broker_id): pod.properties_text(
            broker_conf(owner, spec, namesrv_addr, group, broker_id)
        )
        for broker_id in range(spec.replicas_per_group)
    }
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": names.metadata(owner, names.broker_configmap(owner.name, group), labels),
        "data": data,
    }


def group_selector(owner: Owner, group: int) -> dict[str, str]:
    return {
        **names.selector_labels(owner, names.COMPONENT_BROKER),
        names.LABEL_GROUP: names.broker_name(owner.name, group),
    }


def group_labels(owner: Owner, group: int) -> dict[str, str]:
    return {
        **names.common_labels(owner, names.COMPONENT_BROKER),
        names.LABEL_GROUP: names.broker_name(owner.name, group),
        names.LABEL_GROUP_INDEX: str(group),
    }


def headless_service(owner: Owner) -> dict[str, Any]:
    """Stable DNS per broker pod (the operator's admin calls; slaves finding masters)."""
    labels = names.common_labels(owner, names.COMPONENT_BROKER)
    return pod.service(
        names.metadata(owner, names.broker_headless_service(owner.name), labels),
        names.selector_labels(owner, names.COMPONENT_BROKER),
        [
            pod.service_port("broker", names.BROKER_PORT),
            pod.service_port("ha", names.BROKER_HA_PORT),
            pod.service_port("fast", names.BROKER_FAST_PORT),
        ],
        headless=True,
    )


def _command() -> list[str]:
    # The ordinal after the last '-' of the hostname is the brokerId; exec keeps the broker PID 1
    # so it receives SIGTERM and shuts down cleanly (normal recovery next start).
    return [
        "/bin/sh",
        "-c",
        f'exec ferrymq broker -c "{pod.CONFIG_DIR}/broker-${{HOSTNAME##*-}}.conf"',
    ]


def statefulset(owner: Owner, spec: BrokerSpec, namesrv_addr: str, group: int) -> dict[str, Any]:
    selector = group_selector(owner, group)
    labels = group_labels(owner, group)
    # namesrvAddr is left out of the hash: NameServer scaling reaches running brokers through
    # UPDATE_BROKER_CONFIG (ferrymq_operator.lifecycle), without restarting them.
    conf_hash = pod.config_hash(configmap(owner, spec, "", group)["data"])
    container: dict[str, Any] = pod.with_resources(
        {
            "name": "broker",
            "image": spec.image,
            "imagePullPolicy": spec.image_pull_policy,
            "command": _command(),
            "ports": [
                {"name": "broker", "containerPort": names.BROKER_PORT, "protocol": "TCP"},
                {"name": "ha", "containerPort": names.BROKER_HA_PORT, "protocol": "TCP"},
                {"name": "fast", "containerPort": names.BROKER_FAST_PORT, "protocol": "TCP"},
            ],
            "env": pod.downward_env(),
            "startupProbe": pod.tcp_probe(
                "broker", period=STARTUP_PERIOD, failures=STARTUP_FAILURES
            ),
            "readinessProbe": pod.exec_probe(
                "broker", names.BROKER_PORT, period=10, timeout=5, failures=3
            ),
            "livenessProbe": pod.exec_probe(
                "broker", names.BROKER_PORT, period=20, timeout=10, failures=6
            ),
            "securityContext": pod.container_security_context(),
            "volumeMounts": [
                {"name": "config", "mountPath": pod.CONFIG_DIR, "readOnly": True},
                {"name": STORE_VOLUME, "mountPath": STORE_DIR},
                {"name": "logs", "mountPath": f"{pod.HOME}/logs"},
                {"name": "tmp", "mountPath": "/tmp"},
            ],
        },
        spec,
    )
    pod_spec: dict[str, Any] = {
        "securityContext": pod.pod_security_context(),
        # A clean shutdown flushes and removes the abort file; give it time before SIGKILL.
        "terminationGracePeriodSeconds": 60,
        "containers": [container],
        "volumes": [
            {"name": "config", "configMap": {"name": names.broker_configmap(owner.name, group)}},
            {"name": "logs", "emptyDir": {}},
            {"name": "tmp", "emptyDir": {}},
        ],
        **pod.scheduling(spec, selector),
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": names.metadata(owner, names.broker_statefulset(owner.name, group), labels),
        "spec": {
            "replicas": spec.replicas_per_group,
            "serviceName": names.broker_headless_service(owner.name),
            # Master and slaves start independently; a slave waits for its master by itself.
            "podManagementPolicy": "Parallel",
            # The operator rolls the pods itself, one at a time, slaves before their master, each
            # only once the previous is Ready and caught up (ferrymq_operator.rollout).
            "updateStrategy": {"type": "OnDelete"},
            "selector": {"matchLabels": selector},
            "template": pod.pod_template(labels, conf_hash, pod_spec),
            "volumeClaimTemplates": [
                {
                    "apiVersion": "v1",
                    "kind": "PersistentVolumeClaim",
                    "metadata": {"name": STORE_VOLUME, "labels": labels},
                    "spec": pod.claim_spec(spec.storage),
                }
            ],
        },
    }


def pdb(owner: Owner, group: int, api_version: str) -> dict[str, Any]:
    """At most one pod of a group down for voluntary disruptions: master and slave never together."""
    return {
        "apiVersion": api_version,
        "kind": "PodDisruptionBudget",
        "metadata": names.metadata(
            owner, names.broker_pdb(owner.name, group), group_labels(owner, group)
        ),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": group_selector(owner, group)}},
    }


def group_objects(
    owner: Owner, spec: BrokerSpec, namesrv_addr: str, group: int, pdb_api_version: str
) -> list[dict[str, Any]]:
    return [
        configmap(owner, spec, namesrv_addr, group),
        statefulset(owner, spec, namesrv_addr, group),
        pdb(owner, group, pdb_api_version),
    ]


def desired(
    owner: Owner, spec: BrokerSpec, namesrv_addr: str, pdb_api_version: str
) -> list[dict[str, Any]]:
    """Every child of a Broker, in apply order (Service, then each group's config before its pods)."""
    owner.check_name()
    objects = [headless_service(owner)]
    for group in range(spec.groups):
        objects.extend(group_objects(owner, spec, namesrv_addr, group, pdb_api_version))
    return objects
