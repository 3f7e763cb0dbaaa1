"""The record layout is declared once (``record_layout``): every derived struct, position and
dtype agrees with the declaration, and every writer's output is read alike by every reader, for
each head layout (IPv4/IPv6 born and store hosts) and magic code."""

from __future__ import annotations

import struct
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from ferrymq.message import (
    Message,
    MessageInner,
    MessageSysFlag,
    encode_batch,
    encode_properties,
    pack_host,
)
from ferrymq.store import commit_log as cl
from ferrymq.store import get_message, record_columns
from ferrymq.store import record as rec
from ferrymq.store import record_layout as layout
from ferrymq.store.dispatch import parse_parts, parse_round
from ferrymq.store.recovery import QueueEndCheck

V4_BORN, V6_BORN = pack_host("10.1.2.3"), pack_host("2001:db8::17")
V4_STORE, V6_STORE = pack_host("127.0.0.1"), pack_host("::1")
HOSTS = {
    0: (V4_BORN, V4_STORE),
    MessageSysFlag.BORNHOST_V6_FLAG: (V6_BORN, V4_STORE),
    MessageSysFlag.STOREHOSTADDRESS_V6_FLAG: (V4_BORN, V6_STORE),
    MessageSysFlag.BORNHOST_V6_FLAG | MessageSysFlag.STOREHOSTADDRESS_V6_FLAG: (V6_BORN, V6_STORE),
}
DELAYS = [1000, 5000]


def fields(bits: int, i: int = 0, **over: Any) -> dict[str, Any]:
    born_ip, store_ip = HOSTS[bits]
    values: dict[str, Any] = {
        "queue_id": 3,
        "flag": -7,
        "queue_offset": 40 + i,
        "physical_offset": 0,
        "sys_flag": MessageSysFlag.MULTI_TAGS_FLAG,
        "born_timestamp": 1_700_000_000_000 + i,
        "born_ip": born_ip,
        "born_port": 50001,
        "store_timestamp": 1_700_000_000_500 + i,
        "store_ip": store_ip,
        "store_port": 10911,
        "reconsume_times": 2,
        "prepared_transaction_offset": 99,
        "body": b"body-%d" % i,
        "topic": b"TopicA",
        "properties": encode_properties(
            {"TAGS": "t", "KEYS": f"k{i}", "UNIQ_KEY": f"U{i:031d}"}
        ).encode(),
    }
    values.update(over)
    return values


def named(head: layout.Layout, buf: Any, pos: int = 0) -> dict[str, Any]:
    """Every head field of the record at ``pos``, by declared name (the full derived struct)."""
    return dict(zip((s.name for s in head.slots), head.struct.unpack_from(buf, pos), strict=True))


def test_declaration_is_upstreams_layout() -> None:
    """The v1 positions of upstream MessageDecoder, and calMsgLength's sizes per host width."""
    v4 = layout.HEAD_V4
    assert v4.offset == {
        "TOTALSIZE": 0, "MAGICCODE": 4, "BODYCRC": 8, "QUEUEID": 12, "FLAG": 16,
        "QUEUEOFFSET": 20, "PHYSICALOFFSET": 28, "SYSFLAG": 36, "BORNTIMESTAMP": 40,
        "BORNHOST": 48, "BORNHOST_PORT": 52, "STORETIMESTAMP": 56, "STOREHOST": 64,
        "STOREHOST_PORT": 68, "RECONSUMETIMES": 72, "PREPAREDTRANSACTIONOFFSET": 76,
        "BODYLEN": 84,
    }  # fmt: skip
    assert v4.size == rec.RECORD_HEAD.size == rec.BODY_POS == 88
    # upstream calMsgLength: a host is 8 bytes (IPv4) or 20 (IPv6)
    assert [layout.min_record_size(bits) for bits in HOSTS] == [91, 103, 103, 115]
    assert layout.min_record_size(0, layout.MESSAGE_MAGIC_CODE_V2) == 92  # TOPICLEN is an i16
    v6 = layout.head_layout(layout.HOST_V6_FLAGS)
    assert v6.offset["STORETIMESTAMP"] == 68 and v6.offset["BODYLEN"] == 108
    for bits in HOSTS:  # the fields a reader needs to find the layout sit still
        head = layout.head_layout(bits)
        for name in ("TOTALSIZE", "MAGICCODE", "SYSFLAG", "PHYSICALOFFSET", "BORNTIMESTAMP"):
            assert head.offset[name] == v4.offset[name]
    assert (rec.MESSAGE_MAGIC_CODE, rec.MESSAGE_MAGIC_CODE_V2) == (0xDAA320A7, 0xDAA320AB)
    assert rec.BLANK_MAGIC_CODE == 0xCBD43194 and rec.END_FILE_MIN_BLANK_LENGTH == 8
    assert layout.MAX_TOPIC_BYTES == {0xDAA320A7: 127, 0xDAA320AB: 32767}
    assert layout.BATCH_ITEM_LAYOUT.size == 20


