"""Shared plumbing of the client subcommands (produce, consume, admin, bench): the NameServer option,
running a coroutine on uvloop, and turning client errors into a message and a non-zero exit."""

from __future__ import annotations

import logging
from collections.abc import Coroutine
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console

from ferrymq.client.errors import MQClientError
from ferrymq.client.namesrv_api import parse_namesrv_addr
from ferrymq.remoting.eventloop import run

T = TypeVar("T")

NamesrvOption = Annotated[
    str,
    typer.Option(
        "--namesrv",
        "-n",
        envvar="NAMESRV_ADDR",
        help="NameServer address(es), host:port separated by ';' (env NAMESRV_ADDR).",
    ),
]

err_console = Console(stderr=True)


def namesrv_list(value: str) -> list[str]:
    try:
        return parse_namesrv_addr(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--namesrv") from None


def run_client(coro: Coroutine[Any, Any, T], *, verbose: bool = False) -> T:
    """Run ``coro``; a client error or bad value prints one red line and exits with status 1."""
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    try:
        return run(coro)
    except (MQClientError, ValueError) as exc:
        err_console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        err_console.print("[yellow]interrupted[/yellow]")
        raise typer.Exit(130) from None
