"""The proxy's configuration: upstream ``ProxyConfig`` keys read from ``rmq-proxy.json``.

Sources, lowest precedence first (as :mod:`ferrymq.properties` for broker.conf): defaults,
``NAMESRV_ADDR``, the JSON file, ``FERRYMQ_<key>`` environment variables, command-line overrides.
Unknown keys are logged and ignored (upstream's JSON binding ignores them too); a bad value is a
:class:`~ferrymq.properties.ConfigError` naming the key.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from pathlib import Path

import orjson
from pydantic import BaseModel, ConfigDict, Field, model_validator

from ferrymq.acl.settings import AclSettings
from ferrymq.properties import ConfigError, build_model, collect_values, known_keys
from ferrymq.remoting.tls import TlsMode

DEFAULT_GRPC_PORT = 8081


class ProxyMode(enum.StrEnum):
    """Upstream ProxyMode: CLUSTER = a process of its own over remoting; LOCAL = in the broker."""

    CLUSTER = "cluster"
    LOCAL = "local"

    @classmethod
    def parse(cls, text: str) -> ProxyMode:
        try:
            return cls(text.strip().lower())
        except ValueError:
            raise ConfigError(f"proxy mode {text!r}: expected cluster or local") from None


class ProxyConfig(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True)

    rocket_mq_cluster_name: str = Field(default="DefaultCluster", alias="rocketMQClusterName")
    proxy_mode: ProxyMode = Field(default=ProxyMode.CLUSTER, alias="proxyMode")
    namesrv_addr: str | None = Field(default=None, alias="namesrvAddr")
    grpc_server_port: int = Field(default=DEFAULT_GRPC_PORT, ge=0, le=65535, alias="grpcServerPort")
    # the 4.x remoting port of the standalone proxy (ferrymq/proxy/remoting); 0: any free port
    remoting_listen_port: int = Field(default=8080, ge=0, le=65535, alias="remotingListenPort")
    # the host routes from the remoting port name as every broker's; default: bindAddress, or
    # this host's address when that is every interface (upstream: the local IP)
    remoting_access_addr: str | None = Field(default=None, alias="remotingAccessAddr")
    # upstream's region and trace switch, written into every remoting answer (MSG_REGION, TRACE_ON)
    region_id: str = Field(default="DefaultRegion", alias="regionId")
    trace_on: bool = Field(default=False, alias="traceOn")
    # ferrymq: the address the gRPC and remoting ports bind (upstream binds every interface)
    bind_address: str = Field(default="0.0.0.0", alias="bindAddress")

    max_message_size: int = Field(default=4 * 1024 * 1024, gt=0, alias="maxMessageSize")
    max_user_property_size: int = Field(default=16 * 1024, gt=0, alias="maxUserPropertySize")
    user_property_max_num: int = Field(default=128, gt=0, alias="userPropertyMaxNum")
    max_message_group_size: int = Field(default=64, gt=0, alias="maxMessageGroupSize")
    enable_message_body_empty_check: bool = Field(default=True, alias="enableMessageBodyEmptyCheck")

    default_invisible_time_mills: int = Field(
        default=60_000, gt=0, alias="defaultInvisibleTimeMills"
    )
    min_invisible_time_mills_for_recv: int = Field(
        default=10_000, ge=0, alias="minInvisibleTimeMillsForRecv"
    )
    max_invisible_time_mills: int = Field(default=43_200_000, gt=0, alias="maxInvisibleTimeMills")
    max_delay_time_mills: int = Field(default=86_400_000, gt=0, alias="maxDelayTimeMills")
    max_transaction_recovery_second: int = Field(
        default=3600, gt=0, alias="maxTransactionRecoverySecond"
    )
    enable_topic_message_type_check: bool = Field(default=True, alias="enableTopicMessageTypeCheck")

    grpc_client_producer_max_attempts: int = Field(
        default=3, gt=0, alias="grpcClientProducerMaxAttempts"
    )
    grpc_client_producer_backoff_initial_millis: int = Field(
        default=10, ge=0, alias="grpcClientProducerBackoffInitialMillis"
    )
    grpc_client_producer_backoff_max_millis: int = Field(
        default=1000, ge=0, alias="grpcClientProducerBackoffMaxMillis"
    )
    grpc_client_producer_backoff_multiplier: int = Field(
        default=2, gt=0, alias="grpcClientProducerBackoffMultiplier"
    )
    grpc_client_consumer_min_long_polling_timeout_millis: int = Field(
        default=5_000, ge=0, alias="grpcClientConsumerMinLongPollingTimeoutMillis"
    )
    grpc_client_consumer_max_long_polling_timeout_millis: int = Field(
        default=20_000, gt=0, alias="grpcClientConsumerMaxLongPollingTimeoutMillis"
    )
    grpc_client_consumer_long_polling_batch_size: int = Field(
        default=32, gt=0, le=32, alias="grpcClientConsumerLongPollingBatchSize"
    )
    long_polling_reserve_time_in_millis: int = Field(
        default=100, ge=0, alias="longPollingReserveTimeInMillis"
    )

    enable_proxy_auto_renew: bool = Field(default=True, alias="enableProxyAutoRenew")
    renew_ahead_time_millis: int = Field(default=10_000, gt=0, alias="renewAheadTimeMillis")
    renew_max_time_millis: int = Field(default=3 * 3600_000, gt=0, alias="renewMaxTimeMillis")
    renew_schedule_period_millis: int = Field(
        default=5_000, gt=0, alias="renewSchedulePeriodMillis"
    )
    max_renew_retry_times: int = Field(default=3, ge=0, alias="maxRenewRetryTimes")
    invisible_time_millis_when_clear: int = Field(
        default=1_000, ge=0, alias="invisibleTimeMillisWhenClear"
    )

    transaction_heartbeat_period_second: int = Field(
        default=20, gt=0, alias="transactionHeartbeatPeriodSecond"
    )
    topic_route_service_cache_refresh_seconds: int = Field(
        default=20, gt=0, alias="topicRouteServiceCacheRefreshSeconds"
    )
    # ACL: sign the proxy's own remoting requests (cluster mode) and check the gRPC
    # `authorization` metadata with these credentials' ACL (see ferrymq.proxy.grpc.auth)
    enable_acl_rpc_hook_for_cluster_mode: bool = Field(
        default=False, alias="enableAclRpcHookForClusterMode"
    )
    authentication_enabled: bool = Field(default=False, alias="authenticationEnabled")
    # TLS of the gRPC port (see ferrymq.proxy.grpc.port): with tls.server.mode permissive
    # (upstream's default) TLS and plaintext share the port; the certificate is tlsCertPath +
    # tlsKeyPath, else a self-signed one (tlsTestModeEnable, upstream's default); enforcing
    # refuses plaintext; disabled serves plaintext only
    tls_key_path: Path | None = Field(default=None, alias="tlsKeyPath")
    tls_cert_path: Path | None = Field(default=None, alias="tlsCertPath")
    tls_test_mode_enable: bool = Field(default=True, alias="tlsTestModeEnable")
    tls_server_mode: TlsMode = Field(default=TlsMode.PERMISSIVE, alias="tls.server.mode")

    @model_validator(mode="after")
    def _check(self) -> ProxyConfig:
        if (
            self.grpc_client_consumer_min_long_polling_timeout_millis
            > self.grpc_client_consumer_max_long_polling_timeout_millis
        ):
            raise ValueError(
                "grpcClientConsumerMinLongPollingTimeoutMillis is above "
                "grpcClientConsumerMaxLongPollingTimeoutMillis"
            )
        if self.min_invisible_time_mills_for_recv > self.max_invisible_time_mills:
            raise ValueError("minInvisibleTimeMillsForRecv is above maxInvisibleTimeMills")
        if (self.tls_key_path is None) != (self.tls_cert_path is None):
            raise ValueError("tlsKeyPath and tlsCertPath go together: name both or neither")
        return self

    @property
    def tls_enabled(self) -> bool:
        if self.tls_server_mode is TlsMode.DISABLED:
            return False
        return self.tls_key_path is not None or self.tls_test_mode_enable

    def remoting_access_host(self) -> str:
        if self.remoting_access_addr:
            return self.remoting_access_addr
        if self.bind_address not in ("", "0.0.0.0", "::"):
            return self.bind_address
        from ferrymq.broker.config import _local_ip  # one definition of "this host's address"

        return _local_ip()

    def namesrv_addrs(self) -> list[str]:
        if not self.namesrv_addr:
            raise ConfigError(
                "namesrvAddr is not set: the proxy in cluster mode needs the NameServer "
                "(rmq-proxy.json namesrvAddr, or NAMESRV_ADDR)"
            )
        return [a.strip() for a in self.namesrv_addr.split(";") if a.strip()]


def _as_text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def read_proxy_json(path: Path) -> dict[str, str]:
    """The top-level keys of ``rmq-proxy.json`` as strings (the form every config source has)."""
    try:
        data = orjson.loads(path.read_bytes())
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such configuration file") from None
    except (OSError, orjson.JSONDecodeError) as exc:
        raise ConfigError(f"{path}: cannot be read as JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a JSON object of ProxyConfig keys")
    return {str(k): _as_text(v) for k, v in data.items() if v is not None}


def load_proxy_config(
    path: Path | None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, str] | None = None,
) -> tuple[ProxyConfig, list[str]]:
    """(config, unknown keys); raises ConfigError naming each bad key. The ACL keys
    (``aclEnable``, ``aclFilePath``, ``rocketmqHome``) are read by :func:`load_proxy_acl`."""
    file_values = read_proxy_json(path) if path is not None else {}
    source = str(path) if path else "rmq-proxy.json"
    values, origins, unknown = collect_values(ProxyConfig, file_values, env, source=source)
    acl_keys = set(collect_values(AclSettings, file_values, env, source=source)[2])
    unknown = [key for key in unknown if key in acl_keys]
    keys = known_keys(ProxyConfig)
    for key, value in (overrides or {}).items():
        alias = keys.get(key)
        if alias is None:
            raise ConfigError(f"override {key!r} is not a proxy configuration key")
        values[alias] = value
        origins[alias] = "command line"
    return build_model(ProxyConfig, values, origins), unknown


def load_proxy_acl(path: Path | None, env: Mapping[str, str] | None = None) -> AclSettings:
    """The ACL keys of ``rmq-proxy.json`` (as broker.conf's: aclEnable, aclFilePath, ...)."""
    file_values = read_proxy_json(path) if path is not None else {}
    values, origins, _ = collect_values(
        AclSettings, file_values, env, source=str(path) if path else "rmq-proxy.json"
    )
    return build_model(AclSettings, values, origins)