def test_derived_structs_and_dtypes_agree_with_the_declaration() -> None:
    buf = bytearray(512)
    size = rec.encode_record_into(buf, 0, **fields(0))
    whole = named(layout.HEAD_V4, buf)
    assert whole["TOTALSIZE"] == size and whole["MAGICCODE"] == rec.MESSAGE_MAGIC_CODE
    # positions exported by record
    for pos_name, field in (
        ("TOTAL_SIZE_POS", "TOTALSIZE"), ("MAGIC_POS", "MAGICCODE"), ("BODY_CRC_POS", "BODYCRC"),
        ("QUEUE_ID_POS", "QUEUEID"), ("FLAG_POS", "FLAG"), ("QUEUE_OFFSET_POS", "QUEUEOFFSET"),
        ("PHYSICAL_OFFSET_POS", "PHYSICALOFFSET"), ("SYS_FLAG_POS", "SYSFLAG"),
        ("BORN_TIMESTAMP_POS", "BORNTIMESTAMP"), ("STORE_TIMESTAMP_POS", "STORETIMESTAMP"),
        ("RECONSUME_TIMES_POS", "RECONSUMETIMES"), ("BODY_LEN_POS", "BODYLEN"),
        ("PREPARED_TRANSACTION_OFFSET_POS", "PREPAREDTRANSACTIONOFFSET"),
    ):  # fmt: skip
        assert getattr(rec, pos_name) == layout.HEAD_V4.offset[field], pos_name
    # partial structs: the pull-serving check, recovery's queue check, the client's pull head
    serve = get_message._SERVE_HEAD.unpack_from(buf, 0)
    assert serve == tuple(
        whole[k]
        for k in (
            "TOTALSIZE", "MAGICCODE", "BODYCRC", "QUEUEID", "QUEUEOFFSET", "PHYSICALOFFSET",
            "SYSFLAG", "BODYLEN",
        )
    )  # fmt: skip
    assert QueueEndCheck._FIELDS.unpack_from(buf, 0) == tuple(
        whole[k] for k in ("MAGICCODE", "QUEUEID", "QUEUEOFFSET", "SYSFLAG", "BODYLEN")
    )
    pull = rec._PULL_HEAD.unpack_from(buf, 0)
    assert pull[9] == V4_BORN + struct.pack(">i", 50001)
    assert pull[11] == V4_STORE + struct.pack(">i", 10911)
    assert rec._PULL_HEAD.size == rec.RECORD_HEAD.size
    # the numpy dtype of the column decoders: same offsets, same values
    dtype = record_columns.head_dtype()
    assert dtype.itemsize == layout.HEAD_V4.size
    for field, column in record_columns._HEAD_FIELDS.items():
        assert dtype.fields[column][1] == layout.HEAD_V4.offset[field]
    row = np.frombuffer(bytes(buf[: dtype.itemsize]), dtype=dtype)[0]
    for field, column in record_columns._HEAD_FIELDS.items():
        assert int(row[column]) == whole[field], field
    # the batch writer's head structs, per layout: packing the declared fields gives the head
    for bits in HOSTS:
        b = bytearray(512)
        rec.encode_record_into(b, 0, **fields(bits))
        head = layout.head_layout(bits)
        w = named(head, b)
        constant = cl._HEAD_CONSTANT[bits].pack(
            *(w[s.name] for s in head.slots[head.slots.index(_slot(head, "SYSFLAG")) : -1])
        )
        full = cl._HEAD_FULL[bits].pack(
            w["TOTALSIZE"], w["MAGICCODE"], w["BODYCRC"], w["QUEUEID"], w["FLAG"],
            w["QUEUEOFFSET"], w["PHYSICALOFFSET"], constant, w["BODYLEN"],
        )  # fmt: skip
        assert full == bytes(b[: head.size]), bits


