"""Records with IPv6 hosts (the v6 head layouts) through a real store: put, pull, index query,
time search, restart, ConsumeQueue/index rebuilt from the CommitLog, and a torn tail after a
crash, mixed with IPv4 records in the same files."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from ferrymq.message import Message, MessageSysFlag, encode_batch, encode_properties
from ferrymq.store import record as rec
from ferrymq.store.message_store import MessageStore
from ferrymq.store.results import PutMessageStatus

from .helpers import msg, read_queue, small_config, wait_dispatched
from .test_recovery import abandon

BORN = [("10.0.0.9", 40001), ("2001:db8::9", 40002)]
V6_BITS = MessageSysFlag.BORNHOST_V6_FLAG | MessageSysFlag.STOREHOSTADDRESS_V6_FLAG
COUNT = 60


async def _open(root: Path, store_host: tuple[str, int]) -> MessageStore:
    store = MessageStore(small_config(root), store_host)
    await store.start()
    return store


def _expect(i: int, store_host: tuple[str, int]) -> tuple[bytes, tuple[str, int], tuple[str, int]]:
    return b"m%03d" % i, BORN[i % 2], store_host


def _pulled(store: MessageStore) -> dict[int, list[tuple[bytes, tuple[str, int], tuple[str, int]]]]:
    """Per queue: (body, born host, store host) of every message, in queue order."""
    out = {}
    for qid in (0, 1):
        entries = read_queue(store, "T", qid)
        assert [o for o, _ in entries] == list(range(len(entries)))
        decoded = rec.decode_messages(b"".join(raw for _, raw in entries))
        out[qid] = [(m.body, m.born_host, m.store_host) for m in decoded]
    return out


def _want(store_host: tuple[str, int], count: int = COUNT) -> dict[int, list[object]]:
    return {qid: [_expect(i, store_host) for i in range(qid, count, 2)] for qid in (0, 1)}


@pytest.mark.parametrize("store_host", [("127.0.0.1", 10911), ("::1", 10911)])
async def test_mixed_host_records_survive_restart_and_rebuild(
    tmp_path: Path, store_host: tuple[str, int]
) -> None:
    store = await _open(tmp_path, store_host)
    try:
        results = []
        for i in range(COUNT):
            r = await store.put_message(
                msg(
                    queue_id=i % 2,
                    body=b"m%03d" % i,
                    props={"KEYS": f"k{i}"},
                    born_host=BORN[i % 2],
                )
            )
            assert r.status is PutMessageStatus.PUT_OK and r.append_result is not None
            results.append(r.append_result)
        items = [Message("B", b"b%d" % i, properties={"KEYS": f"bk{i}"}) for i in range(8)]
        batch = await store.put_messages(
            msg(topic="B", queue_id=0, body=encode_batch(items), born_host=BORN[1])
        )
        assert batch.status is PutMessageStatus.PUT_OK
        await wait_dispatched(store)
        assert _pulled(store) == _want(store_host)
        # the layouts really differ: IPv6 hosts give longer records with the v6 sysflag bits
        v6_store = ":" in store_host[0]
        for i, res in enumerate(results[:2]):
            m = store.look_message_by_offset(res.wrote_offset)
            assert m is not None and m.born_host == BORN[i] and m.store_host == store_host
            want_bits = (MessageSysFlag.BORNHOST_V6_FLAG if i else 0) | (
                MessageSysFlag.STOREHOSTADDRESS_V6_FLAG if v6_store else 0
            )
            assert m.sys_flag & V6_BITS == want_bits
            assert res.wrote_bytes == rec.record_size(
                4, 1, len(encode_properties(m.properties).encode()), want_bits
            )
        # the index finds keys of both layouts; the time search reads STORETIMESTAMP of both
        for key in ("k7", "k8", "bk3"):
            q = store.query_message("B" if key.startswith("b") else "T", key, 5, 0, 2**62)
            assert len(q.messages) == 1 and q.messages[0].properties["KEYS"] == key
        assert store.get_message_store_timestamp("T", 1, 3) == results[7].store_timestamp
        assert store.get_offset_in_queue_by_time("T", 1, results[7].store_timestamp) <= 3
    finally:
        await store.shutdown()

    store = await _open(tmp_path, store_host)  # a clean restart: normal recovery
    try:
        assert _pulled(store) == _want(store_host)
    finally:
        await store.shutdown()

    shutil.rmtree(tmp_path / "consumequeue")
    shutil.rmtree(tmp_path / "index")
    store = await _open(tmp_path, store_host)  # both rebuilt by dispatching the CommitLog
    try:
        assert int(store.recovery_stats["redispatchedMessages"]) == COUNT + 8
        await wait_dispatched(store)
        assert _pulled(store) == _want(store_host)
        q = store.query_message("T", "k9", 5, 0, 2**62)
        assert len(q.messages) == 1 and q.messages[0].born_host == BORN[1]
    finally:
        await store.shutdown()


async def test_torn_v6_tail_after_a_crash_is_cut_and_the_rest_kept(tmp_path: Path) -> None:
    store_host = ("::1", 10911)
    store = await _open(tmp_path, store_host)
    last = None
    for i in range(COUNT):
        r = await store.put_message(msg(queue_id=i % 2, body=b"m%03d" % i, born_host=BORN[i % 2]))
        assert r.append_result is not None
        last = r.append_result
    await wait_dispatched(store)
    store.commit_log.mapped_file_queue.flush(0)
    await abandon(store)
    assert last is not None
    size = store.commit_log.mapped_file_size
    path = tmp_path / "commitlog" / f"{last.wrote_offset - last.wrote_offset % size:020d}"
    with path.open("r+b") as fh:  # tear the last record (an IPv6-born one) inside its body
        fh.seek(last.wrote_offset % size + last.wrote_bytes - 12)
        fh.write(b"\x00" * 12)

    store = await _open(tmp_path, store_host)
    try:
        assert store.commit_log.max_offset == last.wrote_offset
        await wait_dispatched(store)
        assert _pulled(store) == _want(store_host, COUNT - 1)
        r = await store.put_message(msg(queue_id=1, body=b"after", born_host=BORN[1]))
        assert r.append_result is not None and r.append_result.queue_offset == (COUNT - 1) // 2
    finally:
        await store.shutdown()
