"""NameServer spec -> StatefulSet, headless Service, client Service, ConfigMap, PodDisruptionBudget.

With ``spec.hostNetwork`` pod k listens on ``spec.port + k`` (so the replicas fit on one node): the
ConfigMap's namesrv.conf holds the base port and the container sets ``FERRYMQ_listenPort`` (which
ferrymq reads over the file) from its ordinal; the probes compute the same port.
"""

from __future__ import annotations

from typing import Any

from ferrymq_operator.builders import listeners, names, pod, template
from ferrymq_operator.builders.names import Owner
from ferrymq_operator.models import NameServerSpec
from ferrymq_operator.security import builders as security

CONF_FILE = "namesrv.conf"


# The NameServer reads FERRYMQ_<upstream key> from the environment over namesrv.conf.
LISTEN_PORT_ENV = "FERRYMQ_listenPort"


def namesrv_conf(spec: NameServerSpec) -> dict[str, str]:
    """namesrv.conf settings: the user's extras plus the (base) port."""
    metrics = spec.metrics_port()
    defaults = {"metricsPort": str(metrics)} if metrics is not None else {}
    return {**defaults, **spec.config, **security.conf_keys(spec), "listenPort": str(spec.port)}


def _port_expr(spec: NameServerSpec) -> int | str:
    """The pod's own port: a number, or on the host network a shell expression of the ordinal."""
    return f"$(({spec.port} + {pod.SHELL_ORDINAL}))" if spec.host_network else spec.port


def _command(spec: NameServerSpec) -> dict[str, Any]:
    args = ["namesrv", "-c", f"{pod.CONFIG_DIR}/{CONF_FILE}"]
    if not spec.host_network:
        return {"args": args}
    script = f'export {LISTEN_PORT_ENV}="{_port_expr(spec)}"; exec ferrymq {" ".join(args)}'
    return {"command": ["/bin/sh", "-c", script]}


def _service_ports(spec: NameServerSpec) -> list[dict[str, Any]]:
    # Numeric target on the host network: the container declares no port (see broker.py).
    target = spec.port if spec.host_network else None
    return [pod.service_port("namesrv", spec.port, target=target)]


def configmap(owner: Owner, spec: NameServerSpec) -> dict[str, Any]:
    labels = names.common_labels(owner, names.COMPONENT_NAMESRV)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": names.metadata(owner, names.namesrv_configmap(owner.name), labels),
        "data": {CONF_FILE: pod.properties_text(namesrv_conf(spec))},
    }


def headless_service(owner: Owner, spec: NameServerSpec) -> dict[str, Any]:
    """Gives each pod a stable DNS name, the addresses brokers register with."""
    labels = names.common_labels(owner, names.COMPONENT_NAMESRV)
    return pod.service(
        names.metadata(owner, names.namesrv_headless_service(owner.name), labels),
        names.selector_labels(owner, names.COMPONENT_NAMESRV),
        _service_ports(spec),
        headless=True,
    )


def client_service(owner: Owner, spec: NameServerSpec) -> dict[str, Any]:
    """One stable address for clients' route lookups (any NameServer answers them). On the host
    network only pod 0 listens on spec.port; clients there use status.addresses."""
    labels = names.common_labels(owner, names.COMPONENT_NAMESRV)
    return pod.service(
        names.metadata(owner, names.namesrv_service(owner.name), labels),
        names.selector_labels(owner, names.COMPONENT_NAMESRV),
        _service_ports(spec),
        headless=False,
    )


def _container_ports(spec: NameServerSpec) -> list[dict[str, Any]]:
    ports = [{"name": "namesrv", "containerPort": spec.port, "protocol": "TCP"}]
    # /metrics of the NameServer (namesrv.conf metricsPort, the broker's key), for a PodMonitor
    metrics = spec.metrics_port()
    if metrics is not None:
        ports.append({"name": "metrics", "containerPort": metrics, "protocol": "TCP"})
    return ports


def statefulset(owner: Owner, spec: NameServerSpec) -> dict[str, Any]:
    selector = names.selector_labels(owner, names.COMPONENT_NAMESRV)
    labels = names.common_labels(owner, names.COMPONENT_NAMESRV)
    conf_hash = pod.config_hash(configmap(owner, spec)["data"])
    container: dict[str, Any] = pod.with_resources(
        {
            "name": "namesrv",
            "image": spec.image,
            "imagePullPolicy": spec.image_pull_policy,
            **_command(spec),
            **({} if spec.host_network else {"ports": _container_ports(spec)}),
            "env": pod.downward_env()
            + pod.probe_env()
            + security.env(owner, names.COMPONENT_NAMESRV, spec),
            "readinessProbe": pod.readiness_probe(_port_expr(spec)),
            "livenessProbe": pod.liveness_probe(_port_expr(spec), initial_delay=10),
            "securityContext": pod.container_security_context(),
            "volumeMounts": [
                {"name": "config", "mountPath": pod.CONFIG_DIR, "readOnly": True},
                {"name": "home", "mountPath": pod.HOME},
                {"name": "tmp", "mountPath": pod.TMP_DIR},
                *security.mounts(spec),
            ],
        },
        spec,
    )
    pod_spec: dict[str, Any] = {
        **pod.host_network(spec.host_network),
        "securityContext": pod.pod_security_context(),
        "terminationGracePeriodSeconds": 30,
        "containers": [container],
        "volumes": [
            {"name": "config", "configMap": {"name": names.namesrv_configmap(owner.name)}},
            {"name": "home", "emptyDir": {}},
            {"name": "tmp", "emptyDir": {}},
            *security.volumes(owner, names.COMPONENT_NAMESRV, spec),
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
            "template": template.customise(
                pod.pod_template(labels, conf_hash, pod_spec),
                spec.template.pod,
                spec.rack,
                selector,
            ),
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
        headless_service(owner, spec),
        client_service(owner, spec),
        *listeners.namesrv_services(owner, spec),
        statefulset(owner, spec),
        pdb(owner, pdb_api_version),
    ]
