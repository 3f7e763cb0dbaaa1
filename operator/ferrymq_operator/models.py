"""Custom resource models (group ``ferrymq.io``, version ``v1alpha1``): the source of ``crds/``.

Two layers of validation come from these classes:

* the structural part (types, enums, ranges, patterns, defaults) is exported by ``crdgen`` into the
  CRD's openAPIV3Schema, so the API server refuses a bad custom resource before the operator sees it;
* the cross-field rules (``model_validator``) cannot be expressed in a Kubernetes 1.20 schema (no CEL),
  so the operator parses every spec with these models and turns a failure into a ``ReconcileFailed``
  condition whose message names the key and what to change (see :func:`explain`).

Field names are camelCase on the wire (aliases) and snake_case in Python.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Annotated, Any, Literal

from pydantic import (
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from ferrymq_operator.base_models import CamelModel
from ferrymq_operator.images import BROKER_IMAGE, SPARK_IMAGE
from ferrymq_operator.listener_models import ListenerSpec, ListenerStatus, check_listeners
from ferrymq_operator.template_models import (
    BrokerTemplate,
    NameServerTemplate,
    PodTemplate,
    RackSpec,
)

GROUP = "ferrymq.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

DEFAULT_IMAGE = BROKER_IMAGE
DEFAULT_AUDIT_IMAGE = SPARK_IMAGE

DEFAULT_NAMESRV_PORT = 9876
DEFAULT_LISTEN_PORT = 10911
# /metrics of brokers and NameServers unless spec.config sets metricsPort (upstream's
# metricsPromExporterPort default).
DEFAULT_METRICS_PORT = 5557
# With per-pod ports, pod i of a Broker uses listenPort + PORT_STRIDE * i: room for the fast
# channel (listenPort - 2), haListenPort (listenPort + 1) and a metricsPort offset per pod.
PORT_STRIDE = 10
# NodePort Services may only use this range (the API server's default --service-node-port-range).
NODE_PORT_RANGE = (30000, 32767)
DEFAULT_BROKER_NODE_PORT_BASE = 30911
DEFAULT_NAMESRV_NODE_PORT = 30876

# Kubernetes resource quantity (the subset users write: plain, decimal SI and binary SI suffixes).
QUANTITY_PATTERN = r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$"
# A DNS-1123 label (names of objects we refer to, e.g. a NameServer).
DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
# Java properties key as broker.conf uses them (upstream keys are camelCase identifiers).
PROPERTY_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9_.]*$")

Quantity = Annotated[str, StringConstraints(pattern=QUANTITY_PATTERN)]
DnsLabel = Annotated[str, StringConstraints(pattern=DNS_LABEL_PATTERN, min_length=1, max_length=63)]

_QUANTITY_SUFFIX: dict[str, Decimal] = {
    "": Decimal(1),
    "m": Decimal("0.001"),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "P": Decimal(10**15),
    "E": Decimal(10**18),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}


def parse_quantity(text: str) -> Decimal:
    """Value of a quantity matching QUANTITY_PATTERN (``"500m"`` -> 0.5, ``"1Gi"`` -> 1073741824)."""
    match = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)([A-Za-z]*)", text)
    if match is None or match.group(2) not in _QUANTITY_SUFFIX:
        raise ValueError(f"{text!r} is not a Kubernetes quantity such as 500m, 2, 512Mi or 10Gi")
    return Decimal(match.group(1)) * _QUANTITY_SUFFIX[match.group(2)]


class ResourceRequirements(CamelModel):
    """Container requests and limits, as in a Pod spec."""

    requests: dict[str, Quantity] = Field(
        default_factory=dict, description="Minimum resources, e.g. {cpu: 500m, memory: 1Gi}."
    )
    limits: dict[str, Quantity] = Field(
        default_factory=dict, description="Maximum resources, e.g. {cpu: '2', memory: 4Gi}."
    )

    @model_validator(mode="after")
    def _requests_within_limits(self) -> ResourceRequirements:
        for name, request in self.requests.items():
            limit = self.limits.get(name)
            if limit is not None and parse_quantity(request) > parse_quantity(limit):
                raise ValueError(
                    f"requests.{name} ({request}) is larger than limits.{name} ({limit}); "
                    f"lower the request or raise the limit"
                )
        return self


class Toleration(CamelModel):
    """A Pod toleration (same fields as core/v1 Toleration)."""

    key: str | None = Field(default=None, description="Taint key; empty with Exists: any.")
    operator: Literal["Exists", "Equal"] = Field(
        default="Equal", description="Equal: the taint's value must be value; Exists: any value."
    )
    value: str | None = Field(default=None, description="Taint value for operator Equal.")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        default=None, description="Taint effect to tolerate; empty: all effects."
    )
    toleration_seconds: int | None = Field(
        default=None,
        ge=0,
        description="NoExecute only: how long the pod stays on a node after the taint appears.",
    )


# Requests the pods get when spec.resources is not given: enough to make them Burstable rather
# than BestEffort (a BestEffort pod gets the minimum CPU weight and is the first evicted), small
# enough for a development node. Size them for your load.
DEFAULT_BROKER_REQUESTS = {"cpu": "100m", "memory": "256Mi"}
DEFAULT_NAMESRV_REQUESTS = {"cpu": "50m", "memory": "128Mi"}


def _default_resources(requests: dict[str, str]) -> ResourceRequirements:
    return ResourceRequirements(requests=dict(requests))


class PodSpecCommon(CamelModel):
    """Image and scheduling fields shared by NameServer and Broker pods."""

    image: str = Field(default=DEFAULT_IMAGE, min_length=1, description="Container image.")
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = Field(
        default="IfNotPresent", description="imagePullPolicy of the containers."
    )
    image_pull_secrets: list[DnsLabel] = Field(
        default_factory=list, description="Names of Secrets used to pull the image."
    )
    resources: ResourceRequirements = Field(default_factory=ResourceRequirements)
    node_selector: dict[str, str] = Field(
        default_factory=dict, description="Node labels the pods must run on."
    )
    tolerations: list[Toleration] = Field(
        default_factory=list, description="Taints the pods tolerate."
    )
    priority_class_name: str | None = Field(
        default=None, description="PriorityClass of the pods (preemption and eviction order)."
    )
    pod_anti_affinity: Literal["Required", "Preferred"] = Field(
        default="Required",
        description=(
            "Required: pods of one group (or the NameServers) never share a node; "
            "Preferred: the scheduler tries to spread them."
        ),
    )
    config: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "Extra settings written to the properties file, with upstream key names. metricsPort "
            'defaults to 5557 on the pod network (Prometheus /metrics); "0" turns it off.'
        ),
    )
    host_network: bool = Field(
        default=False,
        description=(
            "Run the pods on the node's network (dnsPolicy ClusterFirstWithHostNet); each pod "
            "then gets its own ports so that several fit on one node."
        ),
    )
    rack: RackSpec | None = Field(
        default=None,
        description=(
            "Zone awareness: spread each broker group's pods (or the NameServers) over the "
            "values of a node label, so that one zone going down leaves a replica."
        ),
    )

    def metrics_port(self) -> int | None:
        """The /metrics port: spec.config's metricsPort ("0" turns it off), else on by default
        on the pod network (DEFAULT_METRICS_PORT; on the host network only when asked for,
        since it would be a port of the node)."""
        raw = self.config.get("metricsPort")
        if raw is None:
            return None if self.host_network else DEFAULT_METRICS_PORT
        raw = raw.strip()
        return int(raw) if raw.isdigit() and int(raw) > 0 else None

    @field_validator("config")
    @classmethod
    def _config_keys_are_properties(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if not PROPERTY_KEY.match(key):
                raise ValueError(
                    f"config key {key!r} is not a properties key (letters, digits, '_' and '.', "
                    f"starting with a letter), e.g. fileReservedTime"
                )
        return value


# Settings the operator derives from the spec or the pod identity; a user value would contradict it.
NAMESRV_RESERVED_KEYS = frozenset({"listenPort"})
BROKER_RESERVED_KEYS = frozenset(
    {
        "brokerClusterName",
        "brokerName",
        "brokerId",
        "brokerRole",
        "flushDiskType",
        "namesrvAddr",
        "listenPort",
        "haListenPort",
        "storePathRootDir",
        "storePathCommitLog",
        # spec.failover
        "enableControllerMode",
        "controllerAddr",
    }
)

# Set by spec.acl (the broker loads every *.yml in aclFilePath).
ACL_RESERVED_KEYS = frozenset({"aclEnable", "aclFilePath", "rocketmqHome"})


def _refuse_reserved(config: dict[str, str], reserved: frozenset[str], hint: str) -> None:
    clash = sorted(set(config) & reserved)
    if clash:
        raise ValueError(
            f"config sets {', '.join(clash)}, which the operator manages ({hint}); "
            f"remove {'it' if len(clash) == 1 else 'them'} from spec.config"
        )


def _refuse_security_keys(config: dict[str, str], acl: AclSpec | None, tls: TlsSpec | None) -> None:
    if acl is not None:
        _refuse_reserved(config, ACL_RESERVED_KEYS, "spec.acl sets them")
    if tls is not None:
        tls_keys = frozenset(k for k in config if k.startswith("tls."))
        _refuse_reserved(config, tls_keys, "spec.tls sets the tls.* keys")


class AclSpec(CamelModel):
    """ACL (upstream 4.x plain ACL): ``aclEnable=true`` and the accounts the brokers load."""

    secret_name: DnsLabel | None = Field(
        default=None,
        description=(
            "Secret holding the user's accounts under the key plain_acl.yml (upstream format); "
            "mounted as a volume, so an edit reaches the brokers' file reload without a restart. "
            "Without it only the operator's generated admin account exists."
        ),
    )


class IssuerRef(CamelModel):
    """A cert-manager Issuer or ClusterIssuer."""

    name: str = Field(min_length=1, description="metadata.name of the issuer.")
    kind: Literal["Issuer", "ClusterIssuer"] = Field(
        default="Issuer",
        description="Issuer (in the resource's namespace) or ClusterIssuer.",
    )
    group: str = Field(default="cert-manager.io", description="API group of the issuer.")


class TlsSpec(CamelModel):
    """TLS on the remoting port (upstream ``tls.server.*`` keys)."""

    mode: Literal["permissive", "enforcing"] = Field(
        default="permissive",
        description=(
            "tls.server.mode: permissive serves TLS and plaintext on one port; enforcing closes "
            "plaintext connections (the probes and the broker's own calls then use TLS, so the "
            "NameServer must accept TLS too)."
        ),
    )
    secret_name: DnsLabel | None = Field(
        default=None,
        description=(
            "Secret with tls.crt, tls.key and ca.crt to use; without it the operator issues a "
            "server certificate from a cluster CA it creates and renews."
        ),
    )
    issuer_ref: IssuerRef | None = Field(
        default=None,
        description=(
            "Let cert-manager (installed in the cluster) issue and renew the certificate: the "
            "operator creates a cert-manager.io/v1 Certificate for this issuer instead of its "
            "own CA."
        ),
    )
    validity_days: int = Field(
        default=365, ge=2, le=3650, description="Validity of an operator-issued server certificate."
    )
    renew_before_days: int = Field(
        default=30,
        ge=1,
        le=3649,
        description="Renew an operator-issued certificate this many days before it expires.",
    )
    need_client_auth: Literal["none", "optional", "require"] = Field(
        default="none", description="tls.server.need.client.auth (mutual TLS)."
    )

    @model_validator(mode="after")
    def _renew_within_validity(self) -> TlsSpec:
        if self.secret_name and self.issuer_ref is not None:
            raise ValueError(
                "tls.secretName and tls.issuerRef both name where the certificate comes from; "
                "keep one"
            )
        if self.renew_before_days >= self.validity_days:
            raise ValueError(
                f"tls.renewBeforeDays ({self.renew_before_days}) must be smaller than "
                f"tls.validityDays ({self.validity_days}), or every certificate is renewed at once"
            )
        return self


class NameServerSpec(PodSpecCommon):
    """Desired state of a NameServer ensemble."""

    resources: ResourceRequirements = Field(
        default_factory=lambda: _default_resources(DEFAULT_NAMESRV_REQUESTS),
        description=(
            "Requests and limits of the NameServer container; default requests cpu 50m, memory "
            "128Mi (not BestEffort)."
        ),
    )
    template: NameServerTemplate = Field(
        default_factory=NameServerTemplate,
        description="Labels, annotations, env, service account, placement and volumes of the pods.",
    )

    replicas: int = Field(default=2, ge=1, le=16, description="Number of NameServer pods.")
    pod_anti_affinity: Literal["Required", "Preferred"] = Field(
        default="Preferred",
        description="Required: NameServers never share a node; Preferred: spread when possible.",
    )
    port: int = Field(
        default=DEFAULT_NAMESRV_PORT,
        ge=1,
        le=65535,
        description=(
            "listenPort of the NameServers; with hostNetwork, pod k listens on port + k so that "
            "the replicas fit on one node."
        ),
    )

    acl: AclSpec | None = Field(
        default=None,
        description="Check admin requests (upstream ACL); accounts from Secrets.",
    )
    tls: TlsSpec | None = Field(default=None, description="TLS on the NameServers' port.")
    listeners: list[ListenerSpec] = Field(
        default_factory=list,
        description=(
            "How clients reach the NameServers: the internal Services always exist; one "
            "nodeport or loadbalancer listener adds a Service in front of every NameServer for "
            "clients outside the cluster (status.listeners has the addresses)."
        ),
    )

    @model_validator(mode="after")
    def _reserved(self) -> NameServerSpec:
        check_listeners(self.listeners, self.host_network)
        _refuse_reserved(self.config, NAMESRV_RESERVED_KEYS, "set spec.port instead")
        _refuse_security_keys(self.config, self.acl, self.tls)
        if self.host_network and self.port + self.replicas - 1 > 65535:
            raise ValueError(
                f"with hostNetwork pod k listens on port + k, and port {self.port} + "
                f"{self.replicas - 1} is beyond 65535; lower spec.port"
            )
        return self

    def pod_port(self, ordinal: int) -> int:
        """listenPort of NameServer pod ``ordinal`` (per pod only on the host network)."""
        return self.port + ordinal if self.host_network else self.port


class NameServerRef(CamelModel):
    """A NameServer custom resource in the Broker's namespace."""

    name: DnsLabel = Field(description="metadata.name of the NameServer.")


