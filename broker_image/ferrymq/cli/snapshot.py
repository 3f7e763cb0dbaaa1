"""``ferrymq admin snapshot``: write one timestamped cluster snapshot for the audit reports.

Registered on the CLIENT engineer's ``admin`` sub-app from ``cli/main.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from ferrymq.cli.client_common import NamesrvOption, namesrv_list, run_client

out = Console()


def snapshot(
    out_dir: Annotated[
        Path,
        typer.Option("--out", "-o", help="Snapshot history directory (one subdirectory per run)."),
    ],
    namesrv: NamesrvOption = "127.0.0.1:9876",
    group: Annotated[
        list[str] | None,
        typer.Option("--group", "-g", help="Only these consumer groups (repeatable; default all)."),
    ] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Collect routes, queue offsets, consumer offsets, clients and their queues into OUT/<id>/."""
    from ferrymq.client.admin import AdminClient
    from ferrymq.snapshot.collector import Collected, collect_to
    from ferrymq.snapshot.writer import SnapshotError

    addrs = namesrv_list(namesrv)
    if out_dir.exists() and not out_dir.is_dir():
        raise typer.BadParameter(f"{out_dir} exists and is not a directory", param_hint="--out")

    async def go() -> tuple[Path, Collected]:
        async with AdminClient(addrs) as admin:
            return await collect_to(admin, namesrv, out_dir, groups=group)

    try:
        path, got = run_client(go(), verbose=verbose)
    except (SnapshotError, OSError) as exc:
        out.print(f"[red]error:[/red] {exc}", soft_wrap=True)
        raise typer.Exit(1) from None
    counts = ", ".join(f"{len(rows)} {name}" for name, rows in got.tables.items())
    out.print(f"snapshot {got.meta.snapshotId} -> {path} ({counts})", soft_wrap=True)
    for note in got.meta.notes:
        out.print(f"[yellow]note:[/yellow] {note}", soft_wrap=True)
