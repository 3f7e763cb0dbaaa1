"""Broker spec -> per group a StatefulSet (pod ordinal = brokerId), ConfigMap and PDB; one headless
Service for the whole Broker.

Each group's ConfigMap holds one complete ``broker-<id>.conf`` per pod, in upstream property names,
so ``kubectl get configmap -o yaml`` shows exactly what every broker runs with. The container picks
its file by the ordinal at the end of its pod name (``POD_NAME``: on the host network the hostname
is the node's).

Ports: without host networking every pod listens on ``spec.listenPort`` (haListenPort + 1). With
``spec.hostNetwork`` (or ``externalAccess.type: NodePort``) each pod has its own ports, derived from
its global index (``BrokerSpec.pod_ports``) and written into its own ``broker-<id>.conf``; the probes
read the port from that file, so one pod template serves every pod of the group.

External access: the broker advertises ``brokerIP1:listenPort`` (ferrymq.broker.config). With host
networking or NodePort, ``brokerIP1`` is the node address (``FERRYMQ_brokerIP1`` from the downward
API's ``status.hostIP``); with NodePort the pod listens on its own nodePort, so the advertised
``<node address>:<listenPort>`` is exactly what clients outside the cluster reach.
"""

from __future__ import annotations

from typing import Any

from ferrymq_operator import models
from ferrymq_operator.builders import controller, listeners, names, pod, template
from ferrymq_operator.builders.names import Owner
from ferrymq_operator.models import BrokerSpec
from ferrymq_operator.security import builders as security

STORE_DIR = f"{pod.HOME}/store"
# The broker reads FERRYMQ_<upstream key> from the environment over broker.conf (ferrymq.properties).
BROKER_IP1_ENV = listeners.BROKER_IP1_ENV
STORE_VOLUME = "store"
# Recovery of a large store after a crash rebuilds queues from the CommitLog: give it up to
# 30 minutes before liveness may restart the pod.
STARTUP_FAILURES = 180
STARTUP_PERIOD = 10


def cluster_name(owner: Owner, spec: BrokerSpec) -> str:
    return spec.cluster_name or owner.name


def broker_conf(
    owner: Owner,
    spec: BrokerSpec,
    namesrv_addr: str,
    group: int,
    broker_id: int,
) -> dict[str, str]:
    """The broker.conf settings of one pod: the user's extras, then the operator-owned keys."""
    role = spec.broker_role if broker_id == 0 else "SLAVE"
    failover: dict[str, str] = {}
    # Defaults the user's spec.config may override. In controller mode a SYNC_MASTER that waits
    # for "a slave" answers SLAVE_NOT_AVAILABLE while its only replica restarts (a planned roll of
    # 1 x 2 failed 132 sends on the real node); waiting for the SyncStateSet instead acknowledges
    # once the controller has dropped the absent replica, and an elected master holds every ack.
    defaults: dict[str, str] = {}
    if controller.enabled(spec):
        defaults["allAckInSyncStateSet"] = "true"
        defaults.update(controller.broker_failover_defaults())
        # the controller picks the master: every pod is a replica with id ordinal + 1 (ids >= 1)
        # and brokerRole says only whether a master waits for its in-sync replicas
        role, broker_id = spec.broker_role, broker_id + 1
        failover = controller.broker_conf_keys(owner, spec)
    listen, ha = spec.pod_ports(group, broker_id)
    extra = dict(spec.config)
    metrics = pod_metrics_port(spec, group, broker_id)
    if metrics is not None:
        extra["metricsPort"] = str(metrics)
    return {
        **defaults,
        **extra,
        **security.conf_keys(spec),
        "brokerClusterName": cluster_name(owner, spec),
        "brokerName": names.broker_name(owner.name, group),
        "brokerId": str(broker_id),
        "brokerRole": role,
        "flushDiskType": spec.flush_disk_type,
        "namesrvAddr": namesrv_addr,
        "listenPort": str(listen),
        "haListenPort": str(ha),
        "storePathRootDir": STORE_DIR,
        **failover,
    }


def pod_metrics_port(spec: BrokerSpec, group: int, broker_id: int) -> int | None:
    """The pod's metricsPort (spec.config's, moved per pod with per-pod ports); None when off."""
    metrics = spec.metrics_port()
    if metrics is None or not spec.per_pod_ports:
        return metrics
    # Every port a pod opens differs per pod, so that pods sharing a node do not clash.
    index = group * spec.replicas_per_group + broker_id
    return metrics + models.PORT_STRIDE * index


def pod_address(owner: Owner, spec: BrokerSpec, group: int, broker_id: int, domain: str) -> str:
    """``host:listenPort`` of one broker pod by DNS, with the pod's own port."""
    return names.broker_pod_address(
        owner.name, owner.namespace, group, broker_id, domain, spec.pod_ports(group, broker_id)[0]
    )


def template_hash(owner: Owner, spec: BrokerSpec, group: int) -> str:
    """The config hash on a group's pod template.

    One template serves every pod of the group, so the hash must not change when a pod is added:
    hashing the whole ConfigMap would restart the master whenever a slave is added. It covers the
    master's own broker.conf: every other pod's file is derived from the same spec fields (brokerId,
    role and ports follow from the ordinal), and the master's ports move whenever the layout moves
    theirs. namesrvAddr is left out: NameServer scaling reaches running brokers through
    UPDATE_BROKER_CONFIG (ferrymq_operator.lifecycle), without restarting them.
    """
    conf = broker_conf(owner, spec, "", group, broker_id=0)
    return pod.config_hash({names.broker_conf_file(0): pod.properties_text(conf)})


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