class StorageSpec(CamelModel):
    """The persistent volume of each broker pod (CommitLog, ConsumeQueue, index, metadata)."""

    type: Literal["persistent-claim", "ephemeral"] = Field(
        default="persistent-claim",
        description=(
            "persistent-claim: a PersistentVolumeClaim per pod; ephemeral: an emptyDir of at most "
            "size (development only: the store is lost with the pod)."
        ),
    )
    storage_class_name: str | None = Field(
        default=None, description="StorageClass of the claims; the cluster default when unset."
    )
    size: Quantity = Field(
        default="10Gi",
        description=(
            "Size of each pod's claim. Raising it expands the existing claims when their "
            "StorageClass allows volume expansion (the pods keep running); claims never shrink."
        ),
    )
    delete_claim_on_scale_down: bool = Field(
        default=False,
        description=(
            "Delete a removed pod's claim on scale-down. Off by default: a claim may hold "
            "unconsumed messages."
        ),
    )

    @field_validator("size")
    @classmethod
    def _positive(cls, value: str) -> str:
        if parse_quantity(value) <= 0:
            raise ValueError("size must be larger than 0, e.g. 10Gi")
        return value


# Five cron fields (minute hour day-of-month month day-of-week) or a @-macro, as CronJob accepts.
CRON_PATTERN = (
    r"^(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|"
    r"([0-9*/,?LW#A-Za-z-]+\s+){4}[0-9*/,?LW#A-Za-z-]+)$"
)


