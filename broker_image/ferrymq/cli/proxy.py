"""``ferrymq proxy -pc rmq-proxy.json -pm cluster``: the standalone RocketMQ 5.x gRPC proxy, started
as upstream's ``ProxyStartup`` is (same flags, same JSON keys)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ferrymq.acl.plain_config import AclConfigError
from ferrymq.cli.server_common import (
    exit_on_config_error,
    overrides,
    serve_until_stopped,
    setup_logging,
)
from ferrymq.properties import ConfigError
from ferrymq.proxy.app import serve
from ferrymq.proxy.config import ProxyMode, load_proxy_acl, load_proxy_config


def proxy(
    config: Annotated[
        Path | None,
        typer.Option("-pc", "--proxyConfigPath", help="rmq-proxy.json (upstream ProxyConfig keys)"),
    ] = None,
    mode: Annotated[
        str | None, typer.Option("-pm", "--proxyMode", help="cluster (standalone) or local")
    ] = None,
    namesrv_addr: Annotated[
        str | None,
        typer.Option("-n", "--namesrvAddr", help="NameServer address(es), ';'-separated"),
    ] = None,
) -> None:
    """Run the gRPC proxy for RocketMQ 5.x clients until SIGTERM or Ctrl-C."""
    setup_logging()
    with exit_on_config_error(ConfigError):
        keys = overrides(
            {
                "proxyMode": ProxyMode.parse(mode).value if mode else None,
                "namesrvAddr": namesrv_addr,
            }
        )
        cfg, _unknown = load_proxy_config(config, overrides=keys)
        acl = load_proxy_acl(config)
        if cfg.proxy_mode is ProxyMode.CLUSTER:
            cfg.namesrv_addrs()
    serve_until_stopped(serve(cfg, acl_settings=acl), "proxy", (ConfigError, AclConfigError))
