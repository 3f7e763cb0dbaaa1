"""Snapshot schema, atomic writer, history listing, and the Spark loader's derived schema."""

from __future__ import annotations

from pathlib import Path

import pytest
from ferrymq.snapshot.schema import OffsetRow, SnapshotMeta
from ferrymq.snapshot.writer import (
    SnapshotError,
    list_snapshots,
    read_snapshot,
    snapshot_id_for,
    write_snapshot,
)
from ferrymq_spark.snapshot import open_history, spark_schema
from spark_snapshot_factory import T0, Client, Spec, write_history

pytestmark = pytest.mark.spark


def one_spec(at: int = T0) -> Spec:
    return Spec(
        at=at,
        max_offsets={("T", "b", 0): 10, ("T", "b", 1): 7},
        offsets={("g", "T", "b", 0): 4, ("g", "T", "b", 1): 7},
        clients={
            "g": [Client("c1", owns=[("T", "b", 0), ("T", "b", 1)], subs={"T": "*"}, seen=["c1"])]
        },
    )


def test_round_trip_and_order(tmp_path: Path) -> None:
    write_history(tmp_path, [one_spec(T0 + 60_000), one_spec(T0)])
    (tmp_path / ".tmp-20990101T000000.000Z").mkdir()  # a crashed collector's leftover
    dirs = list_snapshots(tmp_path)
    assert [d.name for d in dirs] == [snapshot_id_for(T0), snapshot_id_for(T0 + 60_000)]
    snap = read_snapshot(dirs[0])
    offsets = snap.offsets
    assert [(r.queueId, r.consumerOffset, r.brokerOffset) for r in offsets] == [
        (0, 4, 10),
        (1, 7, 7),
    ]
    assert snap.clients[0].seenConsumerIds == ["c1"]


def test_writer_refuses_foreign_rows_and_duplicates(tmp_path: Path) -> None:
    meta = SnapshotMeta(snapshotId="s1", takenAt=T0, finishedAt=T0, namesrv="x")
    row = OffsetRow(
        snapshotId="s2",
        takenAt=T0,
        group="g",
        topic="T",
        brokerName="b",
        queueId=0,
        brokerOffset=1,
        consumerOffset=0,
    )
    with pytest.raises(SnapshotError, match="row of snapshot 's2'"):
        write_snapshot(tmp_path, meta, {"offsets": [row]})
    with pytest.raises(SnapshotError, match="unknown snapshot table"):
        write_snapshot(tmp_path, meta, {"bogus": []})
    write_snapshot(tmp_path, meta, {})
    with pytest.raises(SnapshotError, match="already exists"):
        write_snapshot(tmp_path, meta, {})


def test_corrupt_line_is_named(tmp_path: Path) -> None:
    (d,) = write_history(tmp_path, [one_spec()])
    (d / "offsets.jsonl").write_text('{"snapshotId": "x", "takenAt": -1}\n')
    with pytest.raises(SnapshotError, match=r"offsets.jsonl:1"):
        read_snapshot(d)


def test_empty_history_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(SnapshotError, match="no snapshot under"):
        open_history(tmp_path)
    with pytest.raises(SnapshotError, match="does not exist"):
        open_history(tmp_path / "missing")


def test_spark_schema_follows_the_models() -> None:
    schema = spark_schema(OffsetRow)
    names = [f.name for f in schema.fields]
    assert names[:3] == ["snapshotId", "takenAt", "group"]
    by = {f.name: f for f in schema.fields}
    assert by["consumerOffset"].dataType.typeName() == "long"
    assert by["oldestUnconsumedTimestamp"].nullable


def test_history_tables_load_in_spark(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    write_history(tmp_path, [one_spec(T0), one_spec(T0 + 60_000)])
    history = open_history(tmp_path)
    offsets = history.table(spark, "offsets")
    assert offsets.count() == 4
    clients = history.table(spark, "clients").collect()
    assert {tuple(r.seenConsumerIds) for r in clients} == {("c1",)}
    last = open_history(tmp_path, limit=1)
    assert last.table(spark, "offsets").count() == 2


def test_corrupt_line_fails_the_spark_read(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (d,) = write_history(tmp_path, [one_spec()])
    (d / "queues.jsonl").write_text("{not json\n")
    with pytest.raises(Exception, match=r"(?i)malformed|parse"):
        open_history(tmp_path).table(spark, "queues").collect()