class ExternalAccess(CamelModel):
    """How clients outside the cluster reach each broker (as Strimzi's external listeners)."""

    type: Literal["HostNetwork", "NodePort"] = Field(
        description=(
            "HostNetwork: each broker advertises the node address (needs spec.hostNetwork); "
            "NodePort: one NodePort Service per broker pod, the broker listening on and "
            "advertising <node address>:<nodePort>."
        )
    )
    node_port_base: int = Field(
        default=DEFAULT_BROKER_NODE_PORT_BASE,
        ge=NODE_PORT_RANGE[0],
        le=NODE_PORT_RANGE[1],
        description=(
            "NodePort only: broker pod i (i = group * replicasPerGroup + brokerId) gets nodePort "
            "nodePortBase + 10 * i, and listens on that port (the broker advertises its "
            "listenPort)."
        ),
    )


class AuditStorage(CamelModel):
    """The audit CronJob's claim."""

    storage_class_name: str | None = Field(
        default=None, description="StorageClass of the claim; the cluster default when unset."
    )
    size: Quantity = Field(default="5Gi", description="Snapshot history and reports.")


class AuditSpec(CamelModel):
    """A CronJob collecting snapshots (``ferrymq admin snapshot``) and writing the backlog and
    rebalance reports (``ferrymq report``) onto a claim, on a schedule."""

    schedule: Annotated[str, StringConstraints(pattern=CRON_PATTERN)] = Field(
        description="Cron schedule, e.g. '*/15 * * * *'."
    )
    image: str = Field(
        default=DEFAULT_AUDIT_IMAGE,
        min_length=1,
        description=(
            "Image with ferrymq and its spark extra (PySpark + Java); the broker image has "
            "neither, so the default is the ferrymq Spark image."
        ),
    )
    reports: bool = Field(default=True, description="Run the backlog and rebalance reports too.")
    suspend: bool = Field(default=False, description="Suspend the CronJob (no new runs).")
    storage: AuditStorage = Field(
        default_factory=AuditStorage, description="The claim holding snapshots and reports."
    )
    resources: ResourceRequirements = Field(default_factory=ResourceRequirements)


