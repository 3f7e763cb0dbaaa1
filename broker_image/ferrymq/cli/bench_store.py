"""``ferrymq bench store``: the storage-engine benchmark (see :mod:`ferrymq.store.benchmark`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from ferrymq.store.benchmark import BenchReport, run_benchmark

console = Console()


def _table(report: BenchReport) -> Table:
    table = Table(title="ferrymq store benchmark (ratios to the raw mmap copy baseline)")
    table.add_column("figure")
    table.add_column("msgs/s", justify="right")
    table.add_column("MB/s", justify="right")
    table.add_column("x baseline", justify="right")
    for f in report.figures:
        table.add_row(f.name, f"{f.msgs_per_s:,.0f}", f"{f.mb_per_s:.1f}", f"{f.ratio:.3f}")
    table.add_row(
        "dispatch (rebuild CQ + index)",
        f"{report.dispatch_msgs_per_s:,.0f}",
        "",
        f"{report.dispatch_ratio:.3f}",
    )
    return table


def bench_store(
    count: Annotated[int, typer.Option(min=1024, help="1 KiB records per measured path")] = 64_000,
    batch: Annotated[int, typer.Option(min=1, max=1024, help="messages per batch")] = 32,
    rounds: Annotated[int, typer.Option(min=1, max=1000, help="interleaved rounds")] = 8,
    runs: Annotated[int, typer.Option(min=1, max=20, help="repeat the whole run")] = 1,
    directory: Annotated[
        Path | None,
        typer.Option(file_okay=False, help="where the temporary store goes (default: system temp)"),
    ] = None,
) -> None:
    """Raw mmap copy (baseline) vs CommitLog append singly and batched, dispatch and recovery."""
    if directory is not None and not directory.is_dir():
        console.print(f"[red]error:[/red] directory {directory} does not exist")
        raise typer.Exit(code=2)
    ratios: list[float] = []
    for run in range(runs):
        try:
            with console.status(f"run {run + 1}/{runs}") as status:
                report = run_benchmark(
                    count, batch, rounds, directory=directory, progress=status.update
                )
        except OSError as exc:
            console.print(f"[red]error:[/red] benchmark failed: {exc}")
            raise typer.Exit(code=1) from exc
        console.print(_table(report))
        console.print(
            f"recovery (abnormal, CRC scan): {report.recovery_s_per_gib:.2f} s/GiB; "
            f"rebuild (scan + dispatch): {report.rebuild_s_per_gib:.2f} s/GiB"
        )
        for note in report.notes:
            console.print(note, soft_wrap=True)
        ratios.append(report.figures[2].ratio)
    if runs > 1:
        console.print(
            f"batched append x baseline over {runs} runs: best {max(ratios):.3f}, "
            f"worst {min(ratios):.3f}"
        )
