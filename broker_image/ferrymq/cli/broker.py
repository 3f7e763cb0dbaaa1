"""``ferrymq broker -c broker.conf``: run a broker until SIGTERM/Ctrl-C (graceful shutdown)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ferrymq.acl.plain_config import AclConfigError
from ferrymq.broker.app import serve
from ferrymq.broker.broker_conf import load_broker_conf
from ferrymq.broker.role_switch import ControllerRefusedError
from ferrymq.cli.server_common import (
    exit_on_config_error,
    overrides,
    serve_until_stopped,
    setup_logging,
)
from ferrymq.client.credentials import ClientSecurity
from ferrymq.properties import ConfigError


def broker(
    config: Annotated[
        Path | None, typer.Option("-c", "--config", help="broker.conf (Java properties)")
    ] = None,
    namesrv_addr: Annotated[
        str | None,
        typer.Option("-n", "--namesrv-addr", help="override namesrvAddr (a:9876;b:9876)"),
    ] = None,
) -> None:
    """Run a broker: upstream broker.conf keys (brokerClusterName, brokerName, brokerId, listenPort,
    namesrvAddr or NAMESRV_ADDR, storePathRootDir, flushDiskType, ...). brokerId 0 needs a master
    brokerRole and a SLAVE needs brokerId >= 1 (exit code 2 otherwise). SIGTERM stops it within
    shutdownGraceSeconds (default 10); a second SIGTERM forces the exit (code 3)."""
    setup_logging()
    keys = overrides({"namesrvAddr": namesrv_addr or None})
    # ValueError: a ConfigError, or an incomplete FERRYMQ_* credential pair
    with exit_on_config_error(ValueError):
        # every part of broker.conf (broker, store, HA, semantics, lag, controller mode, ACL, TLS)
        conf = load_broker_conf(config, overrides=keys)
        # the broker's own calls sign/encrypt with FERRYMQ_ACCESS_KEY/_SECRET_KEY/_TLS_*
        ClientSecurity.from_env()
    if not conf.broker.namesrv_addrs:
        typer.echo(
            "warning: no namesrvAddr (or NAMESRV_ADDR): clients cannot find this broker", err=True
        )
    serve_until_stopped(
        serve(conf), "broker", (AclConfigError, ConfigError, ControllerRefusedError)
    )