# upstream ProxyConfig's grpcServerPort default
DEFAULT_PROXY_GRPC_PORT = 8081
DEFAULT_PROXY_REQUESTS = {"cpu": "100m", "memory": "128Mi"}
# rmq-proxy.json keys the operator derives from the Broker and spec.proxy.
PROXY_RESERVED_KEYS = frozenset(
    {"rocketMQClusterName", "namesrvAddr", "grpcServerPort", "proxyMode", "bindAddress"}
)


class ProxySpec(CamelModel):
    """The standalone 5.x gRPC proxy (``ferrymq proxy -pm cluster``) in front of the Broker's
    cluster: a Deployment and a Service that RocketMQ 5.x clients use as their endpoint."""

    replicas: int = Field(
        default=1,
        ge=1,
        le=16,
        description=(
            "Proxy pods (stateless; any of them serves any client). More than 1 adds a "
            "PodDisruptionBudget of maxUnavailable 1."
        ),
    )
    grpc_port: int = Field(
        default=DEFAULT_PROXY_GRPC_PORT,
        ge=1,
        le=65535,
        description="grpcServerPort of the proxy and the port of its Service (upstream 8081).",
    )
    image: str | None = Field(
        default=None, min_length=1, description="Container image; default the Broker's spec.image."
    )
    resources: ResourceRequirements = Field(
        default_factory=lambda: _default_resources(DEFAULT_PROXY_REQUESTS),
        description="Requests and limits of the proxy container; default requests cpu 100m, "
        "memory 128Mi.",
    )
    template: PodTemplate = Field(
        default_factory=PodTemplate,
        description="Labels, annotations, env, service account, placement and volumes of the pods.",
    )
    listeners: list[ListenerSpec] = Field(
        default_factory=list,
        description=(
            "How clients reach the proxy: one Service, ClusterIP by default; a nodeport listener "
            "makes it a NodePort Service (nodePort = nodePortBase, default 30081), a loadbalancer "
            "listener a LoadBalancer Service (status.proxy.externalEndpoint has the address)."
        ),
    )
    config: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "Extra rmq-proxy.json keys with upstream names (ProxyConfig), e.g. "
            "maxMessageSize. TLS: the gRPC port serves TLS and plaintext (upstream's "
            "tls.server.mode permissive with a self-signed certificate, tlsTestModeEnable); the "
            "operator does not give the proxy the Broker's spec.tls certificate (not supported)."
        ),
    )

    @model_validator(mode="after")
    def _check(self) -> ProxySpec:
        check_listeners(self.listeners, host_network=False)
        _refuse_reserved(self.config, PROXY_RESERVED_KEYS, "derived from the Broker and spec.proxy")
        return self

    @property
    def external_listener(self) -> ListenerSpec | None:
        return next((listener for listener in self.listeners if listener.external), None)


