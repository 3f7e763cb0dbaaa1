"""CommitLog single appends (SEND_MESSAGE) on real files: the bytes are exactly the reference
record of :func:`record.encode_record_into`, offsets and queue slots advance, files roll, and
invalid lengths are refused before anything is written."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from ferrymq.message import MessageInner, MessageSysFlag, pack_host
from ferrymq.store import record as rec
from ferrymq.store.commit_log import AppendError, CommitLog
from ferrymq.store.results import AppendMessageStatus
from hypothesis import given, settings
from hypothesis import strategies as st

HOST = ("127.0.0.1", 10911)
NOW = 1_700_000_000_321


def _reference(msg: MessageInner, offset: int, queue_offset: int) -> bytes:
    topic = msg.topic.encode()
    props = msg.properties_string.encode()
    buf = bytearray(rec.record_size(len(msg.body), len(topic), len(props)))
    rec.encode_record_into(
        buf,
        0,
        queue_id=msg.queue_id,
        flag=msg.flag,
        queue_offset=queue_offset,
        physical_offset=offset,
        sys_flag=msg.sys_flag,
        born_timestamp=msg.born_timestamp,
        born_ip=pack_host(msg.born_host[0]),
        born_port=msg.born_host[1],
        store_timestamp=NOW,
        store_ip=pack_host(HOST[0]),
        store_port=HOST[1],
        reconsume_times=msg.reconsume_times,
        prepared_transaction_offset=msg.prepared_transaction_offset,
        body=msg.body,
        topic=topic,
        properties=props,
    )
    return bytes(buf)


def _written(log: CommitLog, offset: int, size: int) -> bytes:
    sel = log.get_message(offset, size)
    assert sel is not None
    try:
        return bytes(sel.buffer)
    finally:
        sel.release()


_msg = st.builds(
    lambda topic, qid, body, props, flag, sys_flag, born: MessageInner.create(
        topic,
        qid,
        body,
        props,
        flag=flag,
        sys_flag=sys_flag,
        born_timestamp=born,
        born_host=("10.0.0.7", 5555),
        reconsume_times=3,
        prepared_transaction_offset=17,
    ),
    st.sampled_from(["T", "Topic_%", "ü-topic"]),
    st.integers(0, 15),
    st.binary(max_size=2000),
    st.dictionaries(st.text("abKEYS", min_size=1, max_size=6), st.text(max_size=30), max_size=4),
    st.integers(-(2**31), 2**31 - 1),
    st.sampled_from([0, 1, 4, 8, 12]),
    st.integers(0, 2**50),
)


@settings(max_examples=40, deadline=None)
@given(st.lists(_msg, min_size=1, max_size=30))
def test_records_match_reference_and_roll(
    tmp_path_factory: pytest.TempPathFactory, msgs: list[MessageInner]
) -> None:
    log = CommitLog(tmp_path_factory.mktemp("cl"), 8 * 1024, HOST, 4096)
    slots: dict[str, int] = {}
    try:
        for m in msgs:
            res = log.put_message(m, now_ms=NOW)
            key = f"{m.topic}-{m.queue_id}"
            takes = m.sys_flag in (0, 1, 8)
            expected_qo = slots.get(key, 0) if takes else 0
            assert res.queue_offset == expected_qo and res.record_offsets == [res.wrote_offset]
            if takes:
                slots[key] = expected_qo + 1
            # Never across a file boundary, always leaving the blank minimum.
            assert res.wrote_offset // 8192 == (res.end_offset + 7) // 8192
            assert _written(log, res.wrote_offset, res.wrote_bytes) == _reference(
                m, res.wrote_offset, expected_qo
            )
    finally:
        log.mapped_file_queue.shutdown()


@pytest.mark.parametrize(
    ("topic", "props", "body", "status", "words"),
    [
        ("", {}, b"x", AppendMessageStatus.MESSAGE_SIZE_EXCEEDED, "topic is empty"),
        ("t" * 128, {}, b"x", AppendMessageStatus.MESSAGE_SIZE_EXCEEDED, "topic is 128"),
        ("T", {"K": "v" * 33000}, b"x", AppendMessageStatus.PROPERTIES_SIZE_EXCEEDED, "32767"),
        ("T", {}, b"x" * 5000, AppendMessageStatus.MESSAGE_SIZE_EXCEEDED, "maxMessageSize"),
    ],
)
def test_invalid_lengths_refused_untouched(
    tmp_path: Path,
    topic: str,
    props: dict[str, str],
    body: bytes,
    status: AppendMessageStatus,
    words: str,
) -> None:
    log = CommitLog(tmp_path, 64 * 1024, HOST, 4096)
    try:
        for _ in range(2):  # the second time the topic may be cached: same verdict
            with pytest.raises(AppendError) as err:
                log.put_message(MessageInner.create(topic, 0, body, props), now_ms=NOW)
            assert err.value.status is status and words in err.value.reason
        assert log.max_offset == 0 and not log.topic_queue_table
        ok = log.put_message(
            MessageInner.create("T", 0, b"x", sys_flag=MessageSysFlag.TRANSACTION_COMMIT_TYPE)
        )
        assert ok.wrote_offset == 0 and ok.queue_offset == 0
    finally:
        log.mapped_file_queue.shutdown()


async def test_appends_prefetch_the_pages_ahead(tmp_path: Path) -> None:
    """On a running loop, appends keep the next chunk of the current file prefetched by a
    worker thread (never past the file's end), and the records are unchanged by it."""
    from ferrymq.store import commit_log as cl

    file_size = cl._WARM_CHUNK + cl._WARM_CHUNK // 2
    log = CommitLog(tmp_path, file_size, HOST, 64 * 1024)
    body = b"w" * 60_000
    try:
        first = log.put_message(MessageInner.create("T", 0, body, {}), NOW)
        # the chunk after the first record (what is written needs no prefetch)
        assert log._warming and log._warm_until == first.wrote_bytes + cl._WARM_CHUNK
        while log._warming:
            await asyncio.sleep(0.01)
        # writes past the low-water mark start the next (last, shorter) chunk
        while log.max_offset + cl._WARM_LOW <= log._warm_until:
            log.put_message(MessageInner.create("T", 0, body, {}), NOW)
        assert log._warm_until == file_size
        while log._warming:
            await asyncio.sleep(0.01)
        assert _written(log, first.wrote_offset, first.wrote_bytes)[-len(body) - 40 :].count(b"w")
    finally:
        log.mapped_file_queue.shutdown()


def test_prefetch_of_a_destroyed_file_does_nothing(tmp_path: Path) -> None:
    log = CommitLog(tmp_path, 64 * 1024, HOST, 4096)
    log.put_message(MessageInner.create("T", 0, b"x", {}), NOW)  # no loop: no prefetch
    assert log._warm_until == 0 and not log._warming
    mf = log.mapped_file_queue.get_last_mapped_file()
    assert mf is not None
    assert mf.destroy(0)
    mf.prefetch(0, 4096)  # the file is gone: returns without touching a closed descriptor
