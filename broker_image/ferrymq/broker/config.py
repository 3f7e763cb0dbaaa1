"""BrokerConfig: broker settings with upstream ``broker.conf`` names (BrokerConfig + NettyServerConfig).

One broker.conf feeds this model, the store's MessageStoreConfig and the other parts of
:class:`ferrymq.broker.broker_conf.BrokerConf`; unknown keys are ignored as RocketMQ does. Built once, handed to the services at construction. The few
settings an admin may change at runtime (UPDATE_BROKER_CONFIG: brokerPermission...) are assigned with
validation (``validate_assignment``) and written back into the broker.conf the broker started from
(``persist_properties``: other lines, comments and unknown keys kept) so they hold after a restart.
"""

from __future__ import annotations

import logging
import re
import socket
from collections.abc import Mapping
from pathlib import Path

import javaproperties
from pydantic import ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

from ferrymq.mixall import MASTER_ID
from ferrymq.properties import known_keys
from ferrymq.remoting.bodies import PERM_INHERIT, PERM_READ, PERM_WRITE
from ferrymq.remoting.settings import ServerSettings
from ferrymq.store.config import MessageStoreConfig
from ferrymq.store.json_file import write_bytes_atomic
from ferrymq.upstream_config import property_value

log = logging.getLogger(__name__)


def _local_ip() -> str:
    """This host's address from its name (upstream RemotingUtil.getLocalAddress); loopback if none."""
    try:
        addr = socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"
    return addr or "127.0.0.1"