class BrokerSpec(PodSpecCommon):
    """Desired state of a broker cluster: ``groups`` groups of one master and its slaves."""

    name_server_ref: NameServerRef = Field(description="The NameServer the brokers register with.")
    resources: ResourceRequirements = Field(
        default_factory=lambda: _default_resources(DEFAULT_BROKER_REQUESTS),
        description=(
            "Requests and limits of the broker container; default requests cpu 100m, memory "
            "256Mi (not BestEffort)."
        ),
    )
    template: BrokerTemplate = Field(
        default_factory=BrokerTemplate,
        description=(
            "Labels, annotations, env, service account, placement and volumes of the broker and "
            "controller pods."
        ),
    )
    cluster_name: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_-]{1,64}$")] | None = (
        Field(default=None, description="brokerClusterName; defaults to metadata.name.")
    )
    groups: int = Field(default=1, ge=1, le=64, description="Number of broker groups (masters).")
    replicas_per_group: int = Field(
        default=2, ge=1, le=8, description="Pods per group: 1 master (brokerId 0) and N-1 slaves."
    )
    broker_role: Literal["SYNC_MASTER", "ASYNC_MASTER"] = Field(
        default="ASYNC_MASTER", description="Replication mode of every group's master."
    )
    flush_disk_type: Literal["ASYNC_FLUSH", "SYNC_FLUSH"] = Field(
        default="ASYNC_FLUSH",
        description=(
            "flushDiskType: SYNC_FLUSH acknowledges a send once it is on disk, ASYNC_FLUSH once "
            "it is in the page cache."
        ),
    )
    storage: StorageSpec = Field(default_factory=StorageSpec)
    audit: AuditSpec | None = Field(
        default=None, description="Scheduled snapshot collection and lag/rebalance reports."
    )
    acl: AclSpec | None = Field(
        default=None, description="Require signed requests (upstream ACL); accounts from Secrets."
    )
    tls: TlsSpec | None = Field(default=None, description="TLS on the brokers' remoting port.")
    network_policy: bool = Field(
        default=False,
        description=(
            "Create a NetworkPolicy admitting only the client port, the HA port from the group's "
            "own pods and the metrics port."
        ),
    )
    listen_port: int = Field(
        default=DEFAULT_LISTEN_PORT,
        ge=3,
        le=65533,
        description=(
            "Base listenPort (haListenPort is listenPort + 1, the fast channel listenPort - 2). "
            "With hostNetwork, pod i = group * replicasPerGroup + brokerId listens on "
            "listenPort + 10 * i so that every pod fits on one node."
        ),
    )
    external_access: ExternalAccess | None = Field(
        default=None,
        description=(
            "Make each broker reachable (and advertised) for clients outside the cluster. "
            "NodePort is the older spelling of a nodeport listener; use spec.listeners."
        ),
    )
    listeners: list[ListenerSpec] = Field(
        default_factory=list,
        description=(
            "How clients reach the brokers: the internal listener (headless Service) always "
            "exists; at most one nodeport or loadbalancer listener makes every broker advertise "
            "an address outside the pod network (RocketMQ advertises one address per broker)."
        ),
    )
    proxy: ProxySpec | None = Field(
        default=None,
        description=(
            "Run the standalone 5.x gRPC proxy for this cluster (Deployment + Service for "
            "RocketMQ 5.x clients); absent: no proxy, and removing it deletes the proxy's "
            "objects. Not with spec.acl (the proxy's requests are not signed) or "
            "spec.tls.mode enforcing (the proxy reaches the brokers in plaintext)."
        ),
    )
    failover: Literal["none", "controller"] = Field(
        default="none",
        description=(
            "none: brokerId 0 is each group's fixed master. controller: the operator runs a "
            "controller (2 pods, one leader by a Lease) that elects a new master from the "
            "in-sync replicas when a master fails (RocketMQ controller mode)."
        ),
    )

    @model_validator(mode="after")
    def _cross_field(self) -> BrokerSpec:
        _refuse_reserved(
            self.config,
            BROKER_RESERVED_KEYS,
            "derived from spec fields and the pod's ordinal",
        )
        _refuse_security_keys(self.config, self.acl, self.tls)
        check_listeners(self.listeners, self.host_network)
        if self.external_access is not None and self.external_listener is not None:
            raise ValueError(
                "externalAccess and a nodeport/loadbalancer listener both set how brokers are "
                "reached from outside; keep the listener and remove externalAccess"
            )
        if self.external_listener is not None and self.external_listener.type == "nodeport":
            last = self.node_port_base + PORT_STRIDE * (self.pod_count - 1)
            if last > NODE_PORT_RANGE[1]:
                raise ValueError(
                    f"listeners[{self.external_listener.name}].nodePortBase {self.node_port_base} "
                    f"leaves no room for {self.pod_count} pods (the last would get {last}, beyond "
                    f"{NODE_PORT_RANGE[1]}); lower nodePortBase or the number of pods"
                )
        if self.external_access is not None:
            if self.external_access.type == "HostNetwork" and not self.host_network:
                raise ValueError(
                    "externalAccess.type HostNetwork advertises the node address, which clients "
                    "reach only when the brokers run on the node network; set hostNetwork: true "
                    "or use externalAccess.type NodePort"
                )
            if self.external_access.type == "NodePort" and self.host_network:
                raise ValueError(
                    "externalAccess.type NodePort needs pods on the pod network, but hostNetwork "
                    "is true; use externalAccess.type HostNetwork instead"
                )
            last = self.external_access.node_port_base + PORT_STRIDE * (self.pod_count - 1)
            if self.external_access.type == "NodePort" and last > NODE_PORT_RANGE[1]:
                raise ValueError(
                    f"externalAccess.nodePortBase {self.external_access.node_port_base} leaves no "
                    f"room for {self.pod_count} pods (the last would get {last}, beyond "
                    f"{NODE_PORT_RANGE[1]}); lower nodePortBase or the number of pods"
                )
        if self.host_network and self.external_access is None:
            last = self.listen_port + PORT_STRIDE * (self.pod_count - 1) + 1
            if last > 65535:
                raise ValueError(
                    f"with hostNetwork the last pod would listen on {last - 1}, beyond 65535; "
                    f"lower spec.listenPort or the number of pods"
                )
        if self.proxy is not None:
            self._check_proxy()
        if self.broker_role == "SYNC_MASTER" and self.replicas_per_group < 2:
            raise ValueError(
                "brokerRole SYNC_MASTER waits for a slave on every send, but replicasPerGroup is 1; "
                "set replicasPerGroup to 2 or more, or use brokerRole ASYNC_MASTER"
            )
        return self

    def _check_proxy(self) -> None:
        if self.acl is not None:
            raise ValueError(
                "proxy: the operator does not give the proxy ACL credentials, so the brokers "
                "(spec.acl) would refuse its requests; remove spec.proxy or spec.acl"
            )
        if self.tls is not None and self.tls.mode == "enforcing":
            raise ValueError(
                "proxy: the proxy connects to the brokers in plaintext, which tls.mode enforcing "
                "closes; use tls.mode permissive or remove spec.proxy"
            )

    @property
    def pod_count(self) -> int:
        return self.groups * self.replicas_per_group

    @property
    def external_listener(self) -> ListenerSpec | None:
        """The nodeport or loadbalancer listener, if any (at most one)."""
        return next((listener for listener in self.listeners if listener.external), None)

    @property
    def access_type(self) -> Literal["HostNetwork", "NodePort", "LoadBalancer"] | None:
        """How the brokers are reached from outside the pod network (None: pod network only)."""
        listener = self.external_listener
        if listener is not None:
            return "NodePort" if listener.type == "nodeport" else "LoadBalancer"
        if self.external_access is not None:
            return self.external_access.type
        return None

    @property
    def node_port_base(self) -> int:
        """nodePort of broker pod 0 with NodePort access."""
        listener = self.external_listener
        if listener is not None and listener.node_port_base is not None:
            return listener.node_port_base
        if self.external_access is not None:
            return self.external_access.node_port_base
        return DEFAULT_BROKER_NODE_PORT_BASE

    @property
    def per_pod_ports(self) -> bool:
        """Every broker pod has its own ports (host network, or its own NodePort)."""
        return self.host_network or self.access_type == "NodePort"

    def pod_ports(self, group: int, broker_id: int) -> tuple[int, int]:
        """(listenPort, haListenPort) of one broker pod."""
        index = group * self.replicas_per_group + broker_id
        if self.access_type == "NodePort":
            listen = self.node_port_base + PORT_STRIDE * index
        elif self.host_network:
            listen = self.listen_port + PORT_STRIDE * index
        else:
            listen = self.listen_port
        return listen, listen + 1


