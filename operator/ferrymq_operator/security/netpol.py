"""NetworkPolicy of a Broker: per group, ingress only to the ports clients and replicas need (pure).

* client ports (``listenPort`` and the VIP channel ``listenPort - 2``) and the metrics port: from
  anywhere (clients, the operator's admin calls, Prometheus);
* the HA port (``haListenPort``): only from the pods of the same group (the slaves);
* everything else is refused once a policy selects the pods.

One policy per group because the HA rule is per group; with per-pod ports (NodePort) every pod's
own ports are listed. Pods on the host network are not subject to NetworkPolicy (Kubernetes), so
``hostNetwork: true`` gets no policy.
"""

from __future__ import annotations

from typing import Any

from ferrymq_operator.builders import broker as broker_builder
from ferrymq_operator.builders import names
from ferrymq_operator.builders.names import Owner
from ferrymq_operator.models import BrokerSpec

API_VERSION = "networking.k8s.io/v1"


def policy_name(cr_name: str, group: int) -> str:
    return names.broker_statefulset(cr_name, group)


def _tcp(ports: list[int]) -> list[dict[str, Any]]:
    return [{"protocol": "TCP", "port": p} for p in sorted(set(ports))]


def group_policy(owner: Owner, spec: BrokerSpec, group: int) -> dict[str, Any]:
    public: list[int] = []
    ha: list[int] = []
    for broker_id in range(spec.replicas_per_group):
        listen, ha_port = spec.pod_ports(group, broker_id)
        public += [listen, listen - 2]
        metrics = broker_builder.pod_metrics_port(spec, group, broker_id)
        if metrics is not None:
            public.append(metrics)
        ha.append(ha_port)
    selector = broker_builder.group_selector(owner, group)
    return {
        "apiVersion": API_VERSION,
        "kind": "NetworkPolicy",
        "metadata": names.metadata(
            owner, policy_name(owner.name, group), broker_builder.group_labels(owner, group)
        ),
        "spec": {
            "podSelector": {"matchLabels": selector},
            "policyTypes": ["Ingress"],
            "ingress": [
                {"ports": _tcp(public)},
                {"from": [{"podSelector": {"matchLabels": selector}}], "ports": _tcp(ha)},
            ],
        },
    }


def desired(owner: Owner, spec: BrokerSpec) -> list[dict[str, Any]]:
    if not spec.network_policy or spec.host_network:
        return []
    return [group_policy(owner, spec, group) for group in range(spec.groups)]
