"""``ferrymq report backlog|rebalance``: the Spark audit jobs over a snapshot history.

Spark is imported only when a report runs, so the rest of the CLI works without it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

console = Console(stderr=True)
out = Console()

report_app = typer.Typer(
    help="Audit reports (PySpark): consumer backlog and rebalance correctness.",
    no_args_is_help=True,
)

SnapshotsOption = Annotated[
    Path,
    typer.Option(
        "--snapshots", "-s", help="Directory of snapshots written by `ferrymq admin snapshot`."
    ),
]
OutOption = Annotated[Path, typer.Option("--out", "-o", help="Output directory (created).")]
MasterOption = Annotated[
    str | None,
    typer.Option("--master", help="Spark master (default $SPARK_MASTER or local[*])."),
]


@contextmanager
def _progress(title: str) -> Iterator[Callable[[str], None]]:
    with Progress(
        SpinnerColumn(),
        TextColumn("[bold]{task.description}"),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    ) as progress:
        task = progress.add_task(f"{title}: starting Spark", total=None)

        def step(message: str) -> None:
            progress.update(task, description=f"{title}: {message}")

        yield step
        progress.update(task, description=f"{title}: done")


def _fail(message: str) -> typer.Exit:
    console.print(f"[red]error:[/red] {message}", soft_wrap=True)
    return typer.Exit(code=2)


def _known_errors() -> tuple[type[BaseException], ...]:
    from ferrymq.snapshot.writer import SnapshotError

    errors: list[type[BaseException]] = [SnapshotError, ValueError, FileNotFoundError]
    try:
        from pyspark.errors import PySparkException

        errors.append(PySparkException)
    except ImportError:  # pragma: no cover - the spark extra is missing; reported below
        pass
    return tuple(errors)


def _session(master: str | None, app_name: str) -> Any:
    try:
        from ferrymq_spark.session import build_session
    except ImportError as exc:
        raise _fail(
            f"PySpark is not installed ({exc}); install the spark extra: pip install 'ferrymq[spark]'"
        ) from exc
    return build_session(app_name, master=master)


def _check_snapshots(path: Path) -> None:
    if not path.is_dir():
        raise _fail(f"--snapshots {path}: not a directory")


@report_app.command("backlog")
def backlog(
    snapshots: SnapshotsOption,
    out_dir: OutOption,
    store: Annotated[
        Path | None,
        typer.Option(help="A broker's store directory, for exact time lag from its CommitLog."),
    ] = None,
    store_broker: Annotated[
        str | None,
        typer.Option(help="brokerName of --store (needed when the snapshots name several)."),
    ] = None,
    window: Annotated[
        int, typer.Option(min=1, help="Snapshots in the Burrow evaluation window.")
    ] = 10,
    top: Annotated[int, typer.Option(min=1, help="How many top lagging groups to list.")] = 10,
    master: MasterOption = None,
) -> None:
    """Consumer lag per group/topic/queue, time lag, Burrow status, owners; Parquet+JSON+HTML."""
    _check_snapshots(snapshots)
    if store is not None and not store.is_dir():
        raise _fail(f"--store {store}: not a directory")
    with _progress("backlog") as step:
        spark = _session(master, "ferrymq-report-backlog")
        from ferrymq_spark.jobs import backlog as job

        args = job.BacklogArgs(
            snapshots=snapshots,
            out=out_dir,
            store=store,
            store_broker=store_broker,
            window=window,
            top=top,
        )
        try:
            summary = job.run(spark, args, step)
        except _known_errors() as exc:
            raise _fail(str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from exc
    table = Table(title=f"backlog at snapshot {summary.snapshotId}")
    for col in ("group", "status", "lag", "time lag", "topics"):
        table.add_column(col)
    from ferrymq_spark.report import fmt_ms

    for g in summary.groups:
        table.add_row(
            g["group"], g["status"], str(g["lag"]), fmt_ms(g["timeLagMs"]), ", ".join(g["topics"])
        )
    out.print(table)
    out.print(f"wrote {out_dir}/summary.json, report.html, queues.parquet, lag_history.parquet")


@report_app.command("rebalance")
def rebalance(
    snapshots: SnapshotsOption,
    out_dir: OutOption,
    master: MasterOption = None,
) -> None:
    """Audit queue allocation per group and topic against the clients' strategy; Parquet+JSON+HTML."""
    _check_snapshots(snapshots)
    with _progress("rebalance") as step:
        spark = _session(master, "ferrymq-report-rebalance")
        from ferrymq_spark.jobs import rebalance_audit as job

        try:
            summary = job.run(spark, job.AuditArgs(snapshots=snapshots, out=out_dir), step)
        except _known_errors() as exc:
            raise _fail(str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from exc
    table = Table(title=f"rebalance audit at snapshot {summary.snapshotId}")
    for col in ("severity", "kind", "group", "topic", "detail"):
        table.add_column(col)
    for f in summary.findings:
        table.add_row(f["severity"], f["kind"], f["group"], f["topic"] or "", f["detail"])
    out.print(table if summary.findings else "no finding: every queue owned exactly once, fairly")
    out.print(f"wrote {out_dir}/summary.json, report.html, findings.parquet")
