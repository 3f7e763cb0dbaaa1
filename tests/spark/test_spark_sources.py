"""The CommitLog and ConsumeQueue data sources read back a store written by MessageStore exactly."""

from __future__ import annotations

from pathlib import Path

import pytest
from spark_store_factory import Put, write_mixed_layout_commit_log, write_store

pytestmark = pytest.mark.spark

TOPICS = ("OrderT", "PayT")


def plan(n: int) -> list[tuple[str, int, int]]:
    # bodies from 0 to ~3 KiB so 64 KiB files roll with blank records of many sizes
    return [(TOPICS[i % 2], i % 3, (i * 37) % 3000) for i in range(n)]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Put]]:
    root = tmp_path_factory.mktemp("store")
    puts = write_store(root, plan(400))
    return root, puts


def test_commitlog_rows_equal_what_was_put(spark, store) -> None:  # type: ignore[no-untyped-def]
    root, puts = store
    files = sorted((root / "commitlog").iterdir())
    assert len(files) > 3, "the test store must span several segments"
    df = spark.read.format("ferrymq-commitlog").load(str(root))
    assert df.rdd.getNumPartitions() == len(files)
    rows = sorted(df.collect(), key=lambda r: r.physicalOffset)
    assert len(rows) == len(puts)
    for row, put in zip(rows, puts, strict=True):
        assert (row.topic, row.queueId, row.queueOffset, row.physicalOffset) == (
            put.topic,
            put.queue_id,
            put.queue_offset,
            put.physical_offset,
        )
        assert row.storeTimestamp == put.store_timestamp
        assert row.bodySize == put.body_size
        assert row.tags == put.tags
        assert tuple(row.keys) == put.keys
        assert row.uniqKey == put.uniq_key
        assert row.reconsumeTimes == 0 and row.sysFlag == 0
    # per queue the offsets are 0..n-1 with no gap
    for topic in TOPICS:
        for qid in range(3):
            offs = [r.queueOffset for r in rows if r.topic == topic and r.queueId == qid]
            assert offs == list(range(len(offs)))


def test_split_files_read_the_same_rows(spark, store) -> None:  # type: ignore[no-untyped-def]
    root, puts = store
    files = sorted((root / "commitlog").iterdir())
    df = spark.read.format("ferrymq-commitlog").option("splitSize", "8192").load(str(root))
    assert df.rdd.getNumPartitions() > 3 * len(files)
    got = sorted((r.physicalOffset, r.queueOffset, r.topic) for r in df.collect())
    assert got == [(p.physical_offset, p.queue_offset, p.topic) for p in puts]


def test_record_boundaries_are_record_starts(store) -> None:  # type: ignore[no-untyped-def]
    from ferrymq_spark.sources.commit_log import record_boundaries

    root, puts = store
    starts = {p.physical_offset for p in puts}
    files = sorted((root / "commitlog").iterdir())
    for f in files:
        cuts = record_boundaries(str(f), 4096)
        assert cuts[0] == 0 and cuts == sorted(cuts)
        assert f == files[-1] or len(cuts) > 4  # full 64 KiB files cut about every 4 KiB
        assert all(int(f.name) + c in starts for c in cuts)