def _slot(head: layout.Layout, name: str) -> layout.Slot:
    return next(s for s in head.slots if s.name == name)


def test_layout_errors_name_the_field() -> None:
    with pytest.raises(KeyError, match="NOPE"):
        layout.HEAD_V4.format(keep=None, raw=(("NOPE", "BODYLEN"),))
    with pytest.raises(KeyError, match="NOPE"):
        layout.HEAD_V4.numpy_dtype({"NOPE": "x"})


def encoded(bits: int, magic: int = rec.MESSAGE_MAGIC_CODE, count: int = 3) -> bytes:
    """``count`` records of one layout back to back, each naming its own position."""
    out = bytearray()
    for i in range(count):
        f = fields(bits, i, physical_offset=len(out))
        one = rec.encode_record(magic=magic, **f)
        out += one
    return bytes(out)


LAYOUTS = [(bits, rec.MESSAGE_MAGIC_CODE) for bits in HOSTS] + [
    (0, rec.MESSAGE_MAGIC_CODE_V2),
    (layout.HOST_V6_FLAGS, rec.MESSAGE_MAGIC_CODE_V2),
]


@pytest.mark.parametrize(("bits", "magic"), LAYOUTS)
def test_every_reader_reads_every_layout(bits: int, magic: int) -> None:
    data = encoded(bits, magic)
    view = memoryview(data)
    born_ip, store_ip = HOSTS[bits]
    born = ("10.1.2.3" if len(born_ip) == 4 else "2001:db8::17", 50001)
    store = ("127.0.0.1" if len(store_ip) == 4 else "::1", 10911)
    sys_flag = MessageSysFlag.MULTI_TAGS_FLAG | bits
    positions = [p for p, _ in rec.iter_records(data)]
    assert len(positions) == 3
    sizes = [rec.record_size(len(b"body-%d" % i), 6, len(fields(bits, i)["properties"]), bits, magic) for i in range(3)]  # fmt: skip
    assert [s for _, s in rec.iter_records(data)] == sizes
    for i, pos in enumerate(positions):
        size = sizes[i]
        check = rec.check_record(data, pos, len(data))
        r = check.record
        assert check.kind is rec.RecordKind.MESSAGE and r is not None, check.reason
        assert (r.size, r.sys_flag, r.queue_offset, r.physical_offset) == (
            size,
            sys_flag,
            40 + i,
            pos,
        )
        assert (r.born_host, r.store_host, r.topic) == (born, store, "TopicA")
        assert bytes(data[r.body_pos : r.body_pos + r.body_len]) == b"body-%d" % i
        assert rec.validate_record(view, pos, len(data), True) == (
            rec.RecordKind.MESSAGE, size, pos, 1_700_000_000_500 + i,
        )  # fmt: skip
        kind, psize, dfields = rec.parse_for_dispatch(view, pos, len(data))
        assert kind is rec.RecordKind.MESSAGE and psize == size and dfields is not None
        assert dfields[:7] == (size, 3, 40 + i, pos, sys_flag, 1_700_000_000_500 + i, 99)
        assert rec.read_store_timestamp(data, pos) == 1_700_000_000_500 + i
        assert rec.read_physical_offset(data, pos) == pos
        tpos, tlen = rec.topic_span(data, pos)
        assert data[tpos : tpos + tlen] == b"TopicA"
        ext = rec.decode_message_ext(data, pos, pos + size, check_crc=True)
        assert (ext.born_host, ext.store_host, ext.body) == (born, store, b"body-%d" % i)
        assert ext.properties["KEYS"] == f"k{i}" and ext.reconsume_times == 2
        one = bytes(data[pos : pos + size])
        assert get_message._intact(memoryview(one), size, pos, b"TopicA", 3, 40 + i)
        assert not get_message._intact(memoryview(one), size, pos, b"TopicB", 3, 40 + i)
        assert not get_message._intact(memoryview(one), size, pos + 1, b"TopicA", 3, 40 + i)
        qc = QueueEndCheck({(b"TopicA", 3): 41})
        qc.see(view, pos, pos)
        assert (qc.rebuild_from >= 0) == (40 + i >= 41)
        if i:
            assert rec.find_next_valid(data, positions[i - 1] + 1, len(data), 0) == pos
    # the client's pull decoder (fast path or not) and the reput parsers
    decoded = rec.decode_messages(data)
    assert [(m.born_host, m.store_host, m.queue_offset) for m in decoded] == [
        (born, store, 40 + i) for i in range(3)
    ]
    requests, end, stop = parse_round(view, 0, len(data), -1, DELAYS)
    assert end == len(data) and stop is None
    assert [(q.commit_log_offset, q.msg_size, q.keys, q.sys_flag) for q in requests] == [
        (positions[i], sizes[i], [f"k{i}"], sys_flag) for i in range(3)
    ]
    _parts, n, end, stop = parse_parts(view, 0, len(data), -1, DELAYS)
    assert (n, end, stop) == (3, len(data), None)
    # the column decoder, deferring to check_record where it stops (as the Spark source does)
    assert (
        column_scan(data)
        == record_columns.records_batch(
            [rec.check_record(data, p, len(data)).record for p in positions]  # type: ignore[misc]
        ).to_pylist()
    )


