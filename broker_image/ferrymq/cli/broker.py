"""``ferrymq broker -c broker.conf``: run a broker until SIGTERM/Ctrl-C (graceful shutdown)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer

from ferrymq.broker.app import serve
from ferrymq.broker.config import load_broker_configs
from ferrymq.broker.controller_mode_config import load_controller_mode_settings
from ferrymq.broker.role_switch import ControllerRefusedError
from ferrymq.broker.semantics import load_semantics_config
from ferrymq.ha.config import load_ha_settings
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
        broker_cfg, store_cfg = load_broker_configs(config, overrides=overrides)
        ha_settings = load_ha_settings(config)
        controller_mode = load_controller_mode_settings(config)
        if controller_mode.enable_controller_mode and broker_cfg.broker_id < 1:
            raise ConfigError(
                f"brokerId={broker_cfg.broker_id}: with enableControllerMode=true each replica "
                "needs its own brokerId >= 1 (the elected master registers as 0)"
            )
        # transactionCheckInterval, transactionTimeOut, transactionCheckMax, flushDelayOffsetInterval
        semantics_cfg = load_semantics_config(config, overrides=overrides)
    except ConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    if not broker_cfg.namesrv_addrs:
        typer.echo(
            "warning: no namesrvAddr (or NAMESRV_ADDR): clients cannot find this broker", err=True
        )
    try:
        run(serve(broker_cfg, store_cfg, ha_settings, semantics_cfg, controller_mode))
    except ControllerRefusedError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    except OSError as exc:
        typer.echo(f"error: cannot start the broker: {exc}", err=True)
        raise typer.Exit(1) from None
