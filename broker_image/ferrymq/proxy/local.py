"""Local mode: the gRPC proxy inside a broker process (broker.conf ``enableGrpcProxy=true``,
``grpcServerPort`` 8081), with the processors and handlers of the standalone proxy.

Upstream's local mode calls its own broker's processors in-process; ferrymq's reaches the brokers
(its own included) over remoting on loopback, as the standalone proxy does, so routes, POP and
transaction checks behave the same in both deployments (:mod:`ferrymq.proxy.cluster`)."""

from __future__ import annotations

from ferrymq.broker.config import BrokerConfig
from ferrymq.properties import ConfigError
from ferrymq.proxy.app import ProxyApp, cluster_backend
from ferrymq.proxy.config import ProxyConfig, ProxyMode


def local_config(broker: BrokerConfig) -> ProxyConfig:
    if not broker.namesrv_addr:
        raise ConfigError("enableGrpcProxy=true needs namesrvAddr: the proxy routes through it")
    return ProxyConfig.model_validate(
        {
            "rocketMQClusterName": broker.broker_cluster_name,
            "namesrvAddr": broker.namesrv_addr,
            "grpcServerPort": broker.grpc_server_port,
            "bindAddress": broker.bind_address,
            "proxyMode": ProxyMode.LOCAL.value,
        }
    )


async def start_local_proxy(broker: BrokerConfig) -> ProxyApp:
    config = local_config(broker)
    app = ProxyApp(config, cluster_backend(config))
    await app.start()
    return app
