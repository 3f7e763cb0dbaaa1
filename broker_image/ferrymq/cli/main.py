"""Entry point of the `ferrymq` console script.

Each subcommand lives in its own module under ``ferrymq.cli`` (which never imports this one) and is
registered below with one line, so the whole command tree is readable in one place.
"""

from __future__ import annotations

import faulthandler

import typer

from ferrymq.cli import admin as admin_cli
from ferrymq.cli import (
    bench_cluster,
    bench_store,
    broker,
    client_common,
    consume,
    local_cluster,
    namesrv,
    produce,
    proxy,
)
from ferrymq.cli import controller as controller_cli
from ferrymq.cli import probe as probe_cli
from ferrymq.cli import report as report_cli
from ferrymq.cli import snapshot as snapshot_cli

app = typer.Typer(
    name="ferrymq",
    help="ferrymq: a RocketMQ-compatible message queue (NameServer, Broker, client, tools).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
bench_app = typer.Typer(
    help="Benchmarks against a store or a running cluster.", no_args_is_help=True
)
app.add_typer(bench_app, name="bench")

# --- registrations: one line each, e.g. app.command("namesrv")(namesrv.namesrv) ---
app.callback()(client_common.security_options)
app.command("produce")(produce.produce)
app.command("consume")(consume.consume)
app.add_typer(admin_cli.admin_app, name="admin")
app.add_typer(report_cli.report_app, name="report")
admin_cli.admin_app.command("snapshot")(snapshot_cli.snapshot)
bench_cluster.register(bench_app)
app.command("namesrv")(namesrv.namesrv)
app.command("broker")(broker.broker)
app.command("local-cluster")(local_cluster.local_cluster)
bench_app.command("store")(bench_store.bench_store)
app.command("probe")(probe_cli.probe)
app.command("controller")(controller_cli.controller)
app.command("proxy")(proxy.proxy)


def main() -> None:
    """Console-script entry."""
    # a fatal signal (SIGSEGV, SIGBUS from a cut mmap'd file, SIGABRT) prints the Python stacks
    # to stderr instead of ending the service without a word
    faulthandler.enable()
    app()


if __name__ == "__main__":
    main()
