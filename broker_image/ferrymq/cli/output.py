"""``-o/--output table|json`` of the listing commands: one option, one JSON writer.

JSON goes to stdout alone (no colours, no titles, keys sorted), so scripts can pipe it into
``jq``; field names follow upstream's JSON bodies where one exists (brokerName, queueId, ...).
"""

from __future__ import annotations

import enum
import sys
from typing import Annotated, Any

import orjson
import typer


class OutputFormat(enum.StrEnum):
    TABLE = "table"
    JSON = "json"


OutputOption = Annotated[
    OutputFormat,
    typer.Option("--output", "-o", help="table (for people) or json (for scripts)."),
]


# For commands whose -o already means something else (reset-offset: --offset, as before).
OutputLongOption = Annotated[
    OutputFormat, typer.Option("--output", help="table (for people) or json (for scripts).")
]


def wants_json(output: OutputFormat) -> bool:
    return output is OutputFormat.JSON


def emit_json(data: Any) -> None:
    """Write ``data`` as indented JSON with sorted keys and a final newline."""
    sys.stdout.write(orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode())
    sys.stdout.write("\n")
    sys.stdout.flush()


def not_found(what: str) -> typer.Exit:
    """An unknown group or topic: one red line on stderr, exit status 1 (as mqadmin fails)."""
    from ferrymq.cli.client_common import err_console

    err_console.print(f"[red]error:[/red] {what}")
    return typer.Exit(1)