class Condition(CamelModel):
    """A status condition in the Kubernetes convention."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str
    message: str = ""
    last_transition_time: str | None = None
    observed_generation: int | None = None


class CertificateStatus(CamelModel):
    """One certificate the brokers use and when it expires."""

    secret: str = Field(description="Secret holding it.")
    subject: str = ""
    not_after: str = Field(description="Expiry (RFC 3339, UTC).")
    issued_by_operator: bool = False


class ClusterStatus(CamelModel):
    """Status written by the operator (one writer: ferrymq_operator.status.StatusBuilder, which
    sets its fields one by one: assignments are validated and remembered as set)."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="ignore",
        frozen=False,
        validate_assignment=True,
    )

    observed_generation: int | None = None
    phase: str | None = Field(
        default=None, description="Creating, Running, Updating, Degraded or Failed."
    )
    ready: str | None = Field(default=None, description="Ready pods / desired pods, e.g. 4/4.")
    ready_generation: int | None = Field(
        default=None, description="Last metadata.generation at which every pod was ready."
    )
    conditions: list[Condition] = Field(default_factory=list)
    certificates: list[CertificateStatus] = Field(
        default_factory=list, description="Certificates the pods use and when they expire."
    )
    listeners: list[ListenerStatus] = Field(
        default_factory=list,
        description="The addresses of every listener (internal and external).",
    )


