"""Shared plumbing of the server subcommands (broker, namesrv, controller): logging, config keys
overridden by options, and the exit codes: 2 for a configuration the user must fix, 1 for a
server that cannot start (port in use, unreadable store)."""

from __future__ import annotations

import logging
from collections.abc import Coroutine, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import typer

from ferrymq.remoting.eventloop import run

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def setup_logging() -> None:
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)


def overrides(options: Mapping[str, object | None]) -> dict[str, str]:
    """Config key -> value of each option the user gave (None: not given)."""
    return {key: str(value) for key, value in options.items() if value is not None}


@contextmanager
def exit_on_config_error(*kinds: type[Exception]) -> Iterator[None]:
    """An exception of ``kinds`` becomes ``error: ...`` on stderr and exit code 2."""
    try:
        yield
    except kinds as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


def serve_until_stopped(
    server: Coroutine[Any, Any, Any], what: str, config_errors: tuple[type[Exception], ...]
) -> None:
    """Run ``server`` on uvloop until SIGTERM/Ctrl-C; ``config_errors`` found while starting exit
    with code 2, an OSError (port in use, unreadable store) with code 1."""
    with exit_on_config_error(*config_errors):
        try:
            run(server)
        except OSError as exc:
            typer.echo(f"error: cannot start the {what}: {exc}", err=True)
            raise typer.Exit(1) from None
