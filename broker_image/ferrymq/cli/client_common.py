"""Shared plumbing of the client subcommands (produce, consume, admin, bench): the NameServer option,
running a coroutine on uvloop, and turning client errors into a message and a non-zero exit."""

from __future__ import annotations

import logging
import os
from collections.abc import Coroutine
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console

from ferrymq.client import credentials as cred
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


def security_options(
    access_key: Annotated[
        str | None,
        typer.Option(
            "--access-key",
            envvar=cred.ENV_ACCESS_KEY,
            help="ACL AccessKey: sign every request (env FERRYMQ_ACCESS_KEY).",
        ),
    ] = None,
    secret_key: Annotated[
        str | None,
        typer.Option(
            "--secret-key",
            envvar=cred.ENV_SECRET_KEY,
            help="ACL SecretKey (env FERRYMQ_SECRET_KEY; prefer the variable to the option).",
        ),
    ] = None,
    tls: Annotated[
        bool,
        typer.Option(
            "--tls/--no-tls",
            envvar=cred.ENV_TLS_ENABLE,
            help="Connect with TLS (env FERRYMQ_TLS_ENABLE).",
        ),
    ] = False,
    tls_trust_cert: Annotated[
        Path | None,
        typer.Option(
            "--tls-trust-cert",
            envvar=cred.ENV_TLS_TRUST_CERT_PATH,
            help="CA file to verify the server with (implies --tls; env FERRYMQ_TLS_TRUST_CERT_PATH).",
        ),
    ] = None,
    tls_cert: Annotated[
        Path | None,
        typer.Option(
            "--tls-cert",
            envvar=cred.ENV_TLS_CERT_PATH,
            help="Client certificate for mutual TLS (env FERRYMQ_TLS_CERT_PATH).",
        ),
    ] = None,
    tls_key: Annotated[
        Path | None,
        typer.Option(
            "--tls-key",
            envvar=cred.ENV_TLS_KEY_PATH,
            help="Key of --tls-cert (env FERRYMQ_TLS_KEY_PATH).",
        ),
    ] = None,
) -> None:
    """ferrymq: credentials and TLS given here apply to every client subcommand."""
    if bool(access_key) != bool(secret_key):
        missing = "--secret-key" if access_key else "--access-key"
        raise typer.BadParameter("--access-key and --secret-key go together", param_hint=missing)
    for path, hint in (
        (tls_trust_cert, "--tls-trust-cert"),
        (tls_cert, "--tls-cert"),
        (tls_key, "--tls-key"),
    ):
        if path is not None and not path.is_file():
            raise typer.BadParameter(f"{path}: no such file", param_hint=hint)
    if tls_cert is not None and tls_key is None:
        raise typer.BadParameter("--tls-cert needs --tls-key", param_hint="--tls-key")
    # the clients of this process (ClientInstance, SyncProducer) read their security from
    # the environment (ClientSecurity.from_env): one place for options and variables alike
    values = {
        cred.ENV_ACCESS_KEY: access_key,
        cred.ENV_SECRET_KEY: secret_key,
        cred.ENV_TLS_ENABLE: "true" if (tls or tls_trust_cert or tls_cert) else None,
        cred.ENV_TLS_TRUST_CERT_PATH: str(tls_trust_cert) if tls_trust_cert else None,
        cred.ENV_TLS_CERT_PATH: str(tls_cert) if tls_cert else None,
        cred.ENV_TLS_KEY_PATH: str(tls_key) if tls_key else None,
    }
    for name, value in values.items():
        if value:
            os.environ[name] = value