def column_scan(data: bytes, max_rows: int = 64) -> list[dict[str, Any]]:
    """Rows of the column decoder, deferring to check_record where it stops (as the Spark data
    source does)."""
    pytest.importorskip("pyarrow")  # the spark extra; a failure under FERRYMQ_REQUIRE_ALL
    rows: list[dict[str, Any]] = []
    pos = 0
    while pos < len(data):
        batch, after = record_columns.decode_columns(
            data, pos, len(data), len(data), max_rows=max_rows
        )
        if batch.num_rows:
            rows.extend(batch.to_pylist())
            pos = after
            continue
        res = rec.check_record(data, pos, len(data))
        assert res.kind is rec.RecordKind.MESSAGE and res.record is not None, res.reason
        rows.extend(record_columns.records_batch([res.record]).to_pylist())
        pos += res.size
    return rows


def test_v6_records_in_a_v4_run_end_the_fast_paths_and_are_still_read() -> None:
    """Mixed data: long IPv4 runs (columnar) around IPv6 records (the general parsers)."""
    out = bytearray()
    expect: list[tuple[int, int]] = []
    for i in range(90):
        bits = layout.HOST_V6_FLAGS if i in (30, 31, 60) else 0
        one = rec.encode_record(**fields(bits, i, physical_offset=len(out)))
        expect.append((len(out), bits))
        out += one
    data = bytes(out)
    view = memoryview(data)
    parts, n, end, stop = parse_parts(view, 0, len(data), -1, DELAYS)
    assert (n, end, stop) == (90, len(data), None)
    scalar, end2, stop2 = parse_round(view, 0, len(data), -1, DELAYS)
    flat = [r for part in parts for r in (part if isinstance(part, list) else _requests(part))]
    assert (end2, stop2) == (len(data), None)
    assert [(r.commit_log_offset, r.sys_flag & layout.HOST_V6_FLAGS) for r in flat] == expect
    assert [(r.commit_log_offset, r.msg_size, r.tags_code) for r in flat] == [
        (r.commit_log_offset, r.msg_size, r.tags_code) for r in scalar
    ]
    assert column_scan(data) == column_scan(data, max_rows=7)
    assert [row["physicalOffset"] for row in column_scan(data)] == [p for p, _ in expect]
    decoded = rec.decode_messages(data)
    assert [m.commit_log_offset for m in decoded] == [p for p, _ in expect]
    assert decoded[30].born_host == ("2001:db8::17", 50001) and decoded[30].store_host[0] == "::1"


def _requests(part: Any) -> list[Any]:
    from ferrymq.store.dispatch import requests_of

    return requests_of(part)


def test_a_v6_flag_on_v4_bytes_is_invalid_not_misread() -> None:
    data = bytearray(encoded(0, count=1))
    data[rec.SYS_FLAG_POS + 3] |= MessageSysFlag.BORNHOST_V6_FLAG  # claims a 16-byte born host
    assert rec.check_record(data, 0, len(data)).kind is rec.RecordKind.INVALID
    assert rec.validate_record(memoryview(data), 0, len(data), False)[0] is rec.RecordKind.INVALID
    assert rec.parse_for_dispatch(memoryview(data), 0, len(data))[0] is rec.RecordKind.INVALID


