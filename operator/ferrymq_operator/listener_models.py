"""``spec.listeners`` of Broker and NameServer (Strimzi's listeners, within what RocketMQ allows).

A RocketMQ broker advertises one address to every client, ``brokerIP1:listenPort``, through its
NameServer registration: there is no per-client listener choice as in Kafka. So a Broker has its
internal listener (the headless Service, always there) and at most one external one, whose address
every client is then given: ``nodeport`` (one NodePort Service per pod, the node's address) or
``loadbalancer`` (one LoadBalancer Service per pod, its assigned address). Clients inside the
cluster reach the advertised external address as well (through the node or the load balancer).
NameServers answer routes only, so one Service in front of all of them is enough for either type.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints

from ferrymq_operator.base_models import CamelModel

ListenerType = Literal["internal", "nodeport", "loadbalancer"]
EXTERNAL_TYPES = ("nodeport", "loadbalancer")
ListenerName = Annotated[
    str, StringConstraints(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", min_length=1, max_length=11)
]


class ListenerSpec(CamelModel):
    """One way clients reach the pods."""

    name: ListenerName = Field(
        description=(
            "Listener name (a DNS label of at most 11 characters); it ends the names of the "
            "listener's Services and keys status.listeners."
        )
    )
    type: ListenerType = Field(
        description=(
            "internal: the headless Service, pod DNS names (always present); nodeport: one "
            "NodePort Service per broker pod (one for the NameServers), the broker listening on "
            "and advertising <node address>:<nodePort>; loadbalancer: one LoadBalancer Service per "
            "broker pod (one for the NameServers), the broker advertising the address the load "
            "balancer is given (brokerIP1, as upstream)."
        )
    )
    node_port_base: int | None = Field(
        default=None,
        ge=30000,
        le=32767,
        description=(
            "nodeport only: the nodePort of broker pod 0 (pod i gets nodePortBase + 10 * i, "
            "i = group * replicasPerGroup + brokerId), or of the NameServer Service. Default "
            "30911 for brokers, 30876 for NameServers."
        ),
    )
    annotations: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "Annotations of this listener's Services, e.g. a cloud's load balancer settings "
            "(service.beta.kubernetes.io/aws-load-balancer-type: nlb)."
        ),
    )
    load_balancer_source_ranges: list[str] = Field(
        default_factory=list,
        description="loadbalancer only: client CIDRs the load balancer admits (empty: any).",
    )
    load_balancer_class: str | None = Field(
        default=None,
        description="loadbalancer only: spec.loadBalancerClass of the Services (Kubernetes 1.24+).",
    )

    @property
    def external(self) -> bool:
        return self.type in EXTERNAL_TYPES


class ListenerStatus(CamelModel):
    """Where clients reach one listener (status.listeners)."""

    name: str = Field(description="The listener's name.")
    type: str = Field(description="internal, nodeport, loadbalancer or hostnetwork.")
    addresses: list[str] = Field(
        default_factory=list,
        description=(
            "host:port of every pod (Broker: what each broker advertises; NameServer: the "
            "namesrvAddr entries clients use). Empty while a load balancer has no address yet."
        ),
    )
    pending: list[str] = Field(
        default_factory=list,
        description="Services still waiting for a load balancer address.",
    )


def check_listeners(listeners: list[ListenerSpec], host_network: bool) -> None:
    """Rules the schema cannot state; raises ValueError naming the field and the fix."""
    seen: set[str] = set()
    for listener in listeners:
        if listener.name in seen:
            raise ValueError(f"listeners: the name {listener.name!r} is used twice; rename one")
        seen.add(listener.name)
        if listener.type != "nodeport" and listener.node_port_base is not None:
            raise ValueError(
                f"listeners[{listener.name}].nodePortBase applies to type nodeport only; remove it"
            )
        if listener.type != "loadbalancer" and (
            listener.load_balancer_source_ranges or listener.load_balancer_class
        ):
            raise ValueError(
                f"listeners[{listener.name}]: loadBalancerSourceRanges and loadBalancerClass "
                f"apply to type loadbalancer only; remove them"
            )
    external = [listener for listener in listeners if listener.external]
    if len(external) > 1:
        raise ValueError(
            "listeners: a RocketMQ broker advertises one address (brokerIP1) to every client, so "
            f"only one listener may be nodeport or loadbalancer (got "
            f"{', '.join(listener.name for listener in external)}); keep one"
        )
    if external and host_network:
        raise ValueError(
            f"listeners[{external[0].name}] type {external[0].type} needs pods on the pod network, "
            "but hostNetwork is true; clients reach host-network pods at the node address already"
        )
