"""``spec.template`` and ``spec.rack``: what a platform team adds to the operator's pods (Strimzi's
``template.pod`` and ``rack``), as pydantic models exported into the CRDs.

Kubernetes' own types (affinity, volumes, env sources, security contexts, topology spread) are
kept as free-form objects here: the API server validates them when the StatefulSet is applied, and
an invalid one is reported as ``ReconcileFailed/ApplyRejected`` naming the object. What only the
operator can know, a name it already uses for its own env variable or volume, is refused here.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from ferrymq_operator.base_models import CamelModel

# Environment variables the operator sets on its containers (ferrymq_operator.builders.pod and
# security.builders); a template entry of the same name would silently shadow or be shadowed.
RESERVED_ENV = frozenset(
    {
        "POD_NAME",
        "POD_NAMESPACE",
        "POD_IP",
        "HOST_IP",
        "HOME",
        "FERRYMQ_PROBE_DIR",
        "FERRYMQ_brokerIP1",
        "FERRYMQ_brokerIP2",
        "FERRYMQ_listenPort",
        "FERRYMQ_ACCESS_KEY",
        "FERRYMQ_SECRET_KEY",
        "FERRYMQ_TLS_ENABLE",
        "FERRYMQ_TLS_CERT_PATH",
        "FERRYMQ_TLS_KEY_PATH",
    }
)
# Volumes (and so mount names) of the operator's pods.
RESERVED_VOLUMES = frozenset(
    {"config", "store", "logs", "tmp", "home", "acl", "tls", "advertised", "data", "users"}
)
# Paths the operator mounts; a template mount there or below would hide the operator's files.
RESERVED_MOUNT_PATHS = (
    "/etc/ferrymq",
    "/etc/ferrymq-acl",
    "/etc/ferrymq-tls",
    "/etc/ferrymq-advertised",
    "/home/ferrymq",
    "/tmp",
)


class PodMetadataTemplate(CamelModel):
    """Labels and annotations added to every pod (service meshes, cloud IAM, Vault agents)."""

    labels: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "Extra pod labels. The operator's own labels (app.kubernetes.io/*, ferrymq.io/*) win "
            "over a label of the same key, because the StatefulSet selects the pods by them."
        ),
    )
    annotations: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "Extra pod annotations, e.g. sidecar.istio.io/inject or vault.hashicorp.com/* ones. "
            "Changing them rolls the pods (they are part of the pod template)."
        ),
    )


class PodTemplate(CamelModel):
    """Additions to the pods of one component (brokers, NameServers or the controller)."""

    metadata: PodMetadataTemplate = Field(
        default_factory=PodMetadataTemplate, description="Pod labels and annotations."
    )
    env: list[dict[str, Any]] = Field(
        default_factory=list,
        description=(
            "Extra environment variables of the main container, as core/v1 EnvVar objects "
            "({name, value} or {name, valueFrom}); FERRYMQ_<key> overrides a conf key as the "
            "server reads them. Names the operator sets (POD_NAME, HOME, FERRYMQ_PROBE_DIR, ...) "
            "are refused."
        ),
    )
    service_account_name: str | None = Field(
        default=None,
        description=(
            "ServiceAccount of the pods (cloud IAM such as IRSA or Workload Identity); default "
            "the namespace's default account. Not allowed for the controller, whose account the "
            "operator creates with the rights on its Lease."
        ),
    )
    affinity: dict[str, Any] | None = Field(
        default=None,
        description=(
            "core/v1 Affinity. Its nodeAffinity and podAffinity replace nothing of the operator's; "
            "podAntiAffinity terms are added to the operator's (spec.podAntiAffinity)."
        ),
    )
    topology_spread_constraints: list[dict[str, Any]] = Field(
        default_factory=list,
        description=(
            "core/v1 TopologySpreadConstraint objects, added after the one spec.rack makes. "
            "Write the labelSelector yourself (e.g. app.kubernetes.io/instance: <name>)."
        ),
    )
    tolerations: list[dict[str, Any]] = Field(
        default_factory=list,
        description="core/v1 Toleration objects, added to spec.tolerations.",
    )
    volumes: list[dict[str, Any]] = Field(
        default_factory=list,
        description=(
            "Extra core/v1 Volume objects (Secrets, ConfigMaps, CSI). Names the operator uses "
            "(config, store, logs, tmp, home, acl, tls, advertised) are refused."
        ),
    )
    volume_mounts: list[dict[str, Any]] = Field(
        default_factory=list,
        description=(
            "core/v1 VolumeMount objects of the main container, for template volumes; not at or "
            "under /etc/ferrymq, /home/ferrymq or /tmp, where the operator mounts its own."
        ),
    )
    security_context: dict[str, Any] | None = Field(
        default=None,
        description=(
            "core/v1 PodSecurityContext; its keys replace the operator's defaults (runAsNonRoot, "
            "runAsUser/Group and fsGroup 10001, seccompProfile RuntimeDefault), the others stay."
        ),
    )
    container_security_context: dict[str, Any] | None = Field(
        default=None,
        description=(
            "core/v1 SecurityContext of the main container; its keys replace the operator's "
            "defaults (no privilege escalation, read-only root filesystem, all capabilities "
            "dropped), the others stay."
        ),
    )
    priority_class_name: str | None = Field(
        default=None, description="PriorityClass of the pods; overrides spec.priorityClassName."
    )

    @model_validator(mode="after")
    def _no_reserved_names(self) -> PodTemplate:
        problems = []
        for i, var in enumerate(self.env):
            name = var.get("name")
            if not isinstance(name, str) or not name:
                problems.append(f"env[{i}] has no name")
            elif name in RESERVED_ENV:
                problems.append(f"env[{i}] {name} is set by the operator; use another name")
        volume_names = set()
        for i, volume in enumerate(self.volumes):
            name = volume.get("name")
            if not isinstance(name, str) or not name:
                problems.append(f"volumes[{i}] has no name")
            elif name in RESERVED_VOLUMES:
                problems.append(f"volumes[{i}] {name!r} is a volume of the operator; rename it")
            else:
                volume_names.add(name)
        for i, mount in enumerate(self.volume_mounts):
            path = str(mount.get("mountPath", ""))
            if mount.get("name") not in volume_names:
                problems.append(
                    f"volumeMounts[{i}] names volume {mount.get('name')!r}, which is not in "
                    f"template volumes"
                )
            if any(path == p or path.startswith(p + "/") for p in RESERVED_MOUNT_PATHS):
                problems.append(
                    f"volumeMounts[{i}] mountPath {path!r} would hide the operator's files "
                    f"({', '.join(RESERVED_MOUNT_PATHS)}); mount elsewhere, e.g. /opt/extra"
                )
        if problems:
            raise ValueError("template: " + "; ".join(problems))
        return self


class BrokerTemplate(CamelModel):
    """Pod templates of a Broker's pods."""

    pod: PodTemplate = Field(default_factory=PodTemplate, description="The broker pods.")
    controller_pod: PodTemplate = Field(
        default_factory=PodTemplate,
        description="The controller pods (spec.failover controller); serviceAccountName refused.",
    )

    @model_validator(mode="after")
    def _controller_account(self) -> BrokerTemplate:
        if self.controller_pod.service_account_name:
            raise ValueError(
                "template.controllerPod.serviceAccountName: the controller runs with the account "
                "the operator creates for its Lease; remove it"
            )
        return self


class NameServerTemplate(CamelModel):
    """Pod template of a NameServer's pods."""

    pod: PodTemplate = Field(default_factory=PodTemplate, description="The NameServer pods.")


class RackSpec(CamelModel):
    """Zone awareness (Strimzi's ``rack``): a group's replicas go to different zones."""

    topology_key: str = Field(
        default="topology.kubernetes.io/zone",
        min_length=1,
        description=(
            "Node label naming the zone. The pods of one broker group (or the NameServers) are "
            "spread over its values with maxSkew 1 (so a master and its slave land in different "
            "zones), and pods only run on nodes that carry the label."
        ),
    )
    when_unsatisfiable: Literal["DoNotSchedule", "ScheduleAnyway"] = Field(
        default="DoNotSchedule",
        description=(
            "DoNotSchedule: a pod waits rather than share a zone with its group beyond the skew; "
            "ScheduleAnyway: spread as far as possible."
        ),
    )
