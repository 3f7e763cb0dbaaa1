"""NameServer spec -> StatefulSet, headless Service, client Service, ConfigMap, PodDisruptionBudget."""

from __future__ import annotations

from typing import Any

from ferrymq_operator.builders import names, pod
from ferrymq_operator.builders.names import Owner
from ferrymq_operator.models import NameServerSpec

CONF_FILE = "namesrv.conf"


def namesrv_conf(spec: NameServerSpec) -> dict[str, str]:
    """namesrv.conf settings: the user's extras plus the fixed port."""
    return {**spec.config, "listenPort": str(names.NAMESRV_PORT)}


def configmap(owner: Owner, spec: NameServerSpec) -> dict[str, Any]:
    labels = names.common_labels(owner, names.COMPONENT_NAMESRV)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": names.metadata(owner, names.namesrv_configmap(owner.name), labels),
        "data": {CONF_FILE: pod.properties_text(namesrv_conf(spec))},
    }


def headless_service(owner: Owner) -> dict[str, Any]:
    """Gives each pod a stable DNS name, the addresses brokers register with."""
    labels = names.common_labels(owner, names.COMPONENT_NAMESRV)
    return pod.service(
        names.metadata(owner, names.namesrv_headless_service(owner.name), labels),
        names.selector_labels(owner, names.COMPONENT_NAMESRV),
        [pod.service_port("namesrv", names.NAMESRV_PORT)],
        headless=True,
    )


def client_service(owner: Owner) -> dict[str, Any]:
    """One stable address for clients' route lookups (any NameServer answers them)."""
    labels = names.common_labels(owner, names.COMPONENT_NAMESRV)
    return pod.service(
        names.metadata(owner, names.namesrv_service(owner.name), labels),
        names.selector_labels(owner, names.COMPONENT_NAMESRV),
        [pod.service_port("namesrv", names.NAMESRV_PORT)],
        headless=False,
    )


def statefulset(owner: Owner, spec: NameServerSpec) -> dict[str, Any]:
    selector = names.selector_labels(owner, names.COMPONENT_NAMESRV)
    labels = names.common_labels(owner, names.COMPONENT_NAMESRV)
    conf_hash = pod.config_hash(configmap(owner, spec)["data"])
    container: dict[str, Any] = pod.with_resources(
        {
            "name": "namesrv",
            "image": spec.image,
            "imagePullPolicy": spec.image_pull_policy,
            "args": ["namesrv", "-c", f"{pod.CONFIG_DIR}/{CONF_FILE}"],
            "ports": [{"name": "namesrv", "containerPort": names.NAMESRV_PORT, "protocol": "TCP"}],
            "env": pod.downward_env(),
            "readinessProbe": pod.exec_probe(
                "namesrv", names.NAMESRV_PORT, period=10, timeout=5, failures=3
            ),
            "livenessProbe": pod.exec_probe(
                "namesrv", names.NAMESRV_PORT, period=20, timeout=10, failures=6, initial_delay=10
            ),
            "securityContext": pod.container_security_context(),
            "volumeMounts": [
                {"name": "config", "mountPath": pod.CONFIG_DIR, "readOnly": True},
                {"name": "home", "mountPath": pod.HOME},
                {"name": "tmp", "mountPath": "/tmp"},
            ],
        },
        spec,
    )
    pod_spec: dict[str, Any] = {
        "securityContext": pod.pod_security_context(),
        "terminationGracePeriodSeconds": 30,
        "containers": [container],
        "volumes": [
            {"name": "config", "configMap": {"name": names.namesrv_configmap(owner.name)}},
            {"name": "home", "emptyDir": {}},
            {"name": "tmp", "emptyDir": {}},
        ],
        **pod.scheduling(spec, selector),
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": names.metadata(owner, names.namesrv_statefulset(owner.name), labels),
        "spec": {
            "replicas": spec.replicas,
            "serviceName": names.namesrv_headless_service(owner.name),
            "podManagementPolicy": "Parallel",
            "updateStrategy": {"type": "RollingUpdate"},
            "selector": {"matchLabels": selector},
            "template": pod.pod_template(labels, conf_hash, pod_spec),
        },
    }


def pdb(owner: Owner, api_version: str) -> dict[str, Any]:
    """At most one NameServer down for voluntary disruptions (drains)."""
    labels = names.common_labels(owner, names.COMPONENT_NAMESRV)
    return {
        "apiVersion": api_version,
        "kind": "PodDisruptionBudget",
        "metadata": names.metadata(owner, names.namesrv_pdb(owner.name), labels),
        "spec": {
            "maxUnavailable": 1,
            "selector": {"matchLabels": names.selector_labels(owner, names.COMPONENT_NAMESRV)},
        },
    }


def desired(owner: Owner, spec: NameServerSpec, pdb_api_version: str) -> list[dict[str, Any]]:
    """Every child of a NameServer, in apply order (config before the pods that mount it)."""
    owner.check_name()
    return [
        configmap(owner, spec),
        headless_service(owner),
        client_service(owner),
        statefulset(owner, spec),
        pdb(owner, pdb_api_version),
    ]
