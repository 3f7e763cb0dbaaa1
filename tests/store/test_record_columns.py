"""The columnar CommitLog decoder gives exactly the rows, and stops exactly where, the
record-at-a-time decoder (``check_record``) does: on stores written by MessageStore and on
damaged bytes."""

from __future__ import annotations

import asyncio
import mmap
import random
from pathlib import Path
from typing import Any

import pytest
from ferrymq.message import Message, MessageInner, MessageSysFlag, encode_batch
from ferrymq.store.record import (
    BODY_CRC_POS,
    BODY_POS,
    FLAG_POS,
    QUEUE_ID_POS,
    RECONSUME_TIMES_POS,
    SYS_FLAG_POS,
    DecodedRecord,
    RecordKind,
    check_record,
    encode_blank_into,
    encode_record_into,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .helpers import msg, open_store, small_config

pa = pytest.importorskip("pyarrow")
pytest.importorskip("numpy")

from ferrymq.store.record_columns import (  # noqa: E402
    COLUMNS,
    commit_log_schema,
    decode_columns,
    records_batch,
)

Outcome = tuple[list[dict[str, Any]], int, RecordKind, str]


def reference_scan(buf: Any, limit: int, check_crc: bool) -> Outcome:
    """Rows, stop position, and what is there, record by record (the existing decoder)."""
    records: list[DecodedRecord] = []
    pos = 0
    while True:
        res = check_record(buf, pos, limit, check_crc=check_crc)
        if res.kind is not RecordKind.MESSAGE or res.record is None:
            return records_batch(records).to_pylist(), pos, res.kind, res.reason
        records.append(res.record)
        pos += res.size


def columnar_scan(buf: Any, limit: int, check_crc: bool, max_rows: int) -> Outcome:
    """The same with decode_columns, deferring to check_record wherever it stops (as the Spark
    data source does)."""
    rows: list[dict[str, Any]] = []
    pos = 0
    while True:
        batch, after = decode_columns(
            buf, pos, limit, limit, max_rows=max_rows, check_crc=check_crc
        )
        assert batch.schema.equals(commit_log_schema())
        assert batch.num_rows <= max_rows
        if batch.num_rows:
            rows.extend(batch.to_pylist())
            pos = after
            continue
        res = check_record(buf, pos, limit, check_crc=check_crc)
        # The data source would still emit a record the columnar path declined (one row via
        # records_batch), but the two paths are meant to agree on every record.
        assert res.kind is not RecordKind.MESSAGE, f"columnar path declined a record at {pos}"
        return rows, pos, res.kind, res.reason


def assert_same(buf: Any, limit: int | None = None, check_crc: bool = False) -> Outcome:
    end = len(buf) if limit is None else limit
    want = reference_scan(buf, end, check_crc)
    for max_rows in (1, 3, 64, 100_000):
        assert columnar_scan(buf, end, check_crc, max_rows) == want, max_rows
    return want


def put_all(root: Path, file_size: int = 32 * 1024) -> list[Path]:
    """A real store: several topics and queues, odd properties, batch-written messages."""

    async def write() -> None:
        store = await open_store(small_config(root, mappedFileSizeCommitLog=file_size))
        try:
            for i in range(120):
                props: dict[str, str] = {}
                if i % 2:
                    props["TAGS"] = ["tagA", "", "t\u00e4g", "x y"][i % 4]
                if i % 3:
                    props["KEYS"] = ["k1", "k1 k2", "  lead  trail ", "", " ", "\u00fc1 \u00fc2"][
                        i % 6
                    ]
                if i % 5:
                    props["UNIQ_KEY"] = f"{i:032X}"
                if i % 7 == 0:
                    props["KEYSX"] = "not-keys"
                    props["XTAGS"] = "not-tags"
                topic = ["Orders", "Pay\u00e9", "T" * 127][i % 3]
                body = bytes([i % 251]) * ((i * 53) % 1500)
                res = await store.put_message(
                    msg(topic, i % 4, body, props, flag=i, reconsume_times=i % 3)
                )
                assert res.is_ok, res
                if i % 17 == 0:  # a batch (SEND_BATCH_MESSAGE body), upstream style
                    items = [
                        Message("Orders", b"b" * j, 0, {"KEYS": f"batch-{i}-{j}", "TAGS": "bt"})
                        for j in range(5)
                    ]
                    batch = MessageInner.create(
                        "Orders",
                        1,
                        encode_batch(items),
                        {},
                        born_timestamp=1_700_000_000_000,
                        born_host=("127.0.0.1", 40000),
                    )
                    res = await store.put_messages(batch)
                    assert res.is_ok, res
        finally:
            await store.shutdown()

    asyncio.run(write())
    return sorted((root / "commitlog").iterdir())


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return put_all(tmp_path_factory.mktemp("cl"))


def read(path: Path) -> bytearray:
    return bytearray(path.read_bytes())


def test_store_files_decode_the_same(files: list[Path]) -> None:
    assert len(files) > 2
    total = 0
    for path in files:
        data = read(path)
        rows, _pos, kind, _ = assert_same(data)
        assert_same(data, check_crc=True)
        assert kind in (RecordKind.BLANK, RecordKind.END)
        total += len(rows)
    assert total == 120 + 8 * 5  # every put, every batch item
    # the columns hold what was put (spot checks beyond equality with check_record)
    data = read(files[0])
    rows = decode_columns(data, 0, len(data), len(data), max_rows=10)[0].to_pylist()
    first = rows[0]
    assert first["topic"] == "Orders" and first["queueId"] == 0 and first["physicalOffset"] == 0
    assert first["tags"] is None and first["keys"] == [] and first["uniqKey"] is None
    assert rows[1]["queueId"] == 1 and rows[1]["keys"] == ["batch-0-0"]  # a batch item
    assert rows[1]["tags"] == "bt" and rows[5]["keys"] == ["batch-0-4"]
    assert rows[6]["tags"] == "" and rows[6]["keys"] == ["k1", "k2"]  # the put of i = 1
    assert rows[6]["uniqKey"] == f"{1:032X}" and rows[6]["flag"] == 1
    assert [c for c, _ in COLUMNS] == commit_log_schema().names


def test_mmap_is_released(files: list[Path]) -> None:
    with open(files[0], "rb") as fh:
        mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    batch, after = decode_columns(mm, 0, len(mm), len(mm), max_rows=1000, check_crc=True)
    mm.close()  # raises BufferError if any array still refers to the map
    assert batch.num_rows > 10 and after > 0
    assert batch.column("topic")[0].as_py() == "Orders"  # the batch owns its bytes


def test_ranges_cut_values_out_with_either_offset_width(monkeypatch: pytest.MonkeyPatch) -> None:
    """``_ranges`` (increasing, non-overlapping byte ranges -> a string array) gives the same
    values whether its segments use 32-bit offsets or, past 2 GiB of span, 64-bit ones."""
    import numpy as np
    from ferrymq.store import record_columns

    data = np.frombuffer(b"..abc.de...\xc3\xa9f.g", dtype=np.uint8)
    starts = np.array([2, 6, 11, 0, 15], dtype=np.int64)
    lengths = np.array([3, 2, 3, 0, 1], dtype=np.int64)
    valid = np.array([True, True, True, False, True])
    starts[~valid] = 0
    want = ["abc", "de", "\u00e9f", None, "g"]
    narrow = record_columns._ranges(np, data, starts, lengths, valid)
    assert narrow.to_pylist() == want
    monkeypatch.setattr(record_columns, "_MAX_ARROW_BYTES", 4)
    wide = record_columns._ranges(np, data, starts, lengths, valid)
    assert wide.type == pa.string() and wide.to_pylist() == want
    assert record_columns._ranges(np, data, starts[:0], lengths[:0]).to_pylist() == []


def test_splits_stop_at_their_end(files: list[Path]) -> None:
    data = read(files[0])
    _rows, end, _kind, _ = reference_scan(data, len(data), False)
    batch, after = decode_columns(data, 0, 1, len(data), max_rows=100)
    assert batch.num_rows == 1 and after == batch.column("storeSize")[0].as_py()
    batch2, after2 = decode_columns(data, after, end, len(data), max_rows=1_000_000)
    assert after2 == end
    assert batch2.column("physicalOffset")[0].as_py() == after


# --- hand-built records: every check of check_record, one at a time --------------------------


def record(
    topic: bytes = b"Topic",
    props: bytes = b"TAGS\x01t\x02KEYS\x01a b\x02UNIQ_KEY\x01U1\x02",
    body: bytes = b"payload",
    **fields: int,
) -> bytearray:
    buf = bytearray(4096)
    size = encode_record_into(
        buf,
        0,
        queue_id=fields.get("queue_id", 1),
        flag=fields.get("flag", 0),
        queue_offset=fields.get("queue_offset", 0),
        physical_offset=fields.get("physical_offset", 0),
        sys_flag=fields.get("sys_flag", 0),
        born_timestamp=1,
        born_ip=b"\x7f\x00\x00\x01",
        born_port=1,
        store_timestamp=2,
        store_ip=b"\x7f\x00\x00\x01",
        store_port=2,
        reconsume_times=0,
        prepared_transaction_offset=0,
        body=body,
        topic=topic,
        properties=props,
    )
    return buf[:size]


def log(*records: bytes | bytearray, tail: bytes = b"") -> bytearray:
    return bytearray(b"".join(records) + tail)


GOOD = record()


@pytest.mark.parametrize(
    "props",
    [
        b"",
        b"TAGS\x01a\x02TAGS\x01b\x02",  # repeated: the last wins
        b"TAGS\x01a\x01b\x02",  # value holding the name separator
        b"\x01TAGS\x02TAGS",  # no name / no separator: skipped
        b"X\x01TAGS\x01v",  # TAGS inside a value is not a name
        b"KEYS\x01  a   b  \x02",  # runs of spaces
        b"KEYS\x01\x02TAGS\x01",  # empty values
        b"UNIQ_KEY\x01u",  # no trailing separator
        b"TAGS\x01\xc3\xa4\x02KEYS\x01\xe2\x82\xac \xf0\x9f\x98\x80\x02",  # multi-byte UTF-8
        b"\x02\x02\x02",
        b"TAG\x01short\x02TAGSS\x01long\x02",
    ],
)
def test_property_edge_cases(props: bytes) -> None:
    other = record(topic=b"Other", props=b"TAGS\x01z\x02")
    assert_same(log(record(props=props), other, record(props=props), GOOD))


@pytest.mark.parametrize(
    ("pos", "value"),
    [
        (4, b"\xde\xad\xbe\xef"),  # bad magic
        (0, b"\x00\x00\x00\x10"),  # TOTALSIZE below the minimum
        (0, b"\x7f\x00\x00\x00"),  # TOTALSIZE beyond the data
        (SYS_FLAG_POS, (MessageSysFlag.BORNHOST_V6_FLAG).to_bytes(4, "big")),
        (BODY_POS - 4, b"\xff\xff\xff\xff"),  # negative body length
        (BODY_POS - 4, b"\x00\x00\x0f\xff"),  # body length past the record
        (BODY_POS - 4, b"\x00\x00\x00\x00"),  # lengths that do not add up
        (BODY_POS + 7, b"\x00"),  # topic length 0
        (BODY_POS + 7, b"\x80"),  # topic length negative
        (BODY_POS + 7, b"\x7f"),  # topic past the record
        (BODY_POS + 8, b"\xff"),  # topic not UTF-8
        (BODY_POS + 8, b"\xed\xa0\x80"),  # a surrogate: not UTF-8 for Python either
        (BODY_POS + 8 + 5, b"\x80\x00"),  # properties length negative
        (BODY_POS + 8 + 5, b"\x00\x01"),  # properties length short
        (BODY_POS + 8 + 5 + 2 + 2, b"\xc3\x28"),  # properties not UTF-8
        (BODY_CRC_POS, b"\x00\x00\x00\x01"),  # CRC mismatch (only with check_crc)
        (BODY_POS, b"X"),  # body changed: CRC mismatch
    ],
)
@pytest.mark.parametrize("check_crc", [False, True])
def test_damaged_record_stops_both_at_the_same_place(
    pos: int, value: bytes, check_crc: bool
) -> None:
    bad = bytearray(GOOD)
    bad[pos : pos + len(value)] = value
    data = log(GOOD, GOOD, bad, GOOD)
    rows, stop, kind, reason = assert_same(data, check_crc=check_crc)
    if kind is RecordKind.INVALID:
        assert stop == 2 * len(GOOD) and len(rows) == 2, reason


def test_fields_at_their_positions() -> None:
    rec = record(queue_id=7, flag=9, sys_flag=MessageSysFlag.TRANSACTION_PREPARED_TYPE)
    rec[RECONSUME_TIMES_POS : RECONSUME_TIMES_POS + 4] = (3).to_bytes(4, "big")
    assert rec[QUEUE_ID_POS + 3] == 7 and rec[FLAG_POS + 3] == 9
    (row,) = assert_same(log(rec))[0]
    assert (row["queueId"], row["flag"], row["reconsumeTimes"]) == (7, 9, 3)
    assert row["sysFlag"] == MessageSysFlag.TRANSACTION_PREPARED_TYPE
    assert (row["tags"], row["keys"], row["uniqKey"]) == ("t", ["a", "b"], "U1")


def test_blank_end_of_file_zeros_and_short_tails() -> None:
    blank = bytearray(64)
    encode_blank_into(blank, 0, 64)
    assert assert_same(log(GOOD, GOOD, tail=bytes(blank)))[2] is RecordKind.BLANK
    assert assert_same(log(GOOD, tail=bytes(200)))[2] is RecordKind.END
    for cut in (1, 4, 8, 50, len(GOOD) - 1):  # a torn last record
        assert_same(log(GOOD, GOOD[:cut]))
    assert assert_same(bytearray())[2] is RecordKind.END
    # limit shorter than the buffer: records past it are not read
    data = log(GOOD, GOOD, GOOD)
    assert len(assert_same(data, limit=2 * len(GOOD) + 10)[0]) == 2


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32 - 1),
    flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=4),
    check_crc=st.booleans(),
)
def test_random_damage_agrees(seed: int, flips: list[tuple[int, int]], check_crc: bool) -> None:
    rnd = random.Random(seed)
    parts = []
    for _ in range(rnd.randint(1, 12)):
        props = rnd.choice(
            [b"", b"TAGS\x01a\x02", b"KEYS\x01x  y\x02UNIQ_KEY\x01q\x02", b"TAGS\x01\xc3\xa9\x02"]
        )
        topic = rnd.choice([b"A", b"Topic\xc3\xa9", b"T" * 127])
        parts.append(record(topic=topic, props=props, body=rnd.randbytes(rnd.randint(0, 300))))
    data = log(*parts, tail=bytes(rnd.randint(0, 100)))
    for where, byte in flips:
        if data:
            data[where % len(data)] = byte
    assert_same(data, check_crc=check_crc)


