"""``ferrymq report backlog|rebalance``: the Spark audit jobs over a snapshot history.

Spark is imported only when a report runs, so the rest of the CLI works without it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
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
LastOption = Annotated[
    int | None,
    typer.Option("--last", min=1, help="Read only the newest N snapshots of the history."),
]


class FailOn(StrEnum):
    """The level at which a report exits non-zero, so a CronJob can alert on its exit code."""

    ERROR = "ERROR"
    WARN = "WARN"


# Exit code of a report that ran but found something at or above --fail-on (2 is bad input).
FINDINGS_EXIT_CODE = 1

FailOnOption = Annotated[
    FailOn | None,
    typer.Option(
        "--fail-on",
        case_sensitive=False,
        help=f"Exit {FINDINGS_EXIT_CODE} when a group (backlog: WARN or ERR) or a finding "
        "(rebalance: WARN or ERROR severity) is at or above this level.",
    ),
]


def _failing(levels: list[str], fail_on: FailOn | None) -> list[str]:
    """The levels among ``levels`` that reach ``fail_on`` (ERR and ERROR count as ERROR)."""
    if fail_on is None:
        return []
    reach = {"ERR", "ERROR"} if fail_on is FailOn.ERROR else {"WARN", "ERR", "ERROR"}
    return [level for level in levels if level in reach]


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
    # escaped: messages name things like 'ferrymq[spark]' that rich would read as markup
    console.print(f"[red]error:[/red] {escape(message)}", soft_wrap=True)
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
    ok_lag: Annotated[
        int,
        typer.Option(min=0, help="Messages of lag per queue that still count as healthy (OK)."),
    ] = 100,
    ok_time_lag: Annotated[
        float,
        typer.Option(min=0, help="Seconds of time lag per queue that still count as healthy."),
    ] = 60.0,
    last: LastOption = None,
    fail_on: FailOnOption = None,
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
            ok_lag=ok_lag,
            ok_time_lag_ms=int(ok_time_lag * 1000),
            last=last,
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
        cells = (g["group"], g["status"], g["lag"], fmt_ms(g["timeLagMs"]), ", ".join(g["topics"]))
        table.add_row(*(escape(str(c)) for c in cells))
    out.print(table)
    out.print(f"wrote {out_dir}/summary.json, report.html, queues.parquet, lag_history.parquet")
    failing = [g["group"] for g in summary.groups if _failing([g["status"]], fail_on)]
    if failing:
        console.print(f"--fail-on {fail_on}: groups {', '.join(failing)}", markup=False)
        raise typer.Exit(code=FINDINGS_EXIT_CODE)


@report_app.command("rebalance")
def rebalance(
    snapshots: SnapshotsOption,
    out_dir: OutOption,
    last: LastOption = None,
    fail_on: FailOnOption = None,
    master: MasterOption = None,
) -> None:
    """Audit queue allocation per group and topic against the clients' strategy; Parquet+JSON+HTML."""
    _check_snapshots(snapshots)
    with _progress("rebalance") as step:
        spark = _session(master, "ferrymq-report-rebalance")
        from ferrymq_spark.jobs import rebalance_audit as job

        try:
            summary = job.run(
                spark, job.AuditArgs(snapshots=snapshots, out=out_dir, last=last), step
            )
        except _known_errors() as exc:
            raise _fail(str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from exc
    table = Table(title=f"rebalance audit at snapshot {summary.snapshotId}")
    for col in ("severity", "kind", "group", "topic", "detail"):
        table.add_column(col)
    for f in summary.findings:
        cells = (f["severity"], f["kind"], f["group"], f["topic"] or "", f["detail"])
        table.add_row(*(escape(str(c)) for c in cells))
    out.print(table if summary.findings else "no finding: every queue owned exactly once, fairly")
    out.print(f"wrote {out_dir}/summary.json, report.html, findings.parquet")
    failing = _failing([f["severity"] for f in summary.findings], fail_on)
    if failing:
        console.print(f"--fail-on {fail_on}: {len(failing)} findings", markup=False)
        raise typer.Exit(code=FINDINGS_EXIT_CODE)
