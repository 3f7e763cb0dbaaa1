"""``ferrymq namesrv [-c namesrv.conf]``: run a NameServer until SIGTERM/Ctrl-C."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer

from ferrymq.acl.plain_config import AclConfigError
from ferrymq.acl.settings import AclSettings, load_acl_settings
from ferrymq.namesrv.app import serve
from ferrymq.namesrv.config import load_namesrv_config
from ferrymq.properties import ConfigError
from ferrymq.remoting.eventloop import run
from ferrymq.remoting.tls import TlsSettings, load_tls_settings


def namesrv(
    config: Annotated[
        Path | None, typer.Option("-c", "--config", help="namesrv.conf (Java properties)")
    ] = None,
    listen_port: Annotated[
        int | None, typer.Option("--listen-port", help="override listenPort (default 9876)")
    ] = None,
    bind_address: Annotated[
        str | None, typer.Option("--bind", help="address to bind (default all interfaces)")
    ] = None,
) -> None:
    """Run a NameServer (route registry) until SIGTERM or Ctrl-C."""
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    overrides: dict[str, str] = {}
    if listen_port is not None:
        overrides["listenPort"] = str(listen_port)
    if bind_address is not None:
        overrides["bindAddress"] = bind_address
    try:
        cfg = load_namesrv_config(
            config, overrides=overrides, also_read_by=(AclSettings, TlsSettings)
        )
        acl_cfg = load_acl_settings(config)
        tls_cfg = load_tls_settings(config)
    except ConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    try:
        run(serve(cfg, acl_settings=acl_cfg, tls_settings=tls_cfg))
    except (AclConfigError, ConfigError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    except OSError as exc:
        typer.echo(f"error: cannot start the NameServer: {exc}", err=True)
        raise typer.Exit(1) from None
