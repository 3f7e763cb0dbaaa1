"""Console spec -> Deployment (rocketmq-dashboard), Service and NetworkPolicy (pure).

The dashboard is configured by Java system properties in JAVA_OPTS (its Spring Boot settings):
``rocketmq.namesrv.addr`` lists the Broker's NameServers, ``rocketmq.config.dataPath`` a writable
emptyDir, and with ``spec.auth`` ``rocketmq.config.loginRequired=true`` with the user's
``users.properties`` mounted into that directory (the dashboard reads it from dataPath).
"""

from __future__ import annotations

from typing import Any

from ferrymq_operator.builders import names, pod, template
from ferrymq_operator.builders.names import Owner
from ferrymq_operator.console_models import ConsoleSpec

COMPONENT_CONSOLE = "console"
DATA_DIR = "/tmp/rocketmq-console/data"
USERS_FILE = "users.properties"


def console_name(cr_name: str) -> str:
    return f"{cr_name}-console"


def _labels(owner: Owner) -> dict[str, str]:
    return names.common_labels(owner, COMPONENT_CONSOLE)


def selector(owner: Owner) -> dict[str, str]:
    return names.selector_labels(owner, COMPONENT_CONSOLE)


def java_opts(spec: ConsoleSpec, namesrv_addr: str) -> str:
    opts = [
        spec.java_opts.strip(),
        f"-Dserver.port={spec.port}",
        f"-Drocketmq.namesrv.addr={namesrv_addr}",
        f"-Drocketmq.config.dataPath={DATA_DIR}",
        f"-Drocketmq.config.loginRequired={'true' if spec.auth else 'false'}",
    ]
    return " ".join(o for o in opts if o)


def deployment(owner: Owner, spec: ConsoleSpec, namesrv_addr: str) -> dict[str, Any]:
    labels, match = _labels(owner), selector(owner)
    mounts: list[dict[str, Any]] = [
        {"name": "data", "mountPath": DATA_DIR},
        {"name": "tmp", "mountPath": pod.TMP_DIR},
    ]
    volumes: list[dict[str, Any]] = [
        {"name": "data", "emptyDir": {}},
        {"name": "tmp", "emptyDir": {}},
    ]
    if spec.auth is not None:
        volumes.append({"name": "users", "secret": {"secretName": spec.auth.secret_name}})
        mounts.append(
            {"name": "users", "mountPath": f"{DATA_DIR}/{USERS_FILE}", "subPath": USERS_FILE}
        )
    container: dict[str, Any] = {
        "name": "dashboard",
        "image": spec.image,
        "imagePullPolicy": spec.image_pull_policy,
        "env": [{"name": "JAVA_OPTS", "value": java_opts(spec, namesrv_addr)}],
        "ports": [{"name": "http", "containerPort": spec.port, "protocol": "TCP"}],
        "readinessProbe": pod.tcp_probe("http", period=10, failures=3),
        "livenessProbe": pod.tcp_probe("http", period=20, failures=6, initial_delay=60),
        "securityContext": {
            **pod.container_security_context(),
            # the JVM and Spring Boot write under the working directory and /tmp
            "readOnlyRootFilesystem": False,
        },
        "volumeMounts": mounts,
    }
    resources = {"requests": spec.resources.requests, "limits": spec.resources.limits}
    container["resources"] = {k: dict(v) for k, v in resources.items() if v}
    pod_spec: dict[str, Any] = {
        "securityContext": pod.pod_security_context(),
        "containers": [container],
        "volumes": volumes,
    }
    if spec.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": n} for n in spec.image_pull_secrets]
    tpl = template.customise(
        {"metadata": {"labels": labels}, "spec": pod_spec}, spec.template, None, match
    )
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": names.metadata(owner, console_name(owner.name), labels),
        "spec": {
            "replicas": spec.replicas,
            "selector": {"matchLabels": match},
            "template": tpl,
        },
    }


def service(owner: Owner, spec: ConsoleSpec) -> dict[str, Any]:
    svc = pod.service(
        names.metadata(owner, console_name(owner.name), _labels(owner)),
        selector(owner),
        [pod.service_port("http", spec.port)],
        headless=False,
    )
    svc["spec"]["type"] = spec.service_type
    return svc


def network_policy(owner: Owner, spec: ConsoleSpec) -> dict[str, Any] | None:
    if not spec.network_policy.enabled:
        return None
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": names.metadata(owner, console_name(owner.name), _labels(owner)),
        "spec": {
            "podSelector": {"matchLabels": selector(owner)},
            "policyTypes": ["Ingress"],
            "ingress": [
                {
                    "from": [dict(peer) for peer in spec.network_policy.from_],
                    "ports": [{"protocol": "TCP", "port": spec.port}],
                }
            ],
        },
    }


def url(owner: Owner, spec: ConsoleSpec, domain: str) -> str:
    return f"http://{console_name(owner.name)}.{owner.namespace}.svc.{domain}:{spec.port}"


def desired(owner: Owner, spec: ConsoleSpec, namesrv_addr: str) -> list[dict[str, Any]]:
    """The Console's objects in apply order."""
    owner.check_name()
    policy = network_policy(owner, spec)
    return [
        *([policy] if policy is not None else []),
        service(owner, spec),
        deployment(owner, spec, namesrv_addr),
    ]