@pytest.mark.parametrize(
    "columns",
    [
        ["queueOffset"],
        ["storeTimestamp", "topic", "queueId", "queueOffset"],
        ["uniqKey", "keys", "physicalOffset"],
        ["tags", "bodySize", "flag", "storeSize"],
    ],
)
def test_projection_is_the_full_rows_columns(files: list[Path], columns: list[str]) -> None:
    """Asking for some columns, in any order, gives those columns of the full decode and stops
    at the same place, batch by batch."""
    from ferrymq.store.record_columns import projection

    for path in files:
        data = read(path)
        pos = 0
        while True:
            full, after = decode_columns(data, pos, len(data), len(data), max_rows=7)
            part, part_after = decode_columns(
                data, pos, len(data), len(data), max_rows=7, columns=columns
            )
            assert part_after == after
            assert part.schema.names == columns == list(projection(columns))
            assert part.to_pylist() == full.select(columns).to_pylist()
            if not full.num_rows:
                break
            pos = after
    records = [r for r in reference_scan(read(files[0]), len(read(files[0])), False)[0]]
    assert records  # the reference path projects the same way
    assert records_batch_for(files[0], columns) == [{c: r[c] for c in columns} for r in records]


def records_batch_for(path: Path, columns: list[str]) -> list[dict[str, Any]]:
    data = read(path)
    records: list[DecodedRecord] = []
    pos = 0
    while (res := check_record(data, pos, len(data))).kind is RecordKind.MESSAGE:
        assert res.record is not None
        records.append(res.record)
        pos += res.size
    return records_batch(records, columns).to_pylist()


def test_projection_refuses_unknown_and_repeated_columns() -> None:
    from ferrymq.store.record_columns import projection

    with pytest.raises(ValueError, match=r"unknown column\(s\) size; the columns are topic"):
        projection(["topic", "size"])
    with pytest.raises(ValueError, match=r"column\(s\) tags named more than once"):
        projection(["tags", "tags"])
    assert projection(None) == tuple(c for c, _ in COLUMNS)