def _ports(spec: BrokerSpec) -> list[tuple[str, int]]:
    ports = [
        ("broker", spec.listen_port),
        ("ha", spec.listen_port + 1),
        ("fast", spec.listen_port - 2),
    ]
    # the chart's PodMonitor scrapes the container port named "metrics" (spec.config metricsPort)
    metrics = spec.metrics_port()
    if metrics is not None:
        ports.append(("metrics", metrics))
    return ports


def headless_service(owner: Owner, spec: BrokerSpec) -> dict[str, Any]:
    """Stable DNS per broker pod (the operator's admin calls; slaves finding masters).

    With per-pod ports the containers declare no ports (on the host network a declared port is a
    host port, and pods sharing a node would clash), so the targets are numbers: a named target
    that no container declares would leave the pods out of the endpoints, and out of DNS.
    """
    labels = names.common_labels(owner, names.COMPONENT_BROKER)
    ports = [
        pod.service_port(name, number, target=number if spec.per_pod_ports else None)
        for name, number in _ports(spec)
    ]
    return pod.service(
        names.metadata(owner, names.broker_headless_service(owner.name), labels),
        names.selector_labels(owner, names.COMPONENT_BROKER),
        ports,
        headless=True,
    )


def node_port_services(owner: Owner, spec: BrokerSpec) -> list[dict[str, Any]]:
    """One Service per broker pod for NodePort or LoadBalancer access (builders.listeners)."""
    return listeners.broker_services(owner, spec)


def _command(spec: BrokerSpec) -> list[str]:
    # The ordinal after the last '-' of the pod name is the brokerId; exec keeps the broker PID 1
    # so it receives SIGTERM and shuts down cleanly (normal recovery next start).
    run = f'exec ferrymq broker -c "{_conf_path()}"'
    return ["/bin/sh", "-c", listeners.wait_for_address(spec, run)]


def _conf_path() -> str:
    return f"{pod.CONFIG_DIR}/broker-{pod.SHELL_ORDINAL}.conf"


def _env(owner: Owner, spec: BrokerSpec) -> list[dict[str, Any]]:
    # Clients outside the pod network reach the broker at the node's (or load balancer's) address.
    env = pod.downward_env() + pod.probe_env() + listeners.broker_env(spec)
    return env + security.env(owner, names.COMPONENT_BROKER, spec)


def _probes(spec: BrokerSpec) -> dict[str, Any]:
    port: int | str = pod.conf_port_expr(_conf_path()) if spec.per_pod_ports else spec.listen_port
    return {
        # Store recovery may take long: the startup probe allows it before liveness applies.
        "startupProbe": pod.serving_probe(
            port,
            pod.LIVE_FRESH_S,
            period=STARTUP_PERIOD,
            failures=STARTUP_FAILURES,
            timeout=pod.READY_TIMEOUT_S,
        ),
        "readinessProbe": pod.readiness_probe(port),
        "livenessProbe": pod.liveness_probe(port),
    }


def statefulset(owner: Owner, spec: BrokerSpec, namesrv_addr: str, group: int) -> dict[str, Any]:
    selector = group_selector(owner, group)
    labels = group_labels(owner, group)
    conf_hash = template_hash(owner, spec, group)
    ports = (
        []
        if spec.per_pod_ports
        else [
            {"name": name, "containerPort": number, "protocol": "TCP"}
            for name, number in _ports(spec)
        ]
    )
    container: dict[str, Any] = pod.with_resources(
        {
            "name": "broker",
            "image": spec.image,
            "imagePullPolicy": spec.image_pull_policy,
            "command": _command(spec),
            **({"ports": ports} if ports else {}),
            "env": _env(owner, spec),
            **_probes(spec),
            "securityContext": pod.container_security_context(),
            "volumeMounts": [
                {"name": "config", "mountPath": pod.CONFIG_DIR, "readOnly": True},
                {"name": STORE_VOLUME, "mountPath": STORE_DIR},
                {"name": "logs", "mountPath": f"{pod.HOME}/logs"},
                {"name": "tmp", "mountPath": pod.TMP_DIR},
                *security.mounts(spec),
                *listeners.broker_mounts(spec),
            ],
        },
        spec,
    )
    pod_spec: dict[str, Any] = {
        **pod.host_network(spec.host_network),
        "securityContext": pod.pod_security_context(),
        # A clean shutdown flushes and removes the abort file; give it time before SIGKILL.
        "terminationGracePeriodSeconds": 60,
        "containers": [container],
        "volumes": [
            {"name": "config", "configMap": {"name": names.broker_configmap(owner.name, group)}},
            {"name": "logs", "emptyDir": {}},
            {"name": "tmp", "emptyDir": {}},
            *security.volumes(owner, names.COMPONENT_BROKER, spec),
            *listeners.broker_volumes(owner, spec),
            *ephemeral_store(spec),
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
            "template": template.customise(
                pod.pod_template(labels, conf_hash, pod_spec),
                spec.template.pod,
                spec.rack,
                selector,
            ),
            **claim_templates(spec, labels),
        },
    }


def claim_templates(spec: BrokerSpec, labels: dict[str, str]) -> dict[str, Any]:
    """The store's claim template (none with ephemeral storage: the store is an emptyDir)."""
    if spec.storage.type == "ephemeral":
        return {}
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": STORE_VOLUME, "labels": labels},
        "spec": pod.claim_spec(spec.storage),
    }
    return {"volumeClaimTemplates": [claim]}


def ephemeral_store(spec: BrokerSpec) -> list[dict[str, Any]]:
    if spec.storage.type != "ephemeral":
        return []
    return [{"name": STORE_VOLUME, "emptyDir": {"sizeLimit": spec.storage.size}}]


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
    objects = [headless_service(owner, spec), *node_port_services(owner, spec)]
    for group in range(spec.groups):
        objects.extend(group_objects(owner, spec, namesrv_addr, group, pdb_api_version))
    return objects
