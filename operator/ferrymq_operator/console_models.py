"""The ``Console`` custom resource: rocketmq-dashboard for a Broker (as rocketmq-operator's
Console). The dashboard is not published to any registry the operator could default to, so the
image is the user's: build it from apache/rocketmq-dashboard and push it where the cluster pulls.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, ValidationError

from ferrymq_operator.base_models import CamelModel
from ferrymq_operator.models import (
    ClusterStatus,
    DnsLabel,
    InvalidSpec,
    ResourceRequirements,
    explain,
)
from ferrymq_operator.template_models import PodTemplate

DEFAULT_CONSOLE_PORT = 8082  # rocketmq-dashboard's server.port


class BrokerRef(CamelModel):
    """A Broker custom resource in the Console's namespace."""

    name: DnsLabel = Field(description="metadata.name of the Broker.")


class ConsoleAuth(CamelModel):
    """rocketmq-dashboard's login (rocketmq.config.loginRequired)."""

    secret_name: DnsLabel = Field(
        description=(
            "Secret with the key users.properties in rocketmq-dashboard's format, one user per "
            "line: name=password, or name=password,1 for an administrator."
        )
    )


class ConsoleNetworkPolicy(CamelModel):
    """Who may reach the console's port."""

    enabled: bool = Field(default=True, description="Create the NetworkPolicy.")
    from_: list[dict[str, Any]] = Field(
        default_factory=lambda: [{"podSelector": {}}],
        alias="from",
        description=(
            "core/v1 NetworkPolicyPeer objects admitted to the console port; default every pod "
            "of the namespace. Add a namespaceSelector for an ingress controller."
        ),
    )


class ConsoleSpec(CamelModel):
    """Desired state of a rocketmq-dashboard pointed at a Broker's NameServers."""

    broker_ref: BrokerRef = Field(
        description="The Broker whose NameServers the dashboard reads (rocketmq.namesrv.addr)."
    )
    image: str = Field(
        min_length=1,
        description=(
            "rocketmq-dashboard image (built from apache/rocketmq-dashboard and pushed to a "
            "registry the cluster pulls from); no default exists."
        ),
    )
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = Field(
        default="IfNotPresent", description="imagePullPolicy of the container."
    )
    image_pull_secrets: list[DnsLabel] = Field(
        default_factory=list, description="Names of Secrets used to pull the image."
    )
    replicas: int = Field(default=1, ge=0, le=5, description="Dashboard pods.")
    port: int = Field(
        default=DEFAULT_CONSOLE_PORT, ge=1, le=65535, description="server.port of the dashboard."
    )
    service_type: Literal["ClusterIP", "NodePort", "LoadBalancer"] = Field(
        default="ClusterIP", description="Type of the console's Service."
    )
    auth: ConsoleAuth | None = Field(
        default=None, description="Require a login (users from a Secret); none: open."
    )
    network_policy: ConsoleNetworkPolicy = Field(
        default_factory=ConsoleNetworkPolicy,
        description="A NetworkPolicy admitting only the given peers to the console port.",
    )
    java_opts: str = Field(
        default="-Xms256m -Xmx256m",
        description="JAVA_OPTS besides the ones the operator sets (rocketmq.* properties).",
    )
    resources: ResourceRequirements = Field(
        default_factory=lambda: ResourceRequirements(requests={"cpu": "100m", "memory": "384Mi"}),
        description="Requests and limits; default requests cpu 100m, memory 384Mi.",
    )
    template: PodTemplate = Field(
        default_factory=PodTemplate,
        description="Labels, annotations, env, service account, placement and volumes of the pods.",
    )


class ConsoleStatus(ClusterStatus):
    """Written by the operator."""

    name_server_addr: str | None = Field(
        default=None, description="rocketmq.namesrv.addr the dashboard uses."
    )
    url: str | None = Field(default=None, description="The console's address inside the cluster.")


def parse_console_spec(spec: dict[str, Any]) -> ConsoleSpec:
    """Parse a Console spec or raise InvalidSpec naming every bad key."""
    try:
        return ConsoleSpec.model_validate(spec)
    except ValidationError as error:
        raise InvalidSpec(explain(error)) from error
