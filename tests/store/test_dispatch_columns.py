"""The reput's columnar path reads exactly what the scalar round parser reads, and its
dispatchers write the same ConsumeQueue and index bytes."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
from ferrymq.message import MessageConst, MessageSysFlag
from ferrymq.store import record as rec
from ferrymq.store.consume_queue_store import ConsumeQueueStore
from ferrymq.store.dispatch import (
    BuildConsumeQueue,
    BuildIndex,
    DispatchColumns,
    DispatchRequest,
    RoundPart,
    RoundRecords,
    parse_parts,
    parse_round,
    requests_of,
)
from ferrymq.store.dispatch_columns import MAX_TAIL, MIN_ROWS
from ferrymq.store.index_service import IndexService, index_key_hashes, prefixed_key_hashes
from hypothesis import given, settings
from hypothesis import strategies as st

from .test_dispatch_round import reference

DELAYS = [1000, 5000, 10000]
UNIQ = MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX
TAGS = MessageConst.PROPERTY_TAGS
KEYS = MessageConst.PROPERTY_KEYS


def encode(records: list[dict[str, object]], start: int = 0) -> bytearray:
    """CommitLog bytes of the records (dicts of ``encode_record_into`` fields, partly given)."""
    buf = bytearray(
        sum(
            rec.MIN_RECORD_SIZE + len(r["body"]) + len(r["topic"]) + len(r["properties"])  # type: ignore[arg-type]
            for r in records
        )
    )
    pos = 0
    for i, r in enumerate(records):
        fields: dict[str, object] = {
            "queue_id": 1,
            "flag": 0,
            "queue_offset": i,
            "physical_offset": start + pos,
            "sys_flag": 0,
            "born_timestamp": 1_700_000_000_000 + i,
            "born_ip": b"\x7f\x00\x00\x01",
            "born_port": 5000,
            "store_timestamp": 1_700_000_000_500 + i,
            "store_ip": b"\x7f\x00\x00\x01",
            "store_port": 10911,
            "reconsume_times": 0,
            "prepared_transaction_offset": 0,
        }
        fields.update(r)
        pos += rec.encode_record_into(buf, pos, **fields)  # type: ignore[arg-type]
    return buf[:pos]


def props_text(items: list[tuple[str, str]]) -> bytes:
    return "".join(f"{k}\x01{v}\x02" for k, v in items).encode()


def flatten(parts: list[RoundPart]) -> list[DispatchRequest]:
    out: list[DispatchRequest] = []
    for part in parts:
        out.extend(requests_of(part) if isinstance(part, DispatchColumns) else part)
    return out


def same_as_scalar(buf: bytes | bytearray, limit: int) -> list[RoundPart]:
    view = memoryview(bytes(buf))
    parts, count, pos, stop = parse_parts(view, 0, len(buf), limit, DELAYS)
    expected, expected_pos, expected_stop = reference(view, len(buf), limit)
    assert flatten(parts) == expected
    assert (count, pos, stop) == (len(expected), expected_pos, expected_stop)
    assert parse_round(view, 0, len(buf), limit, DELAYS) == (expected, expected_pos, expected_stop)
    return parts


def uniform(n: int, *, tags: str | None = "TagA", body: int = 1024) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for i in range(n):
        items = [(UNIQ, f"7F000001{i:024X}"), ("WAIT", "true")]
        if tags is not None:
            items.insert(0, (TAGS, tags))
        out.append(
            {"body": bytes([i % 251]) * body, "topic": b"BenchT", "properties": props_text(items)}
        )
    return out


def test_a_uniform_run_is_one_columnar_part() -> None:
    parts = same_as_scalar(encode(uniform(64)), -1)
    assert len(parts) == 1 and isinstance(parts[0], DispatchColumns)
    assert len(parts[0]) == 64


def test_long_properties_stay_columnar() -> None:
    """A PROPERTIESLEN of 128 to 255 has a byte >= 0x80: it is a length, not text."""
    records = uniform(40)
    for r in records:
        r["properties"] = bytes(r["properties"]) + props_text([("LONG", "v" * 100)])  # type: ignore[arg-type]
    parts = same_as_scalar(encode(records), -1)
    assert [type(p) for p in parts] == [DispatchColumns]


def test_long_tails_stay_on_the_scalar_path() -> None:
    records = uniform(40)
    for r in records:
        r["properties"] = bytes(r["properties"]) + props_text([("LONG", "v" * MAX_TAIL)])  # type: ignore[arg-type]
    assert not any(isinstance(p, DispatchColumns) for p in same_as_scalar(encode(records), -1))


def test_runs_of_different_body_sizes_are_walked() -> None:
    records = uniform(40)
    for i, r in enumerate(records):
        r["body"] = b"x" * (100 + 37 * i)
    parts = same_as_scalar(encode(records), -1)
    assert [type(p) for p in parts] == [DispatchColumns]


def test_limits_and_short_runs_fall_back_to_the_scalar_parser() -> None:
    buf = encode(uniform(50))
    for limit in (1, 7, MIN_ROWS - 1):
        assert not any(isinstance(p, DispatchColumns) for p in same_as_scalar(buf, limit))
    for limit in (MIN_ROWS, MIN_ROWS + 1, 49, 50, 51):
        parts = same_as_scalar(buf, limit)
        assert isinstance(parts[0], DispatchColumns)


def test_a_different_row_ends_the_run_and_the_scalar_parser_reads_on() -> None:
    records = uniform(60)
    records[30]["properties"] = props_text([(TAGS, "TagB"), ("WAIT", "true"), (UNIQ, "X" * 32)])
    parts = same_as_scalar(encode(records), -1)
    assert isinstance(parts[0], DispatchColumns) and len(parts[0]) == 30
    # KEYS and the delay topic are left to the scalar parser
    keyed = [
        {**r, "properties": props_text([(KEYS, "k1 k2"), (UNIQ, f"{i:032d}")])}
        for i, r in enumerate(uniform(40))
    ]
    assert not any(isinstance(p, DispatchColumns) for p in same_as_scalar(encode(keyed), -1))
    delayed = [{**r, "topic": b"SCHEDULE_TOPIC_XXXX"} for r in uniform(40)]
    assert not any(isinstance(p, DispatchColumns) for p in same_as_scalar(encode(delayed), -1))


# Per-row changes that must end a columnar run exactly where the scalar parser would differ.
MUTATIONS = (
    "none",
    "sep_in_value",
    "value_sep2",
    "non_ascii_value",
    "name_changed",
    "value_longer",
    "topic_changed",
    "v6",
    "prepared",
    "rollback",
    "queue",
    "body_len",
    "total_size",
    "props_len",
    "topic_len",
    "empty_tags",
    "raw_high_byte",
)


def mutated(row: int, mutation: str) -> bytes:
    """A uniform run of 40 whose row ``row`` is changed in one way."""
    records = uniform(40)
    r = records[row]
    items = [(TAGS, "TagA"), (UNIQ, f"7F000001{row:024X}"), ("WAIT", "true")]
    value = {
        "sep_in_value": "TagA\x01",
        "value_sep2": "Ta\x02A",
        "non_ascii_value": "Tagé",
        "raw_high_byte": "Tag\udcff",
        "value_longer": "TagAA",
        "empty_tags": "",
    }.get(mutation)
    if value is not None:
        items[0] = (TAGS, value)
    if mutation == "name_changed":
        items[0] = ("TAGZ", "TagA")
    r["properties"] = "".join(f"{k}\x01{v}\x02" for k, v in items).encode(
        "utf-8", "surrogateescape"
    )
    if mutation == "topic_changed":
        r["topic"] = b"BenchQ"
    if mutation == "topic_high_byte":
        r["topic"] = b"Bench\xff"
    flags = {
        "v6": MessageSysFlag.STOREHOSTADDRESS_V6_FLAG,
        "prepared": MessageSysFlag.TRANSACTION_PREPARED_TYPE,
        "rollback": MessageSysFlag.TRANSACTION_ROLLBACK_TYPE,
    }
    if mutation in flags:
        r["sys_flag"] = flags[mutation]
    if mutation == "queue":
        r["queue_id"] = 2
    return bytes(encode(records))


@pytest.mark.parametrize("row", [0, 1, 17, 30, 39])
@pytest.mark.parametrize("mutation", [*MUTATIONS, "topic_high_byte"])
def test_each_kind_of_different_row(row: int, mutation: str) -> None:
    data = mutated(row, mutation)
    for limit in (-1, 20):
        same_as_scalar(data, limit)
        same_as_scalar(data[: len(data) - 100], limit)


@st.composite
def round_records(draw: st.DrawFn) -> tuple[list[dict[str, object]], bytes]:
    n = draw(st.one_of(st.integers(MIN_ROWS, 60), st.integers(0, 60)))
    names = draw(
        st.lists(st.sampled_from([UNIQ, TAGS, KEYS, "a", "XTAGS", "WAIT", "DELAY"]), max_size=5)
    )
    lengths = [draw(st.integers(0, 12)) for _ in names]
    topic = draw(st.sampled_from([b"T", b"TopicB", b"SCHEDULE_TOPIC_XXXX"]))
    fixed_body = draw(st.booleans())
    trailing = draw(st.booleans())
    rng = random.Random(draw(st.integers(0, 2**32)))
    records: list[dict[str, object]] = []
    for i in range(n):
        mutation = "none" if rng.random() < 0.9 else rng.choice(MUTATIONS)
        values = ["".join(rng.choice("abAB01") for _ in range(k)) for k in lengths]
        items = list(zip(names, values, strict=True))
        r: dict[str, object] = {
            "body": b"b" * (64 if fixed_body else rng.randint(0, 200)),
            "topic": topic,
            "queue_offset": i,
        }
        if items and mutation in ("sep_in_value", "value_sep2", "non_ascii_value"):
            k, v = items[0]
            ch = {"sep_in_value": "\x01", "value_sep2": "\x02", "non_ascii_value": "é"}[mutation]
            items[0] = (k, v[:-1] + ch if v else ch)
        if items and mutation == "name_changed":
            items[0] = (items[0][0][:-1] + "Z", items[0][1])
        if items and mutation == "value_longer":
            items[0] = (items[0][0], items[0][1] + "x")
        if items and items[0][1] and mutation == "raw_high_byte":
            items[0] = (items[0][0], items[0][1][:-1] + "\udcff")  # encoded as one 0xFF byte
        if items and mutation == "empty_tags":
            items = [(k, "" if k == TAGS else v) for k, v in items]
        text = "".join(f"{k}\x01{v}\x02" for k, v in items)
        if not trailing:
            text = text[:-1]
        r["properties"] = text.encode("utf-8", "surrogateescape")
        if mutation == "topic_changed":
            r["topic"] = topic[:-1] + b"Q"
        if mutation == "v6":
            r["sys_flag"] = MessageSysFlag.BORNHOST_V6_FLAG
        if mutation == "prepared":
            r["sys_flag"] = MessageSysFlag.TRANSACTION_PREPARED_TYPE
        if mutation == "rollback":
            r["sys_flag"] = MessageSysFlag.TRANSACTION_ROLLBACK_TYPE
        if mutation == "queue":
            r["queue_id"] = 2
        records.append(r)
    data = bytearray(encode(records))
    # damage to a record's head or tail fields, as the scalar parser checks them
    pos = 0
    for r in records:
        size = int.from_bytes(data[pos : pos + 4], "big")
        body_len = len(r["body"])  # type: ignore[arg-type]
        tpos = pos + rec.BODY_POS + body_len
        kind = rng.random()
        if kind < 0.01:
            data[pos + rec.BODY_LEN_POS : pos + rec.BODY_POS] = (body_len + 1).to_bytes(4, "big")
        elif kind < 0.02:
            data[pos : pos + 4] = (size + rng.choice((-1, 1))).to_bytes(4, "big", signed=True)
        elif kind < 0.03:
            ppos = tpos + 1 + data[tpos]
            data[ppos : ppos + 2] = b"\xff\xff"
        elif kind < 0.04:
            data[tpos] = 0
        pos += size
    return records, bytes(data)


@settings(max_examples=300, deadline=None)
@given(round_records(), st.sampled_from([-1, 1, MIN_ROWS, MIN_ROWS + 7, 100]))
def test_columnar_parts_match_the_scalar_parser(
    case: tuple[list[dict[str, object]], bytes], limit: int
) -> None:
    _records, data = case
    same_as_scalar(data, limit)
    # a torn copy (the CommitLog's end while a record is written)
    if len(data) > 2:
        cut = len(data) * 2 // 3
        same_as_scalar(data[:cut], limit)


def test_round_records_leave_out_prepared_and_rolled_back() -> None:
    records = uniform(40)
    records[3]["sys_flag"] = MessageSysFlag.TRANSACTION_PREPARED_TYPE
    records[7]["sys_flag"] = MessageSysFlag.TRANSACTION_ROLLBACK_TYPE
    # same head fields otherwise, so the run stays one columnar part
    parts = same_as_scalar(encode(records), -1)
    assert [type(p) for p in parts] == [DispatchColumns]
    arrived = RoundRecords(parts)
    expected = [r for r in flatten(parts) if r.consume_queue_offset not in (3, 7)]
    assert len(arrived) == 38 and list(arrived) == expected and arrived[5] == expected[5]
    assert arrived.topics() == {"BenchT"}
    assert list(arrived.arrivals()) == [
        (r.topic, r.queue_id, r.consume_queue_offset, r.tags_code) for r in expected
    ]


@settings(max_examples=200, deadline=None)
@given(
    st.text(alphabet=st.characters(max_codepoint=127), min_size=1, max_size=20),
    st.lists(
        st.binary(min_size=5, max_size=5).map(lambda b: bytes(c & 0x7F for c in b)),
        min_size=1,
        max_size=30,
    ),
)
def test_prefixed_key_hashes_equal_the_string_hashes(prefix: str, rows: list[bytes]) -> None:
    values = np.frombuffer(b"".join(rows), dtype=np.uint8).reshape(len(rows), 5)
    texts = [prefix + r.decode("ascii") for r in rows]
    powers: dict[int, np.ndarray] = {}
    assert (
        prefixed_key_hashes(prefix, values, powers).tolist() == index_key_hashes(texts, {}).tolist()
    )


def dispatch_both(tmp_path: Path, data: bytes, start: int = 0) -> None:
    """Dispatch ``data`` columnar into one ConsumeQueue/index set and scalar into another;
    every file must come out byte for byte the same."""
    view = memoryview(data)
    parts, _n, _pos, _stop = parse_parts(view, 0, len(data), -1, DELAYS)
    assert any(isinstance(p, DispatchColumns) for p in parts)
    requests = reference(view, len(data), -1)[0]
    assert flatten(parts) == requests
    roots = []
    for name in ("columnar", "scalar"):
        root = tmp_path / name
        queues = BuildConsumeQueue(ConsumeQueueStore(root / "consumequeue", 64 * 20))
        index = BuildIndex(IndexService(root / "index", hash_slot_num=7, index_num=50))
        for part in parts if name == "columnar" else [requests]:
            for d in (queues, index):
                if isinstance(part, DispatchColumns):
                    d.dispatch_columns(part)
                else:
                    d.dispatch_many(part)
        queues.queues.shutdown()
        index.index.shutdown()
        roots.append(root)
    files = [sorted(p.relative_to(r) for p in r.rglob("*") if p.is_file()) for r in roots]
    assert files[0] == files[1] and files[0]
    for rel in files[0]:
        assert (roots[0] / rel).read_bytes() == (roots[1] / rel).read_bytes(), rel


def test_columnar_dispatch_writes_the_same_files(tmp_path: Path) -> None:
    records = uniform(150)
    for i, r in enumerate(records):
        r["queue_id"] = i // 40  # runs of one queue; CQ files roll every 64 units
        r["queue_offset"] = i % 40 + (5 if i // 40 == 2 else 0)
    records[12]["sys_flag"] = MessageSysFlag.TRANSACTION_ROLLBACK_TYPE
    records[13]["sys_flag"] = MessageSysFlag.TRANSACTION_PREPARED_TYPE
    records[90]["properties"] = props_text([(TAGS, "TagZ"), (UNIQ, "Q" * 32), ("WAIT", "true")])
    dispatch_both(tmp_path, bytes(encode(records)))


def test_interleaved_queues_write_the_same_files(tmp_path: Path) -> None:
    """Round-robin sends: each queue's units come every third record."""
    records = uniform(200)
    for i, r in enumerate(records):
        r["queue_id"] = (i * 7) % 3
        r["queue_offset"] = i // 3
    records[50]["sys_flag"] = MessageSysFlag.TRANSACTION_PREPARED_TYPE
    dispatch_both(tmp_path, bytes(encode(records)))
