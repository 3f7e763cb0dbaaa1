"""``ferrymq controller [-c controller.conf]``: run the controller of controller-mode brokers."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer

from ferrymq.controller.config import load_controller_config
from ferrymq.controller.server import serve
from ferrymq.properties import ConfigError
from ferrymq.remoting.eventloop import run


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
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    overrides: dict[str, str] = {}
    if listen_port is not None:
        overrides["listenPort"] = str(listen_port)
    if store_path is not None:
        overrides["controllerStorePath"] = str(store_path)
    try:
        cfg = load_controller_config(config, overrides=overrides)
    except ConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    try:
        run(serve(cfg))
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    except OSError as exc:
        typer.echo(f"error: cannot start the controller: {exc}", err=True)
        raise typer.Exit(1) from None