# --- the CommitLog writers write the declared layout -----------------------------------------


def _log(tmp_path: Path, store_host: str) -> cl.CommitLog:
    return cl.CommitLog(tmp_path / "commitlog", 64 * 1024, (store_host, 10911), 32 * 1024)


def _inner(born: str, sys_flag: int = 0, i: int = 0) -> MessageInner:
    return MessageInner.create(
        "TopicA", 3, b"body-%d" % i, {"KEYS": f"k{i}"}, born_timestamp=5, born_host=(born, 50001),
        sys_flag=sys_flag,
    )  # fmt: skip


def _rewritten(data: bytes, pos: int) -> tuple[bytes, rec.DecodedRecord]:
    """The record at ``pos`` re-encoded from what check_record read (byte-for-byte check)."""
    check = rec.check_record(data, pos, len(data))
    r = check.record
    assert check.kind is rec.RecordKind.MESSAGE and r is not None, check.reason
    again = rec.encode_record(
        queue_id=r.queue_id, flag=r.flag, queue_offset=r.queue_offset,
        physical_offset=r.physical_offset, sys_flag=r.sys_flag, born_timestamp=r.born_timestamp,
        born_ip=r.born_ip, born_port=r.born_port, store_timestamp=r.store_timestamp,
        store_ip=r.store_ip, store_port=r.store_port, reconsume_times=r.reconsume_times,
        prepared_transaction_offset=r.prepared_transaction_offset,
        body=bytes(data[r.body_pos : r.body_pos + r.body_len]), topic=r.topic.encode(),
        properties=encode_properties(r.properties).encode(),
    )  # fmt: skip
    return again, r


@pytest.mark.parametrize("store_host", ["127.0.0.1", "::1"])
@pytest.mark.parametrize("born", ["10.1.2.3", "2001:db8::17"])
def test_commit_log_writers_write_the_declared_layout(
    tmp_path: Path, store_host: str, born: str
) -> None:
    log = _log(tmp_path, store_host)
    log.mapped_file_queue.load()
    want_bits = layout.host_flags(len(pack_host(born)), len(pack_host(store_host)))
    try:
        # a client's claim about the host bits is overridden by the addresses written
        results = [
            log.put_message(_inner(born, sys_flag=layout.HOST_V6_FLAGS ^ want_bits, i=i), now_ms=9)
            for i in range(3)
        ]
        items = [
            Message("TopicA", b"x" * 10, properties={"UNIQ_KEY": f"U{i:031d}"}) for i in range(30)
        ]
        batch = _inner(born)
        uniform = log.put_batch_body(batch, encode_batch(items), now_ms=9)
        mixed_items = [
            Message("TopicA", b"y" * (i + 1), properties={"KEYS": f"m{i}"}) for i in range(5)
        ]
        mixed = log.put_batch_body(batch, encode_batch(mixed_items), now_ms=9)
        objects = log.put_messages(batch, mixed_items, now_ms=9)
        mf = log.mapped_file_queue.get_last_mapped_file()
        assert mf is not None
        data = bytes(mf.buffer[: mf.wrote_position])
        offsets = [r.wrote_offset for r in results] + [
            o for r in (uniform, mixed, objects) for o in r.record_offsets
        ]
        assert len(offsets) == 3 + 30 + 5 + 5
        for offset in offsets:
            again, r = _rewritten(data, offset)
            assert data[offset : offset + r.size] == again
            assert r.sys_flag & layout.HOST_V6_FLAGS == want_bits
            assert r.born_host == (born, 50001) and r.store_host == (store_host, 10911)
            assert r.size == rec.record_size(r.body_len, 6, len(encode_properties(r.properties)), want_bits)  # fmt: skip
        assert log.pickup_store_timestamp(offsets[0], results[0].wrote_bytes) == 9
        # msgId: store address (4 or 16 bytes) + port + offset, as upstream
        assert len(results[0].msg_id) == (32 if ":" not in store_host else 56)
    finally:
        log.mapped_file_queue.shutdown()


def test_store_timestamp_of_a_short_read_is_found_for_every_layout() -> None:
    for bits in HOSTS:
        data = encoded(bits, count=1)
        assert rec.read_store_timestamp(data[: rec.STORE_TIMESTAMP_END_MAX], 0) == 1_700_000_000_500
    assert time.time() > 0
