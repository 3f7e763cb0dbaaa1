"""External listeners (``spec.listeners``, ``spec.externalAccess``) -> Services, the advertised
address of each broker, and ``status.listeners`` (pure).

A broker advertises ``brokerIP1:listenPort`` (upstream). With a ``nodeport`` listener each pod
listens on its own nodePort and ``brokerIP1`` is its node's address (downward API). With a
``loadbalancer`` listener the address exists only once the cloud gives the pod's Service one: the
operator reads it from the Service status and writes it to the ConfigMap ``<b>-broker-advertised``
(key: pod name), which every broker pod mounts; the container waits for its key before it starts
the broker with ``FERRYMQ_brokerIP1`` set to it (a broker that registered its pod IP first would
hand clients an address they cannot reach). ``brokerIP2`` stays the pod IP: replication between a
master and its slaves does not leave the pod network (as upstream's haServerAddr uses brokerIP2).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ferrymq_operator import models
from ferrymq_operator.builders import names, pod
from ferrymq_operator.builders.names import Owner
from ferrymq_operator.listener_models import ListenerSpec

ADVERTISED_DIR = "/etc/ferrymq-advertised"
ADVERTISED_VOLUME = "advertised"
BROKER_IP1_ENV = "FERRYMQ_brokerIP1"
BROKER_IP2_ENV = "FERRYMQ_brokerIP2"
ADVERTISED_SUFFIX = "-broker-advertised"
NAMESRV_EXTERNAL_SUFFIX = "-namesrv-external"


def advertised_configmap_name(cr_name: str) -> str:
    return f"{cr_name}{ADVERTISED_SUFFIX}"


def namesrv_external_service_name(cr_name: str) -> str:
    return f"{cr_name}{NAMESRV_EXTERNAL_SUFFIX}"


def _service(
    owner: Owner,
    name: str,
    labels: dict[str, str],
    selector: dict[str, str],
    listener_type: str,
    port: int,
    node_port: int | None,
    listener: ListenerSpec | None,
) -> dict[str, Any]:
    port_spec: dict[str, Any] = {"name": "client", "port": port, "targetPort": port}
    port_spec["protocol"] = "TCP"
    if node_port is not None:
        port_spec["nodePort"] = node_port
    spec: dict[str, Any] = {
        "type": "LoadBalancer" if listener_type == "loadbalancer" else "NodePort",
        # Local: the client's address is kept and no second hop is taken; a broker's Service has
        # exactly one endpoint, on the node the address names.
        "externalTrafficPolicy": "Local",
        "selector": selector,
        "ports": [port_spec],
    }
    metadata = names.metadata(owner, name, labels)
    if listener is not None:
        apply_listener(metadata, spec, listener)
    return {"apiVersion": "v1", "kind": "Service", "metadata": metadata, "spec": spec}


def apply_listener(metadata: dict[str, Any], spec: dict[str, Any], listener: ListenerSpec) -> None:
    """A listener's annotations and load balancer settings onto a Service's metadata and spec."""
    if listener.annotations:
        metadata["annotations"] = dict(listener.annotations)
    if listener.load_balancer_source_ranges:
        spec["loadBalancerSourceRanges"] = list(listener.load_balancer_source_ranges)
    if listener.load_balancer_class:
        spec["loadBalancerClass"] = listener.load_balancer_class


def _group_labels(owner: Owner, group: int) -> dict[str, str]:
    return {
        **names.common_labels(owner, names.COMPONENT_BROKER),
        names.LABEL_GROUP: names.broker_name(owner.name, group),
        names.LABEL_GROUP_INDEX: str(group),
    }


def broker_services(owner: Owner, spec: models.BrokerSpec) -> list[dict[str, Any]]:
    """One Service per broker pod for NodePort or LoadBalancer access (none otherwise).

    NodePort: the nodePort is the pod's own listenPort (it advertises ``<node>:<listenPort>``).
    LoadBalancer: the port is ``spec.listenPort``; the address is the load balancer's.
    """
    access = spec.access_type
    if access not in ("NodePort", "LoadBalancer"):
        return []
    kind = "nodeport" if access == "NodePort" else "loadbalancer"
    out = []
    for group in range(spec.groups):
        for broker_id in range(spec.replicas_per_group):
            listen, _ = spec.pod_ports(group, broker_id)
            out.append(
                _service(
                    owner,
                    names.broker_external_service(owner.name, group, broker_id),
                    _group_labels(owner, group),
                    {names.LABEL_POD_NAME: names.broker_pod(owner.name, group, broker_id)},
                    kind,
                    listen,
                    listen if access == "NodePort" else None,
                    spec.external_listener,
                )
            )
    return out


def namesrv_external(spec: models.NameServerSpec) -> ListenerSpec | None:
    return next((listener for listener in spec.listeners if listener.external), None)


def namesrv_services(owner: Owner, spec: models.NameServerSpec) -> list[dict[str, Any]]:
    """One Service in front of every NameServer (any of them answers a route query)."""
    listener = namesrv_external(spec)
    if listener is None:
        return []
    node_port = None
    if listener.type == "nodeport":
        node_port = listener.node_port_base or models.DEFAULT_NAMESRV_NODE_PORT
    service = _service(
        owner,
        namesrv_external_service_name(owner.name),
        names.common_labels(owner, names.COMPONENT_NAMESRV),
        names.selector_labels(owner, names.COMPONENT_NAMESRV),
        listener.type,
        spec.port,
        node_port,
        listener,
    )
    # several NameServers behind one Service: any node forwards (Local would drop traffic
    # reaching a node without a NameServer)
    service["spec"]["externalTrafficPolicy"] = "Cluster"
    return [service]


def load_balancer_host(service: Mapping[str, Any] | None) -> str | None:
    """The address a cloud gave a LoadBalancer Service (IP, else host name); None until then."""
    ingress = (((service or {}).get("status") or {}).get("loadBalancer") or {}).get("ingress")
    for entry in ingress or []:
        host = entry.get("ip") or entry.get("hostname")
        if host:
            return str(host)
    return None


def broker_lb_hosts(
    owner: Owner, spec: models.BrokerSpec, services: Sequence[Mapping[str, Any]]
) -> dict[str, str]:
    """Pod name -> load balancer address, for the pods whose Service has one."""
    if spec.access_type != "LoadBalancer":
        return {}
    by_name = {s["metadata"]["name"]: s for s in services}
    out = {}
    for group in range(spec.groups):
        for broker_id in range(spec.replicas_per_group):
            svc = by_name.get(names.broker_external_service(owner.name, group, broker_id))
            host = load_balancer_host(svc)
            if host is not None:
                out[names.broker_pod(owner.name, group, broker_id)] = host
    return out


def advertised_configmap(
    owner: Owner, spec: models.BrokerSpec, hosts: Mapping[str, str]
) -> dict[str, Any] | None:
    """``<b>-broker-advertised``: pod name -> the host it advertises (LoadBalancer only)."""
    if spec.access_type != "LoadBalancer":
        return None
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": names.metadata(
            owner,
            advertised_configmap_name(owner.name),
            names.common_labels(owner, names.COMPONENT_BROKER),
        ),
        "data": dict(sorted(hosts.items())),
    }


def broker_env(spec: models.BrokerSpec) -> list[dict[str, Any]]:
    """brokerIP1 (node address) for host network and NodePort; brokerIP2 the pod IP whenever
    brokerIP1 is not, so that replication stays on the pod network."""
    access = spec.access_type
    out = []
    if spec.host_network or access in ("HostNetwork", "NodePort"):
        out.append(pod.field_env(BROKER_IP1_ENV, "status.hostIP"))
    if access in ("NodePort", "LoadBalancer") and not spec.host_network:
        out.append(pod.field_env(BROKER_IP2_ENV, "status.podIP"))
    return out


def wait_for_address(spec: models.BrokerSpec, command: str) -> str:
    """The broker's shell command, first waiting (LoadBalancer) for the pod's advertised host."""
    if spec.access_type != "LoadBalancer":
        return command
    key = f"{ADVERTISED_DIR}/$POD_NAME"
    return (
        f'until [ -s "{key}" ]; do echo "waiting for the load balancer address of $POD_NAME"; '
        f'sleep 5; done; export {BROKER_IP1_ENV}="$(cat "{key}")"; {command}'
    )


def broker_volumes(owner: Owner, spec: models.BrokerSpec) -> list[dict[str, Any]]:
    if spec.access_type != "LoadBalancer":
        return []
    return [
        {
            "name": ADVERTISED_VOLUME,
            # optional: the pod starts (and waits) before the operator wrote the first address
            "configMap": {"name": advertised_configmap_name(owner.name), "optional": True},
        }
    ]


def broker_mounts(spec: models.BrokerSpec) -> list[dict[str, Any]]:
    if spec.access_type != "LoadBalancer":
        return []
    return [{"name": ADVERTISED_VOLUME, "mountPath": ADVERTISED_DIR, "readOnly": True}]


def broker_status(
    owner: Owner,
    spec: models.BrokerSpec,
    domain: str,
    lb_hosts: Mapping[str, str],
    host_ips: Mapping[str, str],
) -> list[dict[str, Any]]:
    """status.listeners: the internal addresses and, with external access, what every broker
    advertises (``host_ips``: pod name -> its node address, from the pods)."""
    internal = [
        names.broker_pod_address(owner.name, owner.namespace, g, i, domain, spec.pod_ports(g, i)[0])
        for g in range(spec.groups)
        for i in range(spec.replicas_per_group)
    ]
    out: list[dict[str, Any]] = [{"name": "internal", "type": "internal", "addresses": internal}]
    access = spec.access_type
    if access is None:
        return out
    listener = spec.external_listener
    name = listener.name if listener is not None else "external"
    kind = {"NodePort": "nodeport", "LoadBalancer": "loadbalancer"}.get(access, "hostnetwork")
    addresses, pending = [], []
    for g in range(spec.groups):
        for i in range(spec.replicas_per_group):
            pod_name = names.broker_pod(owner.name, g, i)
            host = (lb_hosts if access == "LoadBalancer" else host_ips).get(pod_name)
            port = spec.listen_port if access == "LoadBalancer" else spec.pod_ports(g, i)[0]
            if host is None:
                pending.append(names.broker_external_service(owner.name, g, i))
            else:
                addresses.append(f"{host}:{port}")
    entry: dict[str, Any] = {"name": name, "type": kind, "addresses": addresses}
    if pending and access == "LoadBalancer":
        entry["pending"] = pending
    out.append(entry)
    return out


def namesrv_status(
    owner: Owner,
    spec: models.NameServerSpec,
    internal_addresses: str,
    external_service: Mapping[str, Any] | None,
    host_ips: Sequence[str],
) -> list[dict[str, Any]]:
    """status.listeners of a NameServer: the namesrvAddr entries of each listener."""
    out: list[dict[str, Any]] = [
        {"name": "internal", "type": "internal", "addresses": internal_addresses.split(";")}
    ]
    listener = namesrv_external(spec)
    if listener is None:
        return out
    entry: dict[str, Any] = {"name": listener.name, "type": listener.type, "addresses": []}
    if listener.type == "loadbalancer":
        host = load_balancer_host(external_service)
        if host is None:
            entry["pending"] = [namesrv_external_service_name(owner.name)]
        else:
            entry["addresses"] = [f"{host}:{spec.port}"]
    else:
        node_port = listener.node_port_base or models.DEFAULT_NAMESRV_NODE_PORT
        entry["addresses"] = [f"{ip}:{node_port}" for ip in sorted(set(host_ips))]
    out.append(entry)
    return out
