"""Pod-template pieces shared by NameServer and Broker StatefulSets (pure)."""

from __future__ import annotations

import hashlib
from typing import Any, Protocol

import javaproperties

from ferrymq_operator.builders.names import ANNOTATION_CONFIG_HASH
from ferrymq_operator.models import PodSpecCommon


class StorageSpecLike(Protocol):
    """The broker's and the audit job's storage settings (both models carry these two)."""

    @property
    def size(self) -> str: ...

    @property
    def storage_class_name(self) -> str | None: ...


# The image runs as this non-root user (broker_image/Dockerfile creates it); fsGroup makes the
# persistent volume writable for it.
RUN_AS_USER = 10001
# The image user's home: root-owned on a read-only root filesystem, so only volumes mounted below
# it (the broker's store and logs) are writable. Paths of those mounts hang off it.
HOME = "/home/ferrymq"
# $HOME of every container: tools that write under $HOME (Python's caches, PySpark's ivy and
# spark-warehouse, shells' history) need a writable directory; /tmp is an emptyDir in every pod.
WRITABLE_HOME = "/tmp"
TMP_DIR = "/tmp"
CONFIG_DIR = "/etc/ferrymq"
HOSTNAME_TOPOLOGY = "kubernetes.io/hostname"


def properties_text(values: dict[str, str]) -> str:
    """A .properties file with sorted keys and no timestamp, so equal settings give equal bytes."""
    text: str = javaproperties.dumps(values, timestamp=False, sort_keys=True)
    return text


def config_hash(data: dict[str, str]) -> str:
    """Digest of a ConfigMap's data; put on the pod template so a config change rolls the pods."""
    digest = hashlib.sha256()
    for key in sorted(data):
        digest.update(key.encode())
        digest.update(b"\0")
        digest.update(data[key].encode())
        digest.update(b"\0")
    return digest.hexdigest()[:16]


def service_port(name: str, port: int, target: int | None = None) -> dict[str, Any]:
    """A TCP Service port targeting the container port of the same name (or a port number)."""
    return {
        "name": name,
        "port": port,
        "targetPort": name if target is None else target,
        "protocol": "TCP",
    }


def service(
    metadata: dict[str, Any],
    selector: dict[str, str],
    ports: list[dict[str, Any]],
    *,
    headless: bool,
) -> dict[str, Any]:
    """A Service; headless ones publish not-ready pods too, so peers resolve each pod's DNS name
    while the pods start (brokers registering with NameServers, slaves finding masters)."""
    spec: dict[str, Any] = (
        {"clusterIP": "None", "publishNotReadyAddresses": True}
        if headless
        else {"type": "ClusterIP"}
    )
    spec["selector"] = selector
    spec["ports"] = ports
    return {"apiVersion": "v1", "kind": "Service", "metadata": metadata, "spec": spec}


def claim_spec(storage: StorageSpecLike) -> dict[str, Any]:
    """A ReadWriteOnce PersistentVolumeClaim spec of ``storage.size`` (and its class, if set)."""
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": storage.size}},
    }
    if storage.storage_class_name:
        spec["storageClassName"] = storage.storage_class_name
    return spec


def pod_template(
    labels: dict[str, str], conf_hash: str, pod_spec: dict[str, Any]
) -> dict[str, Any]:
    """A StatefulSet pod template whose config-hash annotation rolls the pods on config changes."""
    return {
        "metadata": {"labels": labels, "annotations": {ANNOTATION_CONFIG_HASH: conf_hash}},
        "spec": pod_spec,
    }


def with_resources(container: dict[str, Any], spec: PodSpecCommon) -> dict[str, Any]:
    """``container`` with the spec's requests/limits, when any are set."""
    res = resources(spec)
    if res:
        container["resources"] = res
    return container


def pod_security_context() -> dict[str, Any]:
    return {
        "runAsNonRoot": True,
        "runAsUser": RUN_AS_USER,
        "runAsGroup": RUN_AS_USER,
        "fsGroup": RUN_AS_USER,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def container_security_context() -> dict[str, Any]:
    return {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
    }


def resources(spec: PodSpecCommon) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if spec.resources.requests:
        out["requests"] = dict(spec.resources.requests)
    if spec.resources.limits:
        out["limits"] = dict(spec.resources.limits)
    return out


def anti_affinity(spec: PodSpecCommon, match_labels: dict[str, str]) -> dict[str, Any]:
    """Keep the pods matching ``match_labels`` on different nodes (required or preferred)."""
    term = {
        "labelSelector": {"matchLabels": dict(match_labels)},
        "topologyKey": HOSTNAME_TOPOLOGY,
    }
    if spec.pod_anti_affinity == "Required":
        return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    return {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 100, "podAffinityTerm": term}
            ]
        }
    }