class BrokerConfig(ServerSettings):
    """Broker settings; the server-side keys shared with the NameServer (idle connections,
    buffered bytes, shutdown grace) come from ServerSettings."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="ignore",
        validate_assignment=True,
    )

    broker_cluster_name: str = "DefaultCluster"
    broker_name: str = Field(default_factory=lambda: socket.gethostname() or "broker-a")
    broker_id: int = Field(default=MASTER_ID, ge=0)
    # the address published to NameServers and written as STOREHOST into every record
    broker_ip1: str = Field(default_factory=_local_ip, alias="brokerIP1")
    broker_ip2: str | None = Field(default=None, alias="brokerIP2")
    listen_port: int = Field(default=10911, ge=0, le=65535)
    # upstream's "VIP channel": the same service on listenPort - 2 (10909), which older Java
    # clients (vipChannelEnabled=true, the default before 4.5) send to
    fast_channel_enable: bool = True
    # ferrymq extension: the interface to bind (upstream binds all)
    bind_address: str = "0.0.0.0"
    namesrv_addr: str | None = None
    # the RocketMQ 5.x gRPC proxy in this process (upstream's local mode; ferrymq.proxy) on
    # grpcServerPort; it reaches the brokers of the cluster through namesrvAddr
    enable_grpc_proxy: bool = False
    grpc_server_port: int = Field(default=8081, ge=0, le=65535)

    broker_permission: int = Field(default=PERM_READ | PERM_WRITE, ge=0, le=15)
    auto_create_topic_enable: bool = True
    auto_create_subscription_group: bool = True
    default_topic_queue_nums: int = Field(default=8, ge=1, le=1024)
    cluster_topic_enable: bool = True
    broker_topic_enable: bool = True
    trace_topic_enable: bool = False
    msg_trace_topic_name: str = "RMQ_SYS_TRACE_TOPIC"
    enable_property_filter: bool = False
    # upstream regionId / traceOn: the broker writes both into every message it stores (MSG_REGION,
    # TRACE_ON) and the client's trace records carry the region
    region_id: str = "DefaultRegion"
    trace_on: bool = True
    # request-reply: replies are also stored in <cluster>_REPLY_TOPIC (upstream default true)
    store_reply_message_enable: bool = True
    # RocketMQ 5 topic attribute message.type=MIXED accepted (upstream default: refused)
    enable_mixed_message_type: bool = False

    register_name_server_period: int = Field(default=30_000, ge=1000, description="ms")
    register_broker_timeout_mills: int = Field(default=6_000, ge=100, description="ms")
    force_register: bool = True

    long_polling_enable: bool = True
    # LITE_PULL_MESSAGE (361) served; false answers it NO_PERMISSION, as upstream
    lite_pull_message_enable: bool = True
    short_polling_time_mills: int = Field(default=1_000, ge=1, description="ms")
    # how often held pulls are re-checked even without a dispatch wake-up (upstream 5 s)
    long_polling_check_interval: int = Field(default=5_000, ge=10, description="ms")
    notify_consumer_ids_changed_enable: bool = True
    channel_expired_timeout: int = Field(default=120_000, ge=1_000, description="ms")
    client_channel_scan_interval: int = Field(default=10_000, ge=100, description="ms")
    flush_consumer_offset_interval: int = Field(default=5_000, ge=100, description="ms")
    slave_read_enable: bool = False
    reject_transaction_message: bool = False

    # 0 disables the Prometheus endpoint
    metrics_port: int = Field(default=0, ge=0, le=65535)

    # the broker.conf this broker was started from (``-c``); runtime updates are persisted there
    # (upstream BrokerPathConfigHelper). Set by load_broker_conf, never read from the file.
    broker_config_path: Path | None = Field(default=None, exclude=True)

    @field_validator("broker_name", "broker_cluster_name")
    @classmethod
    def _non_empty(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be empty")
        return value.strip()

    @field_validator("namesrv_addr")
    @classmethod
    def _check_namesrv(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        for addr in namesrv_list(value):
            host, sep, port = addr.rpartition(":")
            if not sep or not host or not port.isdigit():
                raise ValueError(f"{addr!r} is not host:port (list separated by ';')")
        return value.strip()

    @property
    def broker_addr(self) -> str:
        return f"{self.broker_ip1}:{self.listen_port}"

    @property
    def fast_listen_port(self) -> int | None:
        """listenPort - 2 when the fast channel is on and the port is fixed; else None."""
        if not self.fast_channel_enable or self.listen_port <= 2:
            return None
        return self.listen_port - 2

    @property
    def namesrv_addrs(self) -> list[str]:
        return namesrv_list(self.namesrv_addr or "")

    @property
    def is_writeable(self) -> bool:
        return bool(self.broker_permission & PERM_WRITE)

    @property
    def is_readable(self) -> bool:
        return bool(self.broker_permission & PERM_READ)


def namesrv_list(text: str) -> list[str]:
    """``"a:9876;b:9876"`` -> ``["a:9876", "b:9876"]`` (upstream separates with ';')."""
    return [part.strip() for part in text.replace(",", ";").split(";") if part.strip()]


def config_dir(store_root: Path) -> Path:
    """Where topics.json and the other metadata files live (upstream ``<storePathRootDir>/config``)."""
    return store_root / "config"


__all__ = [
    "MASTER_ID",
    "PERM_INHERIT",
    "BrokerConfig",
    "config_dir",
    "merge_properties_text",
    "namesrv_list",
    "persist_properties",
    "property_value",
    "role_problem",
]


def role_problem(broker_id: int, broker_role: str) -> str | None:
    """Why ``brokerId`` and ``brokerRole`` cannot go together, or None. Pure.

    brokerId 0 is the master's id and only a master role may use it: a SLAVE with id 0 would
    replace its master in every route, and a master with id != 0 is never routed to as master
    (upstream silently rewrites that id to 0, which then collides with a live master).
    """
    is_master = broker_role != "SLAVE"
    if is_master and broker_id != MASTER_ID:
        return (
            f"brokerRole={broker_role} needs brokerId={MASTER_ID} (got brokerId={broker_id}): "
            "set brokerId=0 for the master, or brokerRole=SLAVE for a slave"
        )
    if not is_master and broker_id == MASTER_ID:
        return (
            f"brokerRole=SLAVE needs a brokerId other than {MASTER_ID} ({MASTER_ID} is the "
            "master's id): set brokerId=1 (or higher) for a slave, or a master brokerRole"
        )
    return None


def _property_line(key: str, value: str) -> str:
    """``key=value``: escaped as Java needs, but ':' '=' '#' '!' left readable inside the value
    (they are literal after the separator), so ``namesrvAddr=a:9876`` reads as typed."""
    escaped = javaproperties.escape(value)
    for char in ":=#!":
        escaped = re.sub(r"(?<!\\)((?:\\\\)*)\\" + re.escape(char), r"\1" + char, escaped)
    return f"{javaproperties.escape(key)}={escaped}\n"


def merge_properties_text(text: str, values: Mapping[str, str]) -> str:
    """``text`` (a properties file) with ``values`` (by upstream key) set. Pure.

    Comments, blank lines, unknown keys and the order stay; a key the file spells by its Python
    name (``default_topic_queue_nums``) keeps that spelling; keys the file lacks are appended.
    """
    aliases = {**known_keys(BrokerConfig), **known_keys(MessageStoreConfig)}
    pending = dict(values)
    out: list[str] = []
    for element in javaproperties.parse(text):
        if isinstance(element, javaproperties.KeyValue):
            alias = aliases.get(element.key.strip(), element.key.strip())
            if alias in values:
                # every occurrence: the last one wins when the file is read again
                out.append(_property_line(element.key, values[alias]))
                pending.pop(alias, None)
                continue
        out.append(element.source)
    if pending:
        if out and not out[-1].endswith("\n"):
            out.append("\n")
        out.extend(_property_line(k, v) for k, v in pending.items())
    return "".join(out)


def persist_properties(path: Path, values: Mapping[str, str]) -> None:
    """Set ``values`` in the properties file ``path`` atomically (temp file, fsync, rename;
    upstream Configuration.persist). Blocking: run it in a thread. Raises OSError."""
    # a symlinked broker.conf keeps its link: the file it points at is replaced
    target = path.resolve()
    try:
        text = target.read_text(encoding="utf-8")
    except FileNotFoundError:
        text = ""
    merged = merge_properties_text(text, values)
    write_bytes_atomic(target, merged.encode("utf-8"), keep_backup=False)