class NameServerStatus(ClusterStatus):
    addresses: str | None = Field(
        default=None, description="namesrvAddr for clients: every NameServer pod by DNS name."
    )


class RolloutStatus(CamelModel):
    """Progress of a health-gated rolling update (ferrymq_operator.rollout), kept between passes."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    pod: str | None = Field(default=None, description="Pod the operator restarted last.")
    since: str | None = Field(default=None, description="When that pod was deleted.")
    restart_since: str | None = Field(
        default=None,
        description="Manual rolling restart requested at; pods created before are restarted.",
    )
    message: str | None = Field(default=None, description="What the roll-out waits for.")


class DrainStatus(CamelModel):
    """A broker group being drained before a scale-in removes it (ferrymq_operator.drain)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    group: int
    reason: str = Field(description="Draining, DrainBlocked, DrainUnavailable or Drained.")
    message: str = ""
    since: str | None = Field(default=None, description="When the drain started.")


class UnmanagedObjects(CamelModel):
    """Counts written by ferrymq_operator.topics.unmanaged."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    topics: int = 0
    groups: int = 0


class GroupMaster(CamelModel):
    """A broker group's current master as the controller's state records it."""

    broker_name: str
    master_broker_id: int | None = Field(
        default=None, description="Absent: the group has no master right now."
    )
    master_address: str = ""
    master_epoch: int = 0
    sync_state_set: list[int] = Field(default_factory=list)


class ProxyStatus(CamelModel):
    """The standalone proxy (spec.proxy) as observed."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    endpoint: str = Field(
        description="host:port of the proxy's Service: the endpoint of RocketMQ 5.x clients."
    )
    external_endpoint: str | None = Field(
        default=None,
        description="nodeport: nodePort of the Service (<node address>:port); loadbalancer: "
        "the load balancer's address once assigned.",
    )
    replicas: int = Field(description="Desired proxy pods.")
    ready_replicas: int = Field(default=0, description="Proxy pods ready (the Deployment's).")


