"""``spec.proxy`` of a Broker -> the standalone 5.x gRPC proxy: rmq-proxy.json ConfigMap,
Deployment, Service and (replicas > 1) PodDisruptionBudget (pure).

The proxy is ``ferrymq proxy -pm cluster`` (upstream's ``mqproxy -pm cluster``) in the broker image:
stateless, it finds the brokers of ``rocketMQClusterName`` through ``namesrvAddr``, so a Deployment
behind one Service is enough, and any pod serves any 5.x client.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ferrymq_operator.builders import listeners as listener_builder
from ferrymq_operator.builders import names, pod, template
from ferrymq_operator.builders.names import Owner
from ferrymq_operator.models import BrokerSpec, ProxySpec

COMPONENT_PROXY = "proxy"
CONFIG_DIR = "/etc/ferrymq-proxy"
CONFIG_FILE = "rmq-proxy.json"
DEFAULT_NODE_PORT = 30081


def proxy_name(cr_name: str) -> str:
    """Name of the proxy's ConfigMap, Deployment, Service and PodDisruptionBudget."""
    return f"{cr_name}-proxy"


def _labels(owner: Owner) -> dict[str, str]:
    return names.common_labels(owner, COMPONENT_PROXY)


def selector(owner: Owner) -> dict[str, str]:
    return names.selector_labels(owner, COMPONENT_PROXY)


def cluster_name(owner: Owner, spec: BrokerSpec) -> str:
    return spec.cluster_name or owner.name


def proxy_config(owner: Owner, spec: BrokerSpec, proxy: ProxySpec, addr: str) -> dict[str, Any]:
    """rmq-proxy.json (upstream ProxyConfig keys): the user's extras, then what the operator owns."""
    return {
        **proxy.config,
        "rocketMQClusterName": cluster_name(owner, spec),
        "namesrvAddr": addr,
        "grpcServerPort": proxy.grpc_port,
        "proxyMode": "cluster",
    }


def configmap(owner: Owner, spec: BrokerSpec, proxy: ProxySpec, addr: str) -> dict[str, Any]:
    text = json.dumps(proxy_config(owner, spec, proxy, addr), indent=2, sort_keys=True) + "\n"
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": names.metadata(owner, proxy_name(owner.name), _labels(owner)),
        "data": {CONFIG_FILE: text},
    }


def deployment(owner: Owner, spec: BrokerSpec, proxy: ProxySpec, addr: str) -> dict[str, Any]:
    labels, match = _labels(owner), selector(owner)
    data = configmap(owner, spec, proxy, addr)["data"]
    container: dict[str, Any] = {
        "name": "proxy",
        "image": proxy.image or spec.image,
        "imagePullPolicy": spec.image_pull_policy,
        "args": ["proxy", "-pc", f"{CONFIG_DIR}/{CONFIG_FILE}", "-pm", "cluster"],
        "env": [{"name": "HOME", "value": pod.WRITABLE_HOME}],
        "ports": [{"name": "grpc", "containerPort": proxy.grpc_port, "protocol": "TCP"}],
        "readinessProbe": pod.tcp_probe("grpc", period=10, failures=3),
        "livenessProbe": pod.tcp_probe("grpc", period=20, failures=6, initial_delay=30),
        "securityContext": pod.container_security_context(),
        "volumeMounts": [
            {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
            {"name": "tmp", "mountPath": pod.TMP_DIR},
        ],
    }
    resources = {"requests": proxy.resources.requests, "limits": proxy.resources.limits}
    container["resources"] = {k: dict(v) for k, v in resources.items() if v}
    pod_spec: dict[str, Any] = {
        "securityContext": pod.pod_security_context(),
        "containers": [container],
        "volumes": [
            {"name": "config", "configMap": {"name": proxy_name(owner.name)}},
            {"name": "tmp", "emptyDir": {}},
        ],
    }
    if spec.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": n} for n in spec.image_pull_secrets]
    tpl = template.customise(
        pod.pod_template(labels, pod.config_hash(data), pod_spec), proxy.template, None, match
    )
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": names.metadata(owner, proxy_name(owner.name), labels),
        "spec": {"replicas": proxy.replicas, "selector": {"matchLabels": match}, "template": tpl},
    }


