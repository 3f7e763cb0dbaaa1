"""``spark.read.format("ferrymq-consumequeue").load(store_dir)``: one row per ConsumeQueue entry.

Layout (upstream ``ConsumeQueue``): ``consumequeue/<topic>/<queueId>/<start byte offset>`` files of
20-byte units ``commitLogOffset:int64 | size:int32 | tagsCode:int64``; the entry index is the
queue offset. Files are preallocated, so the valid data ends at the first unit never written
(upstream recovery's ``offset >= 0 && size > 0`` test); filler units (size 0x7FFFFFFF) are
skipped. A partition is one file. The unit layout and its validity test are the store's
(:mod:`ferrymq.store.consume_queue`).

A user schema naming some of the columns (any order, same types) selects those columns, as for
the CommitLog source (:mod:`ferrymq_spark.sources.projection`); a bad one is refused at planning.
"""

from __future__ import annotations

import mmap
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from ferrymq_spark.sources.options import int_option, numbered_files, store_subdir
from ferrymq_spark.sources.projection import column_types, projected_columns

FORMAT = "ferrymq-consumequeue"
SCHEMA = (
    "topic string, queueId int, queueOffset long, commitLogOffset long, size int, tagsCode long"
)
COLUMNS = list(column_types(SCHEMA))


@dataclass(frozen=True)
class QueueFilePartition(InputPartition):  # type: ignore[misc]
    """One ConsumeQueue file of one (topic, queueId)."""

    path: str
    topic: str
    queue_id: int
    file_from_offset: int


def scan_queue_file(part: QueueFilePartition) -> Iterator[tuple[Any, ...]]:
    """Rows of one ConsumeQueue file up to its first never-written unit; filler units skipped."""
    from ferrymq.store.consume_queue import (
        BLANK_UNIT_SIZE,
        CQ_STORE_UNIT_SIZE,
        is_valid_unit,
        iter_units,
    )

    with open(part.path, "rb") as fh:
        try:
            mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        except ValueError:
            return
    view = memoryview(mm)
    try:
        first = part.file_from_offset // CQ_STORE_UNIT_SIZE
        for pos, offset, size, tags_code in iter_units(view):
            if size == BLANK_UNIT_SIZE:
                continue
            if not is_valid_unit(offset, size):
                return
            yield (
                part.topic,
                part.queue_id,
                first + pos // CQ_STORE_UNIT_SIZE,
                offset,
                size,
                tags_code,
            )
    finally:
        view.release()
        mm.close()


class ConsumeQueueReader(DataSourceReader):  # type: ignore[misc]
    def __init__(self, options: Mapping[str, str], columns: list[str] | None = None) -> None:
        # positions of the wanted columns in a full row; None: every column, in order
        self.picks = (
            None if columns is None or columns == COLUMNS else [COLUMNS.index(c) for c in columns]
        )
        self.directory = str(store_subdir(options, "consumequeue", FORMAT))
        self.batch_size = int_option(options, "batchSize", 65536)
        self.topic = options.get("topic")

    def partitions(self) -> list[QueueFilePartition]:
        parts = []
        for topic_dir in sorted(Path(self.directory).iterdir()):
            if not topic_dir.is_dir() or (self.topic and topic_dir.name != self.topic):
                continue
            for queue_dir in sorted(topic_dir.iterdir()):
                if not (queue_dir.is_dir() and queue_dir.name.isdigit()):
                    continue
                for start, path in numbered_files(queue_dir):
                    parts.append(
                        QueueFilePartition(str(path), topic_dir.name, int(queue_dir.name), start)
                    )
        return parts

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        if not isinstance(partition, QueueFilePartition):
            raise TypeError(f"unexpected partition {partition!r}")
        picks = self.picks
        if picks is None:
            yield from scan_queue_file(partition)
            return
        for row in scan_queue_file(partition):
            yield tuple([row[i] for i in picks])


class ConsumeQueueDataSource(DataSource):  # type: ignore[misc]
    """The ``ferrymq-consumequeue`` format (option ``topic`` restricts the scan to one topic)."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: StructType) -> ConsumeQueueReader:
        # ``schema`` is the user's when one was given (a projection), else SCHEMA's.
        return ConsumeQueueReader(self.options, projected_columns(FORMAT, SCHEMA, schema))
