"""Listener addresses: read the external Services and pods, publish the load balancer addresses
the broker pods wait for, and give ``status.listeners`` (decisions in builders.listeners)."""

from __future__ import annotations

from typing import Any

from ferrymq_operator import k8s, models
from ferrymq_operator.builders import listeners, names
from ferrymq_operator.builders.names import Owner


def _selector(owner: Owner, component: str) -> str:
    labels = names.selector_labels(owner, component)
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


async def _host_ips(kube: k8s.Kube, owner: Owner, component: str) -> dict[str, str]:
    """Pod name -> the address of its node (status.hostIP), for the pods scheduled so far."""
    pods = await kube.list("v1", "Pod", owner.namespace, _selector(owner, component))
    return {
        p["metadata"]["name"]: p["status"]["hostIP"]
        for p in pods
        if (p.get("status") or {}).get("hostIP")
    }


async def advertise_broker(
    kube: k8s.Kube, owner: Owner, spec: models.BrokerSpec, domain: str
) -> list[dict[str, Any]]:
    """With a loadbalancer listener, write the addresses assigned so far to the ConfigMap the
    pods wait on; returns ``status.listeners``."""
    lb_hosts: dict[str, str] = {}
    if spec.access_type == "LoadBalancer":
        services = await kube.list(
            "v1", "Service", owner.namespace, _selector(owner, names.COMPONENT_BROKER)
        )
        lb_hosts = listeners.broker_lb_hosts(owner, spec, services)
        configmap = listeners.advertised_configmap(owner, spec, lb_hosts)
        if configmap is not None:
            await kube.apply(configmap)
    host_ips: dict[str, str] = {}
    if spec.access_type in ("NodePort", "HostNetwork"):
        host_ips = await _host_ips(kube, owner, names.COMPONENT_BROKER)
    return listeners.broker_status(owner, spec, domain, lb_hosts, host_ips)


async def nameserver_listeners(
    kube: k8s.Kube, owner: Owner, spec: models.NameServerSpec, internal: str
) -> list[dict[str, Any]]:
    """``status.listeners`` of a NameServer."""
    listener = listeners.namesrv_external(spec)
    service = None
    host_ips: list[str] = []
    if listener is not None and listener.type == "loadbalancer":
        service = await kube.get(
            "v1", "Service", owner.namespace, listeners.namesrv_external_service_name(owner.name)
        )
    elif listener is not None:
        host_ips = list((await _host_ips(kube, owner, names.COMPONENT_NAMESRV)).values())
    return listeners.namesrv_status(owner, spec, internal, service, host_ips)