class BrokerStatus(ClusterStatus):
    group_masters: list[GroupMaster] | None = Field(
        default=None,
        description="With spec.failover controller: each group's current master and epoch.",
    )
    name_server_addr: str | None = Field(default=None, description="namesrvAddr the brokers use.")
    topic_synced_groups: list[int] = Field(
        default_factory=list,
        description="Groups that hold the cluster's topics (new groups get them after scale-out).",
    )
    rollout: RolloutStatus | None = Field(
        default=None, description="Rolling update in progress (one pod at a time)."
    )
    drains: list[DrainStatus] = Field(
        default_factory=list, description="Broker groups being drained for a scale-in."
    )
    proxy: ProxyStatus | None = Field(
        default=None, description="The standalone 5.x proxy (spec.proxy); absent without one."
    )
    unmanaged: UnmanagedObjects | None = Field(
        default=None,
        description=(
            "Topics and consumer groups on the brokers that no Topic/ConsumerGroup resource "
            "manages (auto-created or made with other tools), counted; left alone."
        ),
    )


class NameServer(CamelModel):
    """Whole NameServer object as the operator reads it (spec and status)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    spec: NameServerSpec = Field(default_factory=NameServerSpec)
    status: NameServerStatus = Field(default_factory=NameServerStatus)


class Broker(CamelModel):
    """Whole Broker object as the operator reads it (spec and status)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    spec: BrokerSpec
    status: BrokerStatus = Field(default_factory=BrokerStatus)


class InvalidSpec(ValueError):
    """A spec the operator refuses; the message says what to fix, key by key."""


def explain(error: ValidationError, root: str = "spec") -> str:
    """One line per problem: ``spec.<camelCase path>: <reason>``."""
    lines = []
    for item in error.errors():
        path = ".".join([root, *(_camel(part) for part in item["loc"])])
        reason = item["msg"].removeprefix("Value error, ")
        lines.append(f"{path}: {reason}")
    return "; ".join(lines)


def _camel(part: int | str) -> str:
    return f"[{part}]" if isinstance(part, int) else to_camel(part)


def parse_nameserver_spec(spec: dict[str, Any]) -> NameServerSpec:
    """Parse a NameServer spec or raise InvalidSpec naming every bad key."""
    try:
        return NameServerSpec.model_validate(spec)
    except ValidationError as error:
        raise InvalidSpec(explain(error)) from error


def parse_broker_spec(spec: dict[str, Any]) -> BrokerSpec:
    """Parse a Broker spec or raise InvalidSpec naming every bad key."""
    try:
        return BrokerSpec.model_validate(spec)
    except ValidationError as error:
        raise InvalidSpec(explain(error)) from error
