"""Write one snapshot directory atomically, and list/read a snapshot history (no Spark).

A snapshot is written under a hidden temporary name and renamed into place, so a reader of the
history never sees half a snapshot (a crashed collector leaves only a ``.tmp-*`` directory, which
readers skip). Rows are validated by their pydantic model before anything is written.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import cast

import orjson
from pydantic import BaseModel, ValidationError

from ferrymq.snapshot.schema import (
    META_FILE,
    TABLES,
    ClientRow,
    ConsumerViewRow,
    OffsetRow,
    OwnershipRow,
    QueueRow,
    RouteRow,
    SnapshotMeta,
    SubscriptionRow,
    table_file,
)
from ferrymq.store.json_file import fsync_dir

TMP_PREFIX = ".tmp-"


class SnapshotError(Exception):
    """A snapshot could not be written or read; the message names the file and the reason."""


def snapshot_id_for(taken_at_ms: int) -> str:
    """Sortable, filesystem-safe id for a snapshot started at ``taken_at_ms`` (UTC)."""
    ts = datetime.fromtimestamp(taken_at_ms / 1000, tz=UTC)
    return ts.strftime("%Y%m%dT%H%M%S") + f".{taken_at_ms % 1000:03d}Z"


@dataclass
class Snapshot:
    """An in-memory snapshot: its metadata and the rows of each table."""

    meta: SnapshotMeta
    tables: dict[str, list[BaseModel]] = field(default_factory=dict)

    def rows(self, table: str) -> list[BaseModel]:
        return self.tables.get(table, [])

    # typed views of each table
    @property
    def routes(self) -> list[RouteRow]:
        return cast(list[RouteRow], self.rows("routes"))

    @property
    def queues(self) -> list[QueueRow]:
        return cast(list[QueueRow], self.rows("queues"))

    @property
    def offsets(self) -> list[OffsetRow]:
        return cast(list[OffsetRow], self.rows("offsets"))

    @property
    def clients(self) -> list[ClientRow]:
        return cast(list[ClientRow], self.rows("clients"))

    @property
    def subscriptions(self) -> list[SubscriptionRow]:
        return cast(list[SubscriptionRow], self.rows("subscriptions"))

    @property
    def ownership(self) -> list[OwnershipRow]:
        return cast(list[OwnershipRow], self.rows("ownership"))

    @property
    def views(self) -> list[ConsumerViewRow]:
        return cast(list[ConsumerViewRow], self.rows("views"))


def write_snapshot(
    root: Path, meta: SnapshotMeta, tables: Mapping[str, Sequence[BaseModel]]
) -> Path:
    """Write ``meta`` and ``tables`` as ``root/<snapshotId>/`` and return that directory.

    Every known table gets a file (empty when there are no rows), so readers can glob each table
    across the history. Raises :class:`SnapshotError` for an unknown table, a row of the wrong
    model, a row from another snapshot, or an existing snapshot of the same id.
    """
    for name, rows in tables.items():
        if name not in TABLES:
            raise SnapshotError(f"unknown snapshot table {name!r}; known: {', '.join(TABLES)}")
        model = TABLES[name]
        for row in rows:
            if not isinstance(row, model):
                raise SnapshotError(
                    f"table {name!r} holds a {type(row).__name__}, not {model.__name__}"
                )
            if getattr(row, "snapshotId", None) != meta.snapshotId:
                raise SnapshotError(
                    f"table {name!r}: row of snapshot {getattr(row, 'snapshotId', None)!r} "
                    f"in snapshot {meta.snapshotId!r}"
                )
    root.mkdir(parents=True, exist_ok=True)
    final = root / meta.snapshotId
    if final.exists():
        raise SnapshotError(f"snapshot {final} already exists")
    tmp = root / f"{TMP_PREFIX}{meta.snapshotId}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    for name in TABLES:
        with open(tmp / table_file(name), "wb") as fh:
            for row in tables.get(name, ()):
                fh.write(orjson.dumps(row.model_dump(mode="json")))
                fh.write(b"\n")
            fh.flush()
            os.fsync(fh.fileno())
    with open(tmp / META_FILE, "wb") as fh:
        fh.write(orjson.dumps(meta.model_dump(mode="json"), option=orjson.OPT_INDENT_2))
        fh.flush()
        os.fsync(fh.fileno())
    fsync_dir(tmp)
    tmp.rename(final)
    fsync_dir(root)
    return final


def list_snapshots(root: Path) -> list[Path]:
    """Complete snapshot directories under ``root``, oldest first (temporary ones skipped)."""
    if not root.is_dir():
        raise SnapshotError(f"snapshot directory {root} does not exist or is not a directory")
    return sorted(
        p
        for p in root.iterdir()
        if p.is_dir() and not p.name.startswith(".") and (p / META_FILE).is_file()
    )


def read_meta(path: Path) -> SnapshotMeta:
    """The validated ``meta.json`` of one snapshot directory."""
    try:
        return SnapshotMeta.model_validate(orjson.loads((path / META_FILE).read_bytes()))
    except (OSError, orjson.JSONDecodeError, ValidationError) as exc:
        raise SnapshotError(f"{path / META_FILE}: {exc}") from exc


def read_snapshot(path: Path) -> Snapshot:
    """Read and validate one snapshot directory written by :func:`write_snapshot`."""
    snap = Snapshot(meta=read_meta(path))
    for name, model in TABLES.items():
        file = path / table_file(name)
        rows: list[BaseModel] = []
        if file.is_file():
            with open(file, "rb") as fh:
                for lineno, line in enumerate(fh, start=1):
                    if not line.strip():
                        continue
                    try:
                        rows.append(model.model_validate(orjson.loads(line)))
                    except (orjson.JSONDecodeError, ValidationError) as exc:
                        raise SnapshotError(f"{file}:{lineno}: {exc}") from exc
        snap.tables[name] = rows
    return snap
