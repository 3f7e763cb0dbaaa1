"""``ferrymq controller [-c controller.conf]``: run the controller of controller-mode brokers."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ferrymq.cli.server_common import (
    exit_on_config_error,
    overrides,
    serve_until_stopped,
    setup_logging,
)
from ferrymq.controller.config import load_controller_config
from ferrymq.controller.server import serve
from ferrymq.properties import ConfigError


def controller(
    config: Annotated[
        Path | None, typer.Option("-c", "--config", help="controller.conf (Java properties)")
    ] = None,
    listen_port: Annotated[
        int | None, typer.Option("--listen-port", help="override listenPort (default 9878)")
    ] = None,
    store_path: Annotated[
        Path | None, typer.Option("--store-path", help="override controllerStorePath")
    ] = None,
) -> None:
    """Run a controller (master election for brokers with enableControllerMode=true)."""
    setup_logging()
    keys = overrides({"listenPort": listen_port, "controllerStorePath": store_path})
    with exit_on_config_error(ConfigError):
        cfg = load_controller_config(config, overrides=keys)
    serve_until_stopped(serve(cfg), "controller", (ValueError,))
