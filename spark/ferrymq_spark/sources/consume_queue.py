"""``spark.read.format("ferrymq-consumequeue").load(store_dir)``: one row per ConsumeQueue entry.

Layout (upstream ``ConsumeQueue``): ``consumequeue/<topic>/<queueId>/<start byte offset>`` files of
20-byte units ``commitLogOffset:int64 | size:int32 | tagsCode:int64``; the entry index is the
queue offset. Files are preallocated, so the valid data ends at the first unit whose size is not
positive (upstream recovery's ``offset >= 0 && size > 0`` test). A partition is one file.
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

FORMAT = "ferrymq-consumequeue"
SCHEMA = (
    "topic string, queueId int, queueOffset long, commitLogOffset long, size int, tagsCode long"
)


def _unit() -> Any:
    """The 20-byte unit struct, owned by the store's ConsumeQueue module."""
    from ferrymq.store.consume_queue import CQ_UNIT

    return CQ_UNIT


@dataclass(frozen=True)
class QueueFilePartition(InputPartition):  # type: ignore[misc]
    """One ConsumeQueue file of one (topic, queueId)."""

    path: str
    topic: str
    queue_id: int
    file_from_offset: int


def scan_queue_file(part: QueueFilePartition) -> Iterator[tuple[Any, ...]]:
    """Rows of one ConsumeQueue file up to its first empty unit."""
    unit = _unit()
    with open(part.path, "rb") as fh:
        try:
            mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        except ValueError:
            return
    try:
        usable = len(mm) - len(mm) % unit.size
        first = part.file_from_offset // unit.size
        for i, (offset, size, tags_code) in enumerate(unit.iter_unpack(mm[:usable])):
            if offset < 0 or size <= 0:
                return
            yield (part.topic, part.queue_id, first + i, offset, size, tags_code)
    finally:
        mm.close()


class ConsumeQueueReader(DataSourceReader):  # type: ignore[misc]
    def __init__(self, options: Mapping[str, str]) -> None:
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
        yield from scan_queue_file(partition)


class ConsumeQueueDataSource(DataSource):  # type: ignore[misc]
    """The ``ferrymq-consumequeue`` format (option ``topic`` restricts the scan to one topic)."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: StructType) -> ConsumeQueueReader:
        return ConsumeQueueReader(self.options)