def scheduling(spec: PodSpecCommon, match_labels: dict[str, str]) -> dict[str, Any]:
    """Pod-spec fields for placement: affinity, nodeSelector, tolerations, priority, pull secrets."""
    out: dict[str, Any] = {"affinity": anti_affinity(spec, match_labels)}
    if spec.node_selector:
        out["nodeSelector"] = dict(spec.node_selector)
    if spec.tolerations:
        out["tolerations"] = [
            t.model_dump(by_alias=True, exclude_none=True) for t in spec.tolerations
        ]
    if spec.priority_class_name:
        out["priorityClassName"] = spec.priority_class_name
    if spec.image_pull_secrets:
        out["imagePullSecrets"] = [{"name": name} for name in spec.image_pull_secrets]
    return out


def host_network(enabled: bool) -> dict[str, Any]:
    """Pod-spec fields that put a pod on the node's network, still resolving cluster DNS names."""
    if not enabled:
        return {}
    return {"hostNetwork": True, "dnsPolicy": "ClusterFirstWithHostNet"}


def field_env(name: str, field_path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": field_path}}}


def downward_env() -> list[dict[str, Any]]:
    """Pod identity for the process. POD_NAME, not $HOSTNAME, names the pod: on the host network
    the hostname is the node's."""
    return [
        field_env("POD_NAME", "metadata.name"),
        field_env("POD_NAMESPACE", "metadata.namespace"),
        field_env("POD_IP", "status.podIP"),
        field_env("HOST_IP", "status.hostIP"),
        {"name": "HOME", "value": WRITABLE_HOME},
    ]


# The pod's ordinal in its StatefulSet, in a shell command (POD_NAME ends in "-<ordinal>").
SHELL_ORDINAL = "${POD_NAME##*-}"


def conf_port_expr(conf_file: str, key: str = "listenPort") -> str:
    """Shell expression for ``key`` in a properties file written by :func:`properties_text`."""
    return f"$(sed -n 's/^{key}=//p' {conf_file})"


def tcp_probe(port: str, period: int, failures: int, initial_delay: int = 0) -> dict[str, Any]:
    probe: dict[str, Any] = {
        "tcpSocket": {"port": port},
        "periodSeconds": period,
        "timeoutSeconds": 3,
        "failureThreshold": failures,
    }
    if initial_delay:
        probe["initialDelaySeconds"] = initial_delay
    return probe


# Where brokers and NameServers keep their "serving" marker (ferrymq.remoting.serving_marker): the
# pod's /tmp emptyDir. The environment variable and the file name are that module's.
PROBE_DIR = f"{TMP_DIR}/ferrymq-probe"
PROBE_DIR_ENV = "FERRYMQ_PROBE_DIR"


def probe_env() -> list[dict[str, Any]]:
    """Tells the server where to keep the marker the probes of :func:`serving_probe` read."""
    return [{"name": PROBE_DIR_ENV, "value": PROBE_DIR}]


def serving_probe(
    port: int | str,
    fresh_within: int,
    period: int,
    failures: int,
    timeout: int = 5,
    initial_delay: int = 0,
) -> dict[str, Any]:
    """Passes while the server on ``port`` has touched its marker within ``fresh_within`` s.

    The server touches ``serving-<port>`` every 2 s from its event loop, and only once it serves:
    a stuck loop lets the file go stale, a starting server has none. One ``sh`` and one ``find``
    per probe, instead of a Python interpreter (about a second of CPU, which on a loaded node
    outlived the timeout and piled up). ``port`` is a number, or a shell expression (``$(...)``)
    when each pod of the StatefulSet has its own port: the probe follows the pod's own port.
    """
    marker = f"{PROBE_DIR}/serving-{port}"
    found = f"find \"{marker}\" -newermt '-{fresh_within} seconds' 2>/dev/null"
    test = f'test -n "$({found})"'
    probe: dict[str, Any] = {
        "exec": {"command": ["/bin/sh", "-c", test]},
        "periodSeconds": period,
        "timeoutSeconds": timeout,
        "failureThreshold": failures,
    }
    if initial_delay:
        probe["initialDelaySeconds"] = initial_delay
    return probe


# Probe timings for a loaded node (one place for brokers, NameServers and controllers). The marker
# is touched every 2 s, but each exec probe goes through the container runtime (docker exec), which
# on a loaded node (load 30 on 2 cores, measured) takes seconds by itself: timeouts are generous.
# Readiness: 10 s without a touch, 3 times 10 s apart (un-Ready after ~30-40 s of a stalled loop);
# liveness: 30 s without a touch, 6 times 20 s apart (a restart only after ~2.5 min of stall).
READY_FRESH_S, READY_PERIOD_S, READY_TIMEOUT_S, READY_FAILURES = 10, 10, 10, 3
LIVE_FRESH_S, LIVE_PERIOD_S, LIVE_TIMEOUT_S, LIVE_FAILURES = 30, 20, 20, 6


def readiness_probe(port: int | str) -> dict[str, Any]:
    return serving_probe(
        port, READY_FRESH_S, READY_PERIOD_S, READY_FAILURES, timeout=READY_TIMEOUT_S
    )


def liveness_probe(port: int | str, initial_delay: int = 0) -> dict[str, Any]:
    return serving_probe(
        port,
        LIVE_FRESH_S,
        LIVE_PERIOD_S,
        LIVE_FAILURES,
        timeout=LIVE_TIMEOUT_S,
        initial_delay=initial_delay,
    )
