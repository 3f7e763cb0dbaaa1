"""Load a snapshot history (``ferrymq admin snapshot`` output) into Spark DataFrames.

The StructTypes are derived from the pydantic row models of :mod:`ferrymq.snapshot.schema`, so the
writer and this loader cannot drift apart. Each table of every complete snapshot directory is read
with one ``spark.read.json`` in FAILFAST mode: a corrupt line fails the job with its file named
rather than silently becoming nulls.
"""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass, field
from pathlib import Path

from ferrymq.snapshot.schema import TABLES, SnapshotMeta, table_file
from ferrymq.snapshot.writer import SnapshotError, list_snapshots, read_meta, read_snapshot
from pydantic import BaseModel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
)

_SCALARS: dict[type, DataType] = {
    int: LongType(),
    str: StringType(),
    bool: BooleanType(),
    float: DoubleType(),
}


def _spark_type(annotation: object) -> tuple[DataType, bool]:
    """Spark type of a pydantic field annotation and whether it is nullable."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) != 1:
            raise TypeError(f"unsupported union {annotation!r}")
        inner, _ = _spark_type(args[0])
        return inner, True
    if origin is list:
        (item,) = typing.get_args(annotation)
        inner, _ = _spark_type(item)
        return ArrayType(inner, containsNull=False), False
    if isinstance(annotation, type) and annotation in _SCALARS:
        return _SCALARS[annotation], False
    raise TypeError(f"unsupported snapshot field type {annotation!r}")


def spark_schema(model: type[BaseModel]) -> StructType:
    """StructType of a snapshot row model (field order kept)."""
    fields = []
    for name, info in model.model_fields.items():
        dtype, nullable = _spark_type(info.annotation)
        fields.append(StructField(name, dtype, nullable=nullable or not info.is_required()))
    return StructType(fields)


@dataclass(frozen=True)
class SnapshotHistory:
    """The snapshots under one directory, oldest first, and a loader for their tables."""

    root: Path
    dirs: tuple[Path, ...]
    metas: tuple[SnapshotMeta, ...]
    _frames: dict[str, DataFrame] = field(default_factory=dict, compare=False, repr=False)

    @property
    def latest(self) -> SnapshotMeta:
        return self.metas[-1]

    def table(self, spark: SparkSession, name: str) -> DataFrame:
        """All rows of table ``name`` across the history, typed by the row model.

        Each table is read once per history and cached: the jobs join the same few small tables
        many times, and re-reading JSON for every join dominated their run time.
        """
        cached = self._frames.get(name)
        if cached is not None and cached.sparkSession is spark:
            return cached
        frame = self._read(spark, name).cache()
        self._frames[name] = frame
        return frame

    def release(self) -> None:
        """Drop the cached tables (the SparkSession may outlive one job)."""
        for frame in self._frames.values():
            frame.unpersist()
        self._frames.clear()

    def _read(self, spark: SparkSession, name: str) -> DataFrame:
        schema = spark_schema(TABLES[name])
        paths = [str(d / table_file(name)) for d in self.dirs if (d / table_file(name)).is_file()]
        if not paths:
            return spark.createDataFrame([], schema)
        return spark.read.schema(schema).option("mode", "FAILFAST").json(paths)


def open_history(root: Path, *, limit: int | None = None) -> SnapshotHistory:
    """Find the complete snapshots under ``root`` (the newest ``limit`` of them when given).

    Raises :class:`SnapshotError` when ``root`` holds no snapshot, naming the directory.
    """
    dirs = list_snapshots(root)
    if limit is not None:
        if limit < 1:
            raise SnapshotError(f"snapshot limit must be >= 1, got {limit}")
        dirs = dirs[-limit:]
    if not dirs:
        raise SnapshotError(f"no snapshot under {root} (expected <id>/meta.json directories)")
    metas = []
    for d in dirs:
        meta = read_meta(d)
        metas.append(meta)
    return SnapshotHistory(root=root, dirs=tuple(dirs), metas=tuple(metas))


__all__ = ["SnapshotError", "SnapshotHistory", "open_history", "read_snapshot", "spark_schema"]
