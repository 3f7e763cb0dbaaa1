"""``spark.read.format("ferrymq-commitlog").load(store_dir)``: one row per CommitLog message.

The CommitLog is a sequence of files named by their start offset; each holds records back to back
until a blank end-of-file record or zeros (upstream ``CommitLog``; record layout in
:mod:`ferrymq.store.record`, whose ``check_record`` is the only decoder used here). A partition is
one file, so segments are read in parallel; rows leave ``read()`` as Arrow record batches.

Options (strings): ``checkCrc`` (default false: CRC costs a pass over every body), ``batchSize``
(rows per Arrow batch, default 16384), ``onInvalid``: ``tail`` (default; a record that does not
parse ends the scan when it is in the newest file, as recovery truncates a torn tail, and fails the
job when it is in an older file), ``fail`` (always fail) or ``stop`` (stop the file's scan, keep
going with the others).
"""

from __future__ import annotations

import mmap
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from ferrymq_spark.sources.options import (
    bool_option,
    choice_option,
    int_option,
    numbered_files,
    store_subdir,
)

FORMAT = "ferrymq-commitlog"

SCHEMA = (
    "topic string, queueId int, queueOffset long, physicalOffset long, storeTimestamp long, "
    "bornTimestamp long, bodySize int, tags string, keys array<string>, reconsumeTimes int, "
    "sysFlag int, flag int, storeSize int, uniqKey string"
)
COLUMNS = [c.strip().split(" ", 1)[0] for c in SCHEMA.split(",")]


class CommitLogError(Exception):
    """A CommitLog file holds a record that does not parse where data must be intact."""


@dataclass(frozen=True)
class SegmentPartition(InputPartition):  # type: ignore[misc]
    """One CommitLog file: its path, start offset and whether it is the newest file."""

    path: str
    file_from_offset: int
    newest: bool


def _arrow_schema() -> Any:
    import pyarrow as pa

    return pa.schema(
        [
            ("topic", pa.string()),
            ("queueId", pa.int32()),
            ("queueOffset", pa.int64()),
            ("physicalOffset", pa.int64()),
            ("storeTimestamp", pa.int64()),
            ("bornTimestamp", pa.int64()),
            ("bodySize", pa.int32()),
            ("tags", pa.string()),
            ("keys", pa.list_(pa.string())),
            ("reconsumeTimes", pa.int32()),
            ("sysFlag", pa.int32()),
            ("flag", pa.int32()),
            ("storeSize", pa.int32()),
            ("uniqKey", pa.string()),
        ]
    )


def scan_segment(
    path: str, *, check_crc: bool, on_invalid: str, newest: bool
) -> Iterator[tuple[Any, ...]]:
    """Rows of one CommitLog file, in file order (the decoder is ``record.check_record``)."""
    from ferrymq.store.record import RecordKind, check_record

    with open(path, "rb") as fh:
        try:
            mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        except ValueError:  # an empty file cannot be mapped: it holds nothing
            return
    try:
        mm.madvise(mmap.MADV_SEQUENTIAL)
        pos, limit = 0, len(mm)
        while pos < limit:
            res = check_record(mm, pos, limit, check_crc=check_crc)
            if res.kind is RecordKind.MESSAGE and res.record is not None:
                r = res.record
                props = r.properties
                keys = props.get("KEYS")
                yield (
                    r.topic,
                    r.queue_id,
                    r.queue_offset,
                    r.physical_offset,
                    r.store_timestamp,
                    r.born_timestamp,
                    r.body_len,
                    props.get("TAGS"),
                    [k for k in keys.split(" ") if k] if keys else [],
                    r.reconsume_times,
                    r.sys_flag,
                    r.flag,
                    r.size,
                    props.get("UNIQ_KEY"),
                )
                pos += res.size
                continue
            if res.kind in (RecordKind.BLANK, RecordKind.END):
                return
            # INVALID: a torn tail in the newest file is what recovery truncates; elsewhere the
            # data is damaged and silently skipping it would under-count.
            if on_invalid == "stop" or (on_invalid == "tail" and newest):
                return
            raise CommitLogError(f"{path}: invalid record at byte {pos}: {res.reason}")
    finally:
        mm.close()


class CommitLogReader(DataSourceReader):  # type: ignore[misc]
    def __init__(self, options: Mapping[str, str]) -> None:
        self.directory = str(store_subdir(options, "commitlog", FORMAT))
        self.check_crc = bool_option(options, "checkCrc", False)
        self.batch_size = int_option(options, "batchSize", 16384)
        self.on_invalid = choice_option(options, "onInvalid", "tail", ("tail", "fail", "stop"))

    def partitions(self) -> list[SegmentPartition]:
        from pathlib import Path

        files = numbered_files(Path(self.directory))
        return [
            SegmentPartition(str(p), start, i == len(files) - 1)
            for i, (start, p) in enumerate(files)
        ]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        import pyarrow as pa

        if not isinstance(partition, SegmentPartition):
            raise TypeError(f"unexpected partition {partition!r}")
        schema = _arrow_schema()
        rows = scan_segment(
            partition.path,
            check_crc=self.check_crc,
            on_invalid=self.on_invalid,
            newest=partition.newest,
        )
        batch: list[tuple[Any, ...]] = []
        for row in rows:
            batch.append(row)
            if len(batch) >= self.batch_size:
                yield _to_batch(pa, schema, batch)
                batch = []
        if batch:
            yield _to_batch(pa, schema, batch)


def _to_batch(pa: Any, schema: Any, rows: list[tuple[Any, ...]]) -> Any:
    columns = list(zip(*rows, strict=True))
    return pa.RecordBatch.from_arrays(
        [pa.array(col, type=schema.field(i).type) for i, col in enumerate(columns)],
        schema=schema,
    )


class CommitLogDataSource(DataSource):  # type: ignore[misc]
    """The ``ferrymq-commitlog`` format."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: StructType) -> CommitLogReader:
        return CommitLogReader(self.options)
