"""``ferrymq namesrv [-c namesrv.conf]``: run a NameServer until SIGTERM/Ctrl-C."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ferrymq.acl.plain_config import AclConfigError
from ferrymq.acl.settings import AclSettings, load_acl_settings
from ferrymq.cli.server_common import (
    exit_on_config_error,
    overrides,
    serve_until_stopped,
    setup_logging,
)
from ferrymq.namesrv.app import serve
from ferrymq.namesrv.config import load_namesrv_config
from ferrymq.properties import ConfigError
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
    setup_logging()
    keys = overrides({"listenPort": listen_port, "bindAddress": bind_address})
    with exit_on_config_error(ConfigError):
        cfg = load_namesrv_config(config, overrides=keys, also_read_by=(AclSettings, TlsSettings))
        acl_cfg = load_acl_settings(config)
        tls_cfg = load_tls_settings(config)
    serve_until_stopped(
        serve(cfg, acl_settings=acl_cfg, tls_settings=tls_cfg),
        "NameServer",
        (AclConfigError, ConfigError),
    )