def test_record_boundaries_and_splits_cross_v2_records(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Records of magic code v2 (and IPv6 hosts) are record starts too: the split-point search
    walks past them instead of ending the file's cuts at the first one."""
    from ferrymq_spark.sources.commit_log import record_boundaries

    starts = write_mixed_layout_commit_log(tmp_path, 60)
    path = tmp_path / "commitlog" / f"{0:020d}"
    want, next_cut = [0], 4096
    for pos in starts:
        if pos >= next_cut:
            want.append(pos)
            next_cut = pos + 4096
    assert len(want) > 8
    assert record_boundaries(str(path), 4096) == want
    df = spark.read.format("ferrymq-commitlog").option("splitSize", "4096").load(str(tmp_path))
    assert df.rdd.getNumPartitions() == len(want)
    rows = df.select("physicalOffset", "queueOffset", "uniqKey").collect()
    got = sorted((r.physicalOffset, r.queueOffset, r.uniqKey) for r in rows)
    assert got == [(pos, i, f"U{i:08d}") for i, pos in enumerate(starts)]


def test_commitlog_with_crc_check_and_sql(spark, store) -> None:  # type: ignore[no-untyped-def]
    root, puts = store
    df = (
        spark.read.format("ferrymq-commitlog")
        .option("checkCrc", "true")
        .load(str(root / "commitlog"))
    )
    df.createOrReplaceTempView("cl")
    got = {
        (r.topic, r.tags): r.n
        for r in spark.sql("select topic, tags, count(*) n from cl group by topic, tags").collect()
    }
    want: dict[tuple[str, str | None], int] = {}
    for p in puts:
        want[(p.topic, p.tags)] = want.get((p.topic, p.tags), 0) + 1
    assert got == want


def test_consumequeue_matches_commitlog(spark, store) -> None:  # type: ignore[no-untyped-def]
    root, puts = store
    cq = spark.read.format("ferrymq-consumequeue").load(str(root))
    rows = {(r.topic, r.queueId, r.queueOffset): r for r in cq.collect()}
    assert len(rows) == len(puts)
    cl_sizes = {
        r.physicalOffset: r.storeSize
        for r in spark.read.format("ferrymq-commitlog").load(str(root)).collect()
    }
    for p in puts:
        r = rows[(p.topic, p.queue_id, p.queue_offset)]
        assert r.commitLogOffset == p.physical_offset
        assert r.size == cl_sizes[p.physical_offset]
    one = spark.read.format("ferrymq-consumequeue").option("topic", "PayT").load(str(root))
    assert one.count() == sum(1 for p in puts if p.topic == "PayT")


def _copy_store(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src / "commitlog", dst / "commitlog")
    return dst


def test_torn_tail_in_newest_file_ends_the_scan(spark, store, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    root, puts = store
    copy = _copy_store(root, tmp_path)
    newest = sorted((copy / "commitlog").iterdir())[-1]
    last = puts[-1]
    start = int(newest.name)
    with open(newest, "r+b") as fh:  # tear the last record: clobber its magic code
        fh.seek(last.physical_offset - start + 4)
        fh.write(b"\xde\xad\xbe\xef")
    df = spark.read.format("ferrymq-commitlog").load(str(copy))
    assert df.count() == len(puts) - 1
    with pytest.raises(Exception, match=r"invalid record at byte"):
        spark.read.format("ferrymq-commitlog").option("onInvalid", "fail").load(str(copy)).count()


def test_damage_in_an_older_file_fails_with_its_name(spark, store, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    root, puts = store
    copy = _copy_store(root, tmp_path)
    first = sorted((copy / "commitlog").iterdir())[0]
    victim = next(p for p in puts if p.physical_offset > 0 and p.physical_offset < 20_000)
    with open(first, "r+b") as fh:
        fh.seek(victim.physical_offset + 4)
        fh.write(b"\x00\x00\x00\x01")
    with pytest.raises(Exception, match=first.name):
        spark.read.format("ferrymq-commitlog").load(str(copy)).count()
    kept = spark.read.format("ferrymq-commitlog").option("onInvalid", "stop").load(str(copy))
    assert kept.count() < len(puts)


def test_bad_options_are_named(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(Exception, match="batchSize"):
        spark.read.format("ferrymq-commitlog").option("batchSize", "lots").load(
            str(tmp_path)
        ).count()
    with pytest.raises(Exception, match="is not a directory"):
        spark.read.format("ferrymq-commitlog").load(str(tmp_path / "missing")).count()


def test_commitlog_rows_equal_the_record_decoder(spark, store) -> None:  # type: ignore[no-untyped-def]
    """Every column of every row is what ``check_record`` decodes, record by record, with
    Arrow batches much smaller than a file (the columnar path's batch edges)."""
    from ferrymq.store.record import RecordKind, check_record
    from ferrymq.store.record_columns import records_batch

    root, puts = store
    want = []
    for f in sorted((root / "commitlog").iterdir()):
        data = f.read_bytes()
        pos, records = 0, []
        while (res := check_record(data, pos, len(data))).kind is RecordKind.MESSAGE:
            assert res.record is not None
            records.append(res.record)
            pos += res.size
        want.extend(records_batch(records).to_pylist())
    df = (
        spark.read.format("ferrymq-commitlog")
        .option("batchSize", "7")
        .option("checkCrc", "true")
        .load(str(root))
    )
    got = sorted((r.asDict() for r in df.collect()), key=lambda r: r["physicalOffset"])
    assert len(got) == len(puts) and got == want


def test_user_schema_projects_columns(spark, store, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A user schema naming some columns, in another order, gives exactly those columns of the
    full read's rows, also across a torn tail and small batches."""
    root, puts = store
    full = {
        r.physicalOffset: r.asDict()
        for r in spark.read.format("ferrymq-commitlog").load(str(root)).collect()
    }
    for ddl in (
        "storeTimestamp long, topic string, queueOffset long, physicalOffset long",
        "physicalOffset long, keys array<string>, uniqKey string",
        "physicalOffset long, tags string, bodySize int",
    ):
        df = (
            spark.read.format("ferrymq-commitlog")
            .schema(ddl)
            .option("batchSize", "13")
            .load(str(root))
        )
        names = [c.strip().split(" ")[0] for c in ddl.split(",")]
        assert df.columns == names
        rows = df.collect()
        assert len(rows) == len(puts)
        for row in rows:
            got = row.asDict()
            assert got == {n: full[row.physicalOffset][n] for n in names}
    copy = _copy_store(root, tmp_path)
    newest = sorted((copy / "commitlog").iterdir())[-1]
    with open(newest, "r+b") as fh:  # tear the last record: the projection stops there too
        fh.seek(puts[-1].physical_offset - int(newest.name) + 4)
        fh.write(b"\xde\xad\xbe\xef")
    narrow = spark.read.format("ferrymq-commitlog").schema("queueOffset long").load(str(copy))
    assert narrow.count() == len(puts) - 1


@pytest.mark.parametrize(
    ("ddl", "message"),
    [
        ("topic string, size int", r"unknown column\(s\) size \(the columns are topic, queueId"),
        ("queueOffset int", "column queueOffset is bigint, not int"),
        ("keys string", "column keys is array<string>, not string"),
        ("topic string, topic string", r"column\(s\) topic named more than once"),
        ("topic string not null", "column topic must be nullable"),
    ],
)
def test_bad_user_schema_is_named(spark, store, ddl: str, message: str) -> None:  # type: ignore[no-untyped-def]
    root, _ = store
    with pytest.raises(Exception, match=message):
        spark.read.format("ferrymq-commitlog").schema(ddl).load(str(root)).collect()


def test_consumequeue_user_schema_projects_columns(spark, store) -> None:  # type: ignore[no-untyped-def]
    """The ConsumeQueue source projects a user schema too: the same columns of the full rows."""
    root, puts = store
    full = {
        (r.topic, r.queueId, r.queueOffset): r.asDict()
        for r in spark.read.format("ferrymq-consumequeue").load(str(root)).collect()
    }
    ddl = "tagsCode long, queueOffset long, topic string, queueId int"
    df = spark.read.format("ferrymq-consumequeue").schema(ddl).load(str(root))
    assert df.columns == ["tagsCode", "queueOffset", "topic", "queueId"]
    rows = df.collect()
    assert len(rows) == len(puts) == len(full)
    for row in rows:
        got = row.asDict()
        assert got == {n: full[(row.topic, row.queueId, row.queueOffset)][n] for n in got}
    one = spark.read.format("ferrymq-consumequeue").schema("size int").load(str(root))
    assert sorted(r.size for r in one.collect()) == sorted(r["size"] for r in full.values())


@pytest.mark.parametrize(
    ("ddl", "message"),
    [
        ("topic string, bodySize int", r"unknown column\(s\) bodySize \(the columns are topic,"),
        ("size long", "column size is int, not bigint"),
        ("size int, size int", r"column\(s\) size named more than once"),
    ],
)
def test_consumequeue_bad_user_schema_is_named(spark, store, ddl: str, message: str) -> None:  # type: ignore[no-untyped-def]
    root, _ = store
    with pytest.raises(Exception, match="ferrymq-consumequeue: bad schema: .*" + message):
        spark.read.format("ferrymq-consumequeue").schema(ddl).load(str(root)).collect()
