"""``ferrymq broker -c broker.conf``: run a broker until SIGTERM/Ctrl-C (graceful shutdown)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer

from ferrymq.acl.plain_config import AclConfigError
from ferrymq.broker.app import serve
from ferrymq.broker.broker_conf import load_broker_conf
from ferrymq.broker.role_switch import ControllerRefusedError
from ferrymq.client.credentials import ClientSecurity
from ferrymq.properties import ConfigError
from ferrymq.remoting.eventloop import run


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
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    overrides = {"namesrvAddr": namesrv_addr} if namesrv_addr else {}
    try:
        # every part of broker.conf (broker, store, HA, semantics, lag, controller mode, ACL, TLS)
        conf = load_broker_conf(config, overrides=overrides)
        # the broker's own calls sign/encrypt with FERRYMQ_ACCESS_KEY/_SECRET_KEY/_TLS_*
        ClientSecurity.from_env()
    except ValueError as exc:  # ConfigError, or an incomplete FERRYMQ_* credential pair
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    if not conf.broker.namesrv_addrs:
        typer.echo(
            "warning: no namesrvAddr (or NAMESRV_ADDR): clients cannot find this broker", err=True
        )
    try:
        run(serve(conf))
    except (AclConfigError, ConfigError, ControllerRefusedError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    except OSError as exc:
        typer.echo(f"error: cannot start the broker: {exc}", err=True)
        raise typer.Exit(1) from None
