"""``spark.read.format("ferrymq-commitlog").load(store_dir)``: one row per CommitLog message.

The CommitLog is a sequence of files named by their start offset; each holds records back to back
until a blank end-of-file record or zeros (upstream ``CommitLog``; record layout in
:mod:`ferrymq.store.record`). Records are decoded a batch at a time into columns
(:mod:`ferrymq.store.record_columns`, vectorised with numpy and pyarrow), with
``record.check_record`` deciding wherever that path stops, so rows and stopping points are those
of a record-at-a-time scan. A partition is at most ``splitSize`` bytes of one file, so segments
are read in parallel; rows leave ``read()`` as Arrow record batches.

Options (strings): ``checkCrc`` (default false: CRC costs a pass over every body), ``batchSize``
(rows per Arrow batch, default 16384), ``splitSize`` (bytes per partition, default 1 GiB, the
upstream file size, so each file is one partition; a larger file, or any file when set lower, is
cut at record boundaries found by walking its size chain on the driver, a cost of about 0.25 s per
GiB of 4 KiB messages on every query: worth it only for a store with fewer files than cores),
``onInvalid``: ``tail`` (default; a record that does not
parse ends the scan when it is in the newest file, as recovery truncates a torn tail, and fails the
job when it is in an older file), ``fail`` (always fail) or ``stop`` (stop the file's scan, keep
going with the others).

Projection: pyspark's Python data sources get no column pruning from the optimizer, so a query
that needs a few columns still pays for all of them (decoding the properties, and the JVM turning
every string into row data). Name the columns instead with a user schema, any subset of
:data:`SCHEMA` in any order, with the same types::

    spark.read.format("ferrymq-commitlog").schema("topic string, queueOffset long").load(store)

Only those columns are decoded and sent; which records are read, and where a scan stops, do not
change. A column that is not ours, a different type, a repeated name or NOT NULL is refused when
the query is planned, with the reason.
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
from ferrymq_spark.sources.projection import column_types
from ferrymq_spark.sources.projection import projected_columns as _projected_columns

FORMAT = "ferrymq-commitlog"

SCHEMA = (
    "topic string, queueId int, queueOffset long, physicalOffset long, storeTimestamp long, "
    "bornTimestamp long, bodySize int, tags string, keys array<string>, reconsumeTimes int, "
    "sysFlag int, flag int, storeSize int, uniqKey string"
)
COLUMNS = list(column_types(SCHEMA))


def projected_columns(schema: StructType | None) -> list[str]:
    """The column names of a user schema, checked to be a projection of :data:`SCHEMA`."""
    return _projected_columns(FORMAT, SCHEMA, schema)


class CommitLogError(Exception):
    """A CommitLog file holds a record that does not parse where data must be intact."""


@dataclass(frozen=True)
class SegmentPartition(InputPartition):  # type: ignore[misc]
    """A byte range ``[start, end)`` of one CommitLog file, cut at record boundaries.

    ``end`` is None for "to the end of the file's data"; ``newest`` marks the newest file's last
    range, where a torn tail may be.
    """

    path: str
    file_from_offset: int
    newest: bool
    start: int = 0
    end: int | None = None


def record_boundaries(path: str, split_size: int) -> list[int]:
    """Positions of records at or just after every ``split_size`` bytes of ``path`` (plus 0).

    Walks the TOTALSIZE chain with the codec's own header struct (8 bytes per record, no
    decoding), stopping at the blank end record, zeros, or anything that is not a message header
    (a record of either magic code, v1 or v2, is one). ``MIN_RECORD_SIZE`` is v1's, the smaller.
    """
    from ferrymq.store.record import BLANK_HEAD, MIN_RECORD_SIZE
    from ferrymq.store.record_layout import MESSAGE_MAGIC_CODES

    cuts = [0]
    with open(path, "rb") as fh:
        try:
            mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        except ValueError:
            return cuts
    try:
        pos, limit, unpack = 0, len(mm), BLANK_HEAD.unpack_from
        next_cut = split_size
        while pos + BLANK_HEAD.size <= limit:
            total, magic = unpack(mm, pos)
            if magic not in MESSAGE_MAGIC_CODES or total < MIN_RECORD_SIZE:
                break
            if pos >= next_cut:  # a message starts here: a valid cut
                cuts.append(pos)
                next_cut = pos + split_size
            pos += total
    finally:
        mm.close()
    return cuts


def scan_batches(
    path: str,
    *,
    check_crc: bool,
    on_invalid: str,
    newest: bool,
    batch_size: int,
    start: int = 0,
    end: int | None = None,
    columns: list[str] | None = None,
) -> Iterator[Any]:
    """Arrow record batches of one CommitLog file from ``start`` (a record boundary) to ``end``
    or the end of its data, in file order.

    Records are decoded in columns (:func:`ferrymq.store.record_columns.decode_columns`); where
    that path stops, ``record.check_record`` decides what the record is, exactly as a
    record-at-a-time scan would: blank or zeros end the file, damage follows ``on_invalid``.
    """
    from ferrymq.store.record import RecordKind, check_record
    from ferrymq.store.record_columns import decode_columns, records_batch

    with open(path, "rb") as fh:
        try:
            mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        except ValueError:  # an empty file cannot be mapped: it holds nothing
            return
    try:
        mm.madvise(mmap.MADV_SEQUENTIAL)
        pos, limit = start, len(mm)
        stop = limit if end is None else min(end, limit)
        while pos < stop:
            batch, after = decode_columns(
                mm, pos, stop, limit, max_rows=batch_size, check_crc=check_crc, columns=columns
            )
            if batch.num_rows:
                yield batch
                pos = after
                continue
            res = check_record(mm, pos, limit, check_crc=check_crc)
            if res.kind is RecordKind.MESSAGE and res.record is not None:
                yield records_batch([res.record], columns)  # one the columnar path declined
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
    def __init__(self, options: Mapping[str, str], columns: list[str] | None = None) -> None:
        self.columns = columns
        self.directory = str(store_subdir(options, "commitlog", FORMAT))
        self.check_crc = bool_option(options, "checkCrc", False)
        self.batch_size = int_option(options, "batchSize", 16384)
        self.on_invalid = choice_option(options, "onInvalid", "tail", ("tail", "fail", "stop"))
        self.split_size = int_option(options, "splitSize", 1024 * 1024 * 1024, minimum=4096)

    def partitions(self) -> list[SegmentPartition]:
        """One partition per ``splitSize`` bytes of each file, cut at record boundaries."""
        from pathlib import Path

        files = numbered_files(Path(self.directory))
        parts = []
        for i, (file_from, p) in enumerate(files):
            newest = i == len(files) - 1
            size = p.stat().st_size
            cuts = record_boundaries(str(p), self.split_size) if size > self.split_size else [0]
            for j, cut in enumerate(cuts):
                last = j == len(cuts) - 1
                parts.append(
                    SegmentPartition(
                        str(p), file_from, newest and last, cut, None if last else cuts[j + 1]
                    )
                )
        return parts

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if not isinstance(partition, SegmentPartition):
            raise TypeError(f"unexpected partition {partition!r}")
        yield from scan_batches(
            partition.path,
            check_crc=self.check_crc,
            on_invalid=self.on_invalid,
            newest=partition.newest,
            batch_size=self.batch_size,
            start=partition.start,
            end=partition.end,
            columns=self.columns,
        )


class CommitLogDataSource(DataSource):  # type: ignore[misc]
    """The ``ferrymq-commitlog`` format."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: StructType) -> CommitLogReader:
        # ``schema`` is the user's when one was given (a projection), else SCHEMA's.
        return CommitLogReader(self.options, projected_columns(schema))
