"""CommitLog batch appends (SEND_BATCH_MESSAGE bodies) on real files: the uniform-shape path and
the general path both write exactly the records :func:`record.encode_record_into` defines, keep
queue offsets, roll whole batches to the next file, and refuse malformed bodies untouched."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from ferrymq.message import (
    Message,
    MessageInner,
    MessageSysFlag,
    encode_batch,
    encode_properties,
    pack_host,
)
from ferrymq.store import record as rec
from ferrymq.store.commit_log import AppendError, CommitLog
from hypothesis import given, settings
from hypothesis import strategies as st

HOST = ("127.0.0.1", 10911)
BORN = ("10.1.2.3", 40000)
NOW = 1_700_000_000_123


def _log(path: Path, file_size: int = 1 << 20, max_size: int = 1 << 19) -> CommitLog:
    return CommitLog(path, file_size, HOST, max_size)


def _batch(topic: str, queue_id: int, items: list[Message], sys_flag: int = 0) -> MessageInner:
    return MessageInner(
        topic=topic,
        queue_id=queue_id,
        body=encode_batch(items),
        sys_flag=sys_flag,
        born_timestamp=NOW - 5,
        born_host=BORN,
        reconsume_times=2,
        prepared_transaction_offset=0,
    )


def _expected(
    batch: MessageInner, items: list[Message], first_offset: int, queue_offset: int | None
) -> tuple[bytes, list[int]]:
    """The records the reference encoder writes for ``items`` from ``first_offset``."""
    out = bytearray()
    offsets = []
    topic = batch.topic.encode()
    for i, item in enumerate(items):
        props = encode_properties(item.properties).encode()
        size = rec.record_size(len(item.body), len(topic), len(props))
        buf = bytearray(size)
        offset = first_offset + len(out)
        rec.encode_record_into(
            buf,
            0,
            queue_id=batch.queue_id,
            flag=item.flag,
            queue_offset=0 if queue_offset is None else queue_offset + i,
            physical_offset=offset,
            sys_flag=batch.sys_flag,
            born_timestamp=batch.born_timestamp,
            born_ip=pack_host(BORN[0]),
            born_port=BORN[1],
            store_timestamp=NOW,
            store_ip=pack_host(HOST[0]),
            store_port=HOST[1],
            reconsume_times=batch.reconsume_times,
            prepared_transaction_offset=batch.prepared_transaction_offset,
            body=item.body,
            topic=topic,
            properties=props,
        )
        out += buf
        offsets.append(offset)
    return bytes(out), offsets


def _written(log: CommitLog, offset: int, size: int) -> bytes:
    sel = log.get_message(offset, size)
    assert sel is not None
    try:
        return bytes(sel.buffer)
    finally:
        sel.release()


def _uniform_items(count: int, body_len: int = 900) -> list[Message]:
    # Same lengths everywhere (fixed-width UNIQ_KEY), different bytes and flags.
    return [
        Message(
            "T",
            bytes([i % 251]) * body_len,
            flag=i * 7,
            properties={"UNIQ_KEY": f"7F000001{i:024X}", "WAIT": "true", "TAGS": "TagA"},
        )
        for i in range(count)
    ]


def test_uniform_batch_writes_reference_records(tmp_path: Path) -> None:
    log = _log(tmp_path)
    try:
        first = log.put_message(
            MessageInner.create("T", 3, b"lead", {"K": "v"}, born_host=BORN), now_ms=NOW
        )
        items = _uniform_items(32)
        batch = _batch("T", 3, items)
        res = log.put_batch_body(batch, batch.body, now_ms=NOW)
        assert res.msg_num == 32 and res.queue_offset == 1
        assert len(log._uniform_plans) == 1  # the one-struct path was taken
        expected, offsets = _expected(batch, items, first.end_offset, 1)
        assert res.wrote_offset == first.end_offset and res.wrote_bytes == len(expected)
        assert res.record_offsets == offsets
        assert _written(log, res.wrote_offset, res.wrote_bytes) == expected
        assert log.topic_queue_table["T-3"] == 33
        # The next batch continues both offsets (the compiled shape is reused).
        res2 = log.put_batch_body(batch, batch.body, now_ms=NOW)
        expected2, _ = _expected(batch, items, res.end_offset, 33)
        assert _written(log, res2.wrote_offset, res2.wrote_bytes) == expected2
        assert log.topic_queue_table["T-3"] == 65
        for offset in res2.record_offsets:
            decoded = rec.decode_message_ext(_written(log, offset, res2.wrote_bytes // 32))
            assert decoded.commit_log_offset == offset and decoded.store_timestamp == NOW
    finally:
        log.mapped_file_queue.shutdown()


def test_prepared_transaction_batch_takes_no_queue_offset(tmp_path: Path) -> None:
    log = _log(tmp_path)
    try:
        items = _uniform_items(4, 10)
        batch = _batch("T", 0, items, sys_flag=MessageSysFlag.TRANSACTION_PREPARED_TYPE)
        res = log.put_batch_body(batch, batch.body, now_ms=NOW)
        expected, _ = _expected(batch, items, 0, None)
        assert _written(log, 0, res.wrote_bytes) == expected
        assert res.queue_offset == 0 and "T-0" not in log.topic_queue_table
    finally:
        log.mapped_file_queue.shutdown()


def test_uniform_batch_rolls_whole_to_next_file(tmp_path: Path) -> None:
    log = _log(tmp_path, file_size=64 * 1024, max_size=32 * 1024)
    try:
        items = _uniform_items(25)  # 26,350 bytes encoded: two fit in a 64 KiB file
        batch = _batch("T", 0, items)
        first = log.put_batch_body(batch, batch.body, now_ms=NOW)
        second = log.put_batch_body(batch, batch.body, now_ms=NOW)
        third = log.put_batch_body(batch, batch.body, now_ms=NOW)  # does not fit in file 0
        assert second.wrote_offset == first.end_offset
        assert third.wrote_offset == 64 * 1024
        expected, _ = _expected(batch, items, 64 * 1024, 50)
        assert _written(log, third.wrote_offset, third.wrote_bytes) == expected
        blank = _written(log, second.end_offset, 8)
        assert rec.BLANK_HEAD.unpack(blank) == (64 * 1024 - second.end_offset, rec.BLANK_MAGIC_CODE)
    finally:
        log.mapped_file_queue.shutdown()


def test_mixed_batch_takes_general_path_with_same_format(tmp_path: Path) -> None:
    log = _log(tmp_path)
    try:
        # Equal item sizes but different body/properties splits: must not be taken as uniform.
        items = [
            Message("T", b"a" * 10, properties={"K": "12345"}),
            Message("T", b"a" * 12, properties={"K": "123"}),
            Message("T", b"", properties={}),
            Message("T", b"xyz" * 100, flag=9, properties={"TAGS": "t", "KEYS": "k1 k2"}),
        ]
        batch = _batch("Topic-2", 1, items)
        res = log.put_batch_body(batch, batch.body, now_ms=NOW)
        expected, offsets = _expected(batch, items, 0, 0)
        assert _written(log, 0, res.wrote_bytes) == expected and res.record_offsets == offsets
    finally:
        log.mapped_file_queue.shutdown()


@pytest.mark.parametrize(
    "corrupt",
    [
        # (item index, byte offset within the item, new 4-byte value) on a uniform body
        (31, 0, 99),  # TOTALSIZE of the last item
        (5, 16, 899),  # BODYLEN of an item
        (7, 20 + 900, 0),  # PROPERTIESLEN (+ 2 body bytes): lengths no longer add up
    ],
)
def test_corrupt_uniform_body_is_refused_untouched(
    tmp_path: Path, corrupt: tuple[int, int, int]
) -> None:
    log = _log(tmp_path)
    try:
        items = _uniform_items(32)
        batch = _batch("T", 0, items)
        item_size = len(batch.body) // 32
        body = bytearray(batch.body)
        index, at, value = corrupt
        struct.pack_into(">i", body, index * item_size + at, value)
        with pytest.raises(AppendError) as err:
            log.put_batch_body(batch, bytes(body), now_ms=NOW)
        assert "malformed" in err.value.reason or "truncated" in err.value.reason
        assert log.max_offset == 0 and "T-0" not in log.topic_queue_table
        # A clean batch afterwards starts at offset 0.
        assert log.put_batch_body(batch, batch.body, now_ms=NOW).wrote_offset == 0
    finally:
        log.mapped_file_queue.shutdown()


def test_uniform_batch_over_max_size_is_refused(tmp_path: Path) -> None:
    log = _log(tmp_path, max_size=8 * 1024)
    try:
        batch = _batch("T", 0, _uniform_items(16))
        with pytest.raises(AppendError) as err:
            log.put_batch_body(batch, batch.body, now_ms=NOW)
        assert "encoded; max" in err.value.reason and log.max_offset == 0
    finally:
        log.mapped_file_queue.shutdown()


_item = st.builds(
    lambda body, flag, props: Message("T", body, flag=flag, properties=props),
    st.binary(max_size=300),
    st.integers(-(2**31), 2**31 - 1),
    st.dictionaries(st.text("abcXYZ_", min_size=1, max_size=8), st.text(max_size=20), max_size=3),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(_item, min_size=1, max_size=40), st.booleans(), st.integers(0, 7))
def test_any_batch_matches_reference(
    tmp_path_factory: pytest.TempPathFactory, items: list[Message], same: bool, queue_id: int
) -> None:
    if same:  # make it uniform: the first item's shape repeated with other bytes
        items = [
            Message("T", bytes(len(items[0].body)), flag=i, properties=items[0].properties)
            for i in range(len(items))
        ]
    log = _log(tmp_path_factory.mktemp("cl"))
    try:
        batch = _batch("Tp", queue_id, items)
        res = log.put_batch_body(batch, batch.body, now_ms=NOW)
        expected, offsets = _expected(batch, items, 0, 0)
        assert _written(log, 0, res.wrote_bytes) == expected
        assert res.record_offsets == offsets and res.msg_num == len(items)
    finally:
        log.mapped_file_queue.shutdown()


def test_uniform_plan_cache_is_bounded(tmp_path: Path) -> None:
    log = _log(tmp_path, file_size=8 << 20, max_size=4 << 20)
    try:
        offset = 0
        queue_offset = 0
        # 40 shapes of 300 items (12,000 items of plans if all were kept).
        for body_len in range(40):
            items = [
                Message("T", bytes([k % 7]) * body_len, properties={"K": "v"}) for k in range(300)
            ]
            batch = _batch("T", 0, items)
            res = log.put_batch_body(batch, batch.body, now_ms=NOW)
            expected, _ = _expected(batch, items, offset, queue_offset)
            assert _written(log, res.wrote_offset, res.wrote_bytes) == expected
            offset, queue_offset = res.end_offset, queue_offset + 300
            plans = log._uniform_plans
            assert len(plans) <= 32 and sum(key[0] for key in plans) <= 8192
            assert (300, body_len, len(b"K\x01v\x02"), b"\x01T", 0) in plans  # the newest is kept
    finally:
        log.mapped_file_queue.shutdown()