def service(owner: Owner, proxy: ProxySpec) -> dict[str, Any]:
    """The endpoint of 5.x clients: ClusterIP, or NodePort/LoadBalancer with such a listener."""
    svc = pod.service(
        names.metadata(owner, proxy_name(owner.name), _labels(owner)),
        selector(owner),
        [pod.service_port("grpc", proxy.grpc_port)],
        headless=False,
    )
    listener = proxy.external_listener
    if listener is not None:
        svc["spec"]["type"] = "NodePort" if listener.type == "nodeport" else "LoadBalancer"
        if listener.type == "nodeport":
            svc["spec"]["ports"][0]["nodePort"] = listener.node_port_base or DEFAULT_NODE_PORT
        listener_builder.apply_listener(svc["metadata"], svc["spec"], listener)
    return svc


def pdb(owner: Owner, proxy: ProxySpec, api_version: str) -> dict[str, Any] | None:
    """With several proxies, a voluntary disruption takes at most one of them at a time."""
    if proxy.replicas < 2:
        return None
    return {
        "apiVersion": api_version,
        "kind": "PodDisruptionBudget",
        "metadata": names.metadata(owner, proxy_name(owner.name), _labels(owner)),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector(owner)}},
    }


def desired(
    owner: Owner, spec: BrokerSpec, addr: str, pdb_api_version: str
) -> list[dict[str, Any]]:
    """The proxy's objects in apply order (none without spec.proxy)."""
    proxy = spec.proxy
    if proxy is None:
        return []
    budget = pdb(owner, proxy, pdb_api_version)
    return [
        configmap(owner, spec, proxy, addr),
        service(owner, proxy),
        deployment(owner, spec, proxy, addr),
        *([budget] if budget is not None else []),
    ]


# kinds of the proxy's objects, for deleting them once spec.proxy is removed (PDB: its version)
KINDS = (("v1", "ConfigMap"), ("v1", "Service"), ("apps/v1", "Deployment"))


def endpoint(owner: Owner, proxy: ProxySpec, domain: str) -> str:
    return f"{proxy_name(owner.name)}.{owner.namespace}.svc.{domain}:{proxy.grpc_port}"


def external_endpoint(proxy: ProxySpec, svc: Mapping[str, Any] | None) -> str | None:
    """nodeport: ``*:<nodePort>`` (any node's address); loadbalancer: its address once assigned."""
    listener = proxy.external_listener
    if listener is None:
        return None
    if listener.type == "nodeport":
        return f"*:{listener.node_port_base or DEFAULT_NODE_PORT}"
    host = listener_builder.load_balancer_host(svc)
    return None if host is None else f"{host}:{proxy.grpc_port}"


def status(
    owner: Owner,
    proxy: ProxySpec,
    domain: str,
    deploy: Mapping[str, Any] | None,
    svc: Mapping[str, Any] | None,
) -> tuple[dict[str, Any], bool, str]:
    """status.proxy, whether the proxy is ready, and the ProxyReady condition's message."""
    observed = (deploy or {}).get("status") or {}
    ready = int(observed.get("readyReplicas") or 0)
    entry: dict[str, Any] = {
        "endpoint": endpoint(owner, proxy, domain),
        "replicas": proxy.replicas,
        "readyReplicas": ready,
    }
    external = external_endpoint(proxy, svc)
    if external is not None:
        entry["externalEndpoint"] = external
    generation = int(((deploy or {}).get("metadata") or {}).get("generation") or 0)
    current = int(observed.get("observedGeneration") or 0) >= generation
    if deploy is None:
        return entry, False, f"Deployment {proxy_name(owner.name)} does not exist yet"
    if ready >= proxy.replicas and current:
        return entry, True, f"{ready}/{proxy.replicas} proxy pods ready"
    return entry, False, f"{min(ready, proxy.replicas)}/{proxy.replicas} proxy pods ready"
