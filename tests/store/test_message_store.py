"""The MessageStore facade on real files: put/get statuses, limits, filters, lookups,
durability hooks, dispatch listeners, disk-full refusal, retention and slave appends."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from ferrymq.message import Message, MessageSysFlag, encode_batch
from ferrymq.store import record as rec
from ferrymq.store.config import FlushDiskType
from ferrymq.store.message_store import MessageStore
from ferrymq.store.results import GetMessageStatus, PutMessageResult, PutMessageStatus

from .helpers import STORE_HOST, msg, open_store, read_queue, small_config, wait_dispatched


async def test_put_get_and_offsets(tmp_path: Path) -> None:
    store = await open_store(small_config(tmp_path))
    try:
        results = []
        for i in range(100):
            r = await store.put_message(
                msg(body=b"m%03d" % i, props={"TAGS": "A" if i % 2 else "B"})
            )
            assert r.status is PutMessageStatus.PUT_OK and r.append_result is not None
            results.append(r.append_result)
        assert [a.queue_offset for a in results] == list(range(100))
        assert results[1].wrote_offset == results[0].end_offset
        ip, port, offset = __import__("ferrymq.message").message.decode_message_id(
            results[5].msg_id
        )
        assert (ip, port, offset) == (STORE_HOST[0], STORE_HOST[1], results[5].wrote_offset)
        await wait_dispatched(store)
        assert store.get_max_offset_in_queue("T", 0) == 100
        assert store.get_min_offset_in_queue("T", 0) == 0

        res = store.get_message("g", "T", 0, 10, 5)
        assert res.status is GetMessageStatus.FOUND and res.next_begin_offset == 15
        assert res.queue_offsets == [10, 11, 12, 13, 14]
        decoded = rec.decode_messages(res.body())
        assert [m.body for m in decoded] == [b"m%03d" % i for i in range(10, 15)]
        assert res.buffer_total_size == len(res.body())
        res.release()

        # Upstream's per-pull cap of 32 messages.
        with store.get_message("g", "T", 0, 0, 1000) as res:
            assert res.message_count == 32

        m = store.look_message_by_offset(results[7].wrote_offset)
        assert m is not None and m.body == b"m007" and m.queue_offset == 7
        assert store.look_message_by_offset(results[7].wrote_offset + 1) is None
        assert store.get_commit_log_offset_in_queue("T", 0, 7) == results[7].wrote_offset
        ts = store.get_message_store_timestamp("T", 0, 7)
        assert ts == results[7].store_timestamp
        assert store.get_earliest_message_time("T", 0) == results[0].store_timestamp
        assert store.get_offset_in_queue_by_time("T", 0, results[50].store_timestamp) <= 50
        assert store.get_offset_in_queue_by_time("T", 0, int(time.time() * 1000) + 10_000) == 100
    finally:
        await store.shutdown()


async def test_get_statuses(tmp_path: Path) -> None:
    store = await open_store(small_config(tmp_path))
    try:
        assert (
            store.get_message("g", "nope", 0, 0, 32).status
            is GetMessageStatus.NO_MATCHED_LOGIC_QUEUE
        )
        for _ in range(3):
            await store.put_message(msg())
        await wait_dispatched(store)
        cases = {
            3: (GetMessageStatus.OFFSET_OVERFLOW_ONE, 3),
            10: (GetMessageStatus.OFFSET_OVERFLOW_BADLY, 0),
        }
        for offset, (status, next_begin) in cases.items():
            res = store.get_message("g", "T", 0, offset, 32)
            assert (res.status, res.next_begin_offset) == (status, next_begin)
            assert (res.min_offset, res.max_offset) == (0, 3)
    finally:
        await store.shutdown()


async def test_byte_cap_per_pull(tmp_path: Path) -> None:
    store = await open_store(
        small_config(
            tmp_path, mappedFileSizeCommitLog=1 << 20, maxTransferBytesOnMessageInMemory=10_000
        )
    )
    try:
        for _ in range(10):
            await store.put_message(msg(body=b"x" * 3000))
        await wait_dispatched(store)
        with store.get_message("g", "T", 0, 0, 32) as res:
            assert res.message_count == 3 and res.next_begin_offset == 3
    finally:
        await store.shutdown()


class TagFilter:
    def __init__(self, tag: str) -> None:
        from ferrymq.message import java_string_hash

        self.code = java_string_hash(tag)
        self.tag = tag

    def is_matched_by_consume_queue(self, tags_code: int) -> bool:
        return tags_code == self.code

    def is_matched_by_commit_log(
        self, record_buffer: memoryview, properties: dict[str, str] | None
    ) -> bool:
        return (properties or {}).get("TAGS") == self.tag


async def test_filter_and_no_matched(tmp_path: Path) -> None:
    store = await open_store(small_config(tmp_path))
    try:
        for i in range(20):
            await store.put_message(msg(body=b"%d" % i, props={"TAGS": "A" if i % 4 == 0 else "B"}))
        await wait_dispatched(store)
        with store.get_message("g", "T", 0, 0, 32, TagFilter("A")) as res:
            assert res.status is GetMessageStatus.FOUND
            assert [m.body for m in rec.decode_messages(res.body())] == [
                b"0",
                b"4",
                b"8",
                b"12",
                b"16",
            ]
            assert res.next_begin_offset == 20
        with store.get_message("g", "T", 0, 0, 32, TagFilter("C")) as res:
            assert res.status is GetMessageStatus.NO_MATCHED_MESSAGE and res.next_begin_offset == 20
    finally:
        await store.shutdown()


async def test_bad_input_gets_clear_statuses(tmp_path: Path) -> None:
    store = await open_store(
        small_config(tmp_path, mappedFileSizeCommitLog=1 << 20, maxMessageSize=4096)
    )
    try:
        r = await store.put_message(msg(topic="t" * 128))
        assert r.status is PutMessageStatus.MESSAGE_ILLEGAL and "topic" in r.remark
        r = await store.put_message(msg(props={"K": "v" * 40000}))
        assert r.status is PutMessageStatus.PROPERTIES_SIZE_EXCEEDED and "32767" in r.remark
        r = await store.put_message(msg(body=b"x" * 5000))
        assert r.status is PutMessageStatus.MESSAGE_ILLEGAL and "maxMessageSize" in r.remark
        bad = msg(body=b"\x00\x00\x00\x30garbage")
        r = await store.put_messages(bad)
        assert r.status is PutMessageStatus.MESSAGE_ILLEGAL and "batch" in r.remark
        # Nothing of the refused puts reached the log.
        assert store.max_phy_offset == 0
        r = await store.put_message(msg())
        assert r.status is PutMessageStatus.PUT_OK and r.append_result is not None
        assert r.append_result.queue_offset == 0
    finally:
        await store.shutdown()
    r = await store.put_message(msg())
    assert r.status is PutMessageStatus.SERVICE_NOT_AVAILABLE


async def test_batch_put(tmp_path: Path) -> None:
    store = await open_store(small_config(tmp_path))
    try:
        items = [Message("T", b"b%d" % i, properties={"KEYS": f"k{i}"}) for i in range(10)]
        r = await store.put_messages(msg(topic="T", queue_id=2, body=encode_batch(items)))
        assert r.status is PutMessageStatus.PUT_OK and r.append_result is not None
        assert r.append_result.msg_num == 10 and len(r.append_result.msg_ids) == 10
        assert r.append_result.msg_id.count(",") == 9
        await wait_dispatched(store)
        got = read_queue(store, "T", 2)
        assert [o for o, _ in got] == list(range(10))
        assert [m.body for m in rec.decode_messages(b"".join(b for _, b in got))] == [
            i.body for i in items
        ]
        q = store.query_message("T", "k3", 10, 0, 2**62)
        assert len(q.messages) == 1 and q.messages[0].body == b"b3"
        assert store.query_message("T", "k99", 10, 0, 2**62).phy_offsets == []
    finally:
        await store.shutdown()


async def test_transaction_halves_take_no_queue_slot(tmp_path: Path) -> None:
    store = await open_store(small_config(tmp_path))
    try:
        prepared = await store.put_message(msg(sys_flag=MessageSysFlag.TRANSACTION_PREPARED_TYPE))
        normal = await store.put_message(msg())
        assert prepared.append_result and prepared.append_result.queue_offset == 0
        assert normal.append_result and normal.append_result.queue_offset == 0
        await wait_dispatched(store)
        assert store.get_max_offset_in_queue("T", 0) == 1
        assert store.look_message_by_offset(prepared.append_result.wrote_offset) is not None
    finally:
        await store.shutdown()


async def test_sync_flush_and_replica_waiter(tmp_path: Path) -> None:
    store = await open_store(
        small_config(tmp_path, flushDiskType="SYNC_FLUSH", brokerRole="SYNC_MASTER")
    )
    seen: list[int] = []

    async def replica(end_offset: int) -> PutMessageStatus:
        seen.append(end_offset)
        return PutMessageStatus.FLUSH_SLAVE_TIMEOUT if len(seen) == 2 else PutMessageStatus.PUT_OK

    try:
        r = await store.put_message(msg())
        assert r.status is PutMessageStatus.PUT_OK
        assert store.flushed_offset >= r.append_result.end_offset  # type: ignore[union-attr]
        store.set_replica_waiter(replica)
        r1 = await store.put_message(msg())
        r2 = await store.put_message(msg())
        assert r1.status is PutMessageStatus.PUT_OK
        assert r2.status is PutMessageStatus.FLUSH_SLAVE_TIMEOUT and r2.is_ok
        assert seen == [r1.append_result.end_offset, r2.append_result.end_offset]  # type: ignore[union-attr]
        # WAIT=false skips both waits.
        r3 = await store.put_message(msg(props={"WAIT": "false"}))
        assert r3.status is PutMessageStatus.PUT_OK and len(seen) == 2
    finally:
        await store.shutdown()


async def test_sync_flush_timeout(tmp_path: Path) -> None:
    store = await open_store(small_config(tmp_path, flushDiskType="SYNC_FLUSH", syncFlushTimeout=1))
    try:
        assert store._group_commit is not None
        await store._group_commit.stop()  # a stalled flusher: nobody will fsync
        r = await store.put_message(msg())
        assert r.status is PutMessageStatus.FLUSH_DISK_TIMEOUT and r.is_ok
    finally:
        await store.shutdown()


async def test_dispatch_listener(tmp_path: Path) -> None:
    store = await open_store(small_config(tmp_path))
    arrived: list[tuple[str, int, int]] = []
    event = asyncio.Event()

    def on_dispatch(
        topic: str, qid: int, offset: int, tags: int, ts: int, props: dict[str, str]
    ) -> None:
        arrived.append((topic, qid, offset))
        if len(arrived) == 3:
            event.set()

    store.add_dispatch_listener(on_dispatch)
    try:
        for qid in range(3):
            await store.put_message(msg(queue_id=qid))
        await asyncio.wait_for(event.wait(), 5)
        assert arrived == [("T", 0, 0), ("T", 1, 0), ("T", 2, 0)]
    finally:
        await store.shutdown()


class FakeDiskUsage:
    """Stands in for statvfs: filling a real disk to 90% is not possible on a shared machine."""

    def __init__(self) -> None:
        self.ratio = 0.1

    def __call__(self, path: Path) -> float:
        return self.ratio


async def test_disk_full_refuses_puts_and_forces_cleanup(tmp_path: Path) -> None:
    disk = FakeDiskUsage()
    cfg = small_config(
        tmp_path,
        deleteWhen="04",
        fileReservedTime=72,
        cleanResourceInterval=60_000,
        destroyMapedFileIntervalForcibly=0,
        deleteCommitLogFilesInterval=0,
    )
    store = await open_store(cfg, disk_usage=disk)
    try:
        for _ in range(300):
            await store.put_message(msg(body=b"y" * 200))
        await wait_dispatched(store)
        files_before = len(store.commit_log.mapped_file_queue.files)
        assert files_before > 3
        disk.ratio = 0.95
        await store.run_cleanup_once()
        assert store.is_disk_full
        r = await store.put_message(msg())
        assert r.status is PutMessageStatus.SERVICE_NOT_AVAILABLE and "disk" in r.remark
        # Forced cleanup removed the oldest files (not expired by time) and queues followed.
        # A file a flush thread holds at that moment is retried on a later turn (as upstream),
        # so turns repeat until one gets through.
        deadline = time.monotonic() + 10
        while len(store.commit_log.mapped_file_queue.files) >= files_before:
            assert time.monotonic() < deadline, "forced cleanup never deleted a file"
            await asyncio.sleep(0.01)
            await store.run_cleanup_once()
        assert store.get_min_offset_in_queue("T", 0) > 0
        with store.get_message("g", "T", 0, 0, 32) as res:
            assert res.status is GetMessageStatus.OFFSET_TOO_SMALL
            assert res.next_begin_offset == store.get_min_offset_in_queue("T", 0)
        disk.ratio = 0.5
        await store.run_cleanup_once()
        assert not store.is_disk_full
        assert (await store.put_message(msg())).status is PutMessageStatus.PUT_OK
    finally:
        await store.shutdown()


async def test_expiry_by_time_at_delete_hour(tmp_path: Path) -> None:
    hour = time.localtime().tm_hour
    cfg = small_config(
        tmp_path,
        deleteWhen=f"{hour:02d}",
        fileReservedTime=0,
        cleanResourceInterval=60_000,
        deleteCommitLogFilesInterval=0,
    )
    store = await open_store(cfg, disk_usage=FakeDiskUsage())
    try:
        for _ in range(200):
            await store.put_message(msg(body=b"z" * 200))
        await wait_dispatched(store)
        assert store.max_phy_offset > 3 * cfg.mapped_file_size_commit_log
        # With fileReservedTime=0 a file expires once its mtime is in the past; the background
        # flush moves the mtime of the files it msyncs, so let it finish the old files first.
        mfq = store.commit_log.mapped_file_queue
        deadline = time.monotonic() + 30
        while mfq.flushed_where < mfq.files[-1].file_from_offset:
            assert time.monotonic() < deadline, "the flush service never reached the last file"
            await asyncio.sleep(0.01)
        newest = max((f.last_modified_ms() for f in mfq.files[:-1]), default=0)
        while int(time.time() * 1000) <= newest:
            await asyncio.sleep(0.001)
        await store.run_cleanup_once()
        assert len(store.commit_log.mapped_file_queue.files) == 1  # the current file stays
        assert store.get_min_offset_in_queue("T", 0) > 0
    finally:
        await store.shutdown()


async def test_delete_topics(tmp_path: Path) -> None:
    store = await open_store(small_config(tmp_path))
    try:
        await store.put_message(msg(topic="A-1"))
        await store.put_message(msg(topic="B"))
        await wait_dispatched(store)
        assert store.delete_topics(["A-1"]) == 1
        assert (
            store.get_message("g", "A-1", 0, 0, 1).status is GetMessageStatus.NO_MATCHED_LOGIC_QUEUE
        )
        assert not (tmp_path / "consumequeue" / "A-1").exists()
        r = await store.put_message(msg(topic="A-1"))
        assert r.append_result is not None and r.append_result.queue_offset == 0
    finally:
        await store.shutdown()


async def test_slave_appends_raw_bytes_and_dispatches(tmp_path: Path) -> None:
    master = await open_store(small_config(tmp_path / "m"))
    slave = await open_store(small_config(tmp_path / "s", brokerRole="SLAVE"))
    try:
        for i in range(120):  # crosses several 16 KiB files
            await master.put_message(msg(body=b"r%d" % i * 20, props={"KEYS": f"k{i}"}))
        assert (await slave.put_message(msg())).status is PutMessageStatus.SERVICE_NOT_AVAILABLE
        offset = 0
        while offset < master.max_phy_offset:
            sel = master.get_commit_log_data(offset)
            assert sel is not None
            try:
                assert slave.append_to_commit_log(offset, sel.buffer)
                offset += sel.size
            finally:
                sel.release()
        assert not slave.append_to_commit_log(offset + 10, b"x")  # not at the end: refused
        await wait_dispatched(slave)
        assert read_queue(slave, "T", 0) == read_queue(master, "T", 0)
        assert len(slave.query_message("T", "k7", 5, 0, 2**62).messages) == 1
    finally:
        await master.shutdown()
        await slave.shutdown()


def test_config_errors_name_the_key(tmp_path: Path) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="deleteWhen"):
        small_config(tmp_path, deleteWhen="4am")
    with pytest.raises(ValidationError, match="flushDiskType"):
        small_config(tmp_path, flushDiskType="SOMETIMES")
    assert (
        small_config(tmp_path, flushDiskType="SYNC_FLUSH").flush_disk_type
        is FlushDiskType.SYNC_FLUSH
    )


async def test_ipv6_store_host_writes_the_v6_layout(tmp_path: Path) -> None:
    store = MessageStore(small_config(tmp_path), ("::1", 10911))
    await store.start()
    try:
        r = await store.put_message(msg())
        assert r.status is PutMessageStatus.PUT_OK and r.append_result is not None
        # the offset msgId of an IPv6 store host: 16 address bytes + port + offset (56 digits)
        ip, port, offset = __import__("ferrymq.message").message.decode_message_id(
            r.append_result.msg_id
        )
        assert (ip, port, offset) == ("::1", 10911, r.append_result.wrote_offset)
        m = store.look_message_by_offset(r.append_result.wrote_offset)
        assert m is not None and m.store_host == ("::1", 10911)
        assert m.sys_flag & MessageSysFlag.STOREHOSTADDRESS_V6_FLAG
    finally:
        await store.shutdown()


async def test_group_commit_serves_concurrent_puts_with_few_fsyncs(tmp_path: Path) -> None:
    store = await open_store(small_config(tmp_path, flushDiskType="SYNC_FLUSH"))
    try:
        results = await asyncio.gather(
            *(store.put_message(msg(body=b"g%d" % i)) for i in range(200))
        )
        assert all(r.status is PutMessageStatus.PUT_OK for r in results)
        ends = [r.append_result.end_offset for r in results if r.append_result]
        assert store.flushed_offset >= max(ends)
        info = store.runtime_info()
        # Every put was acknowledged after an fsync covering it, with far fewer fsyncs than puts.
        assert int(info["groupCommitRequests"]) == 200
        assert 1 <= int(info["groupCommitFlushes"]) < 200
    finally:
        await store.shutdown()


async def test_put_message_nowait_returns_the_result_unless_it_must_wait(tmp_path: Path) -> None:
    # ASYNC_FLUSH: appended and answered at once, no coroutine
    store = await open_store(small_config(tmp_path / "async"))
    try:
        r = store.put_message_nowait(msg(body=b"now"))
        assert isinstance(r, PutMessageResult) and r.status is PutMessageStatus.PUT_OK
        assert r.append_result is not None and r.append_result.queue_offset == 0
        assert store.runtime_info()["putMessageTimesTotal"] == "1"
    finally:
        await store.shutdown()
    # SYNC_FLUSH: appended now (the offset is taken), acknowledged once the disk has it
    store = await open_store(small_config(tmp_path / "sync", flushDiskType="SYNC_FLUSH"))
    try:
        pending = store.put_message_nowait(msg(body=b"later"))
        assert not isinstance(pending, PutMessageResult)
        assert (await store.put_message(msg())).append_result.queue_offset == 1  # type: ignore[union-attr]
        r = await pending
        assert r.status is PutMessageStatus.PUT_OK and r.append_result is not None
        assert store.flushed_offset >= r.append_result.end_offset
    finally:
        await store.shutdown()


async def test_async_flush_and_checkpoint_on_shutdown(tmp_path: Path) -> None:
    from ferrymq.store.checkpoint import StoreCheckpoint

    from .helpers import wait_until

    cfg = small_config(tmp_path, flushCommitLogLeastPages=0, flushIntervalCommitLog=20)
    store = await open_store(cfg)
    assert cfg.abort_path.exists()
    r = await store.put_message(msg())
    assert r.append_result is not None
    await wait_until(lambda: store.flushed_offset == store.max_phy_offset)
    await store.shutdown()
    assert not cfg.abort_path.exists()
    cp = StoreCheckpoint(cfg.checkpoint_path)
    assert cp.physic_msg_timestamp == r.append_result.store_timestamp
    assert cp.logics_msg_timestamp == r.append_result.store_timestamp
    assert cfg.checkpoint_path.stat().st_size == 4096


async def test_index_entries_synced_only_by_thorough_flush_rounds(tmp_path: Path) -> None:
    """Between checkpoints only index headers are synced (recovery drops a file whose header is
    newer than the checkpoint); a thorough round, as the checkpoint needs, syncs everything."""
    from ferrymq.store.index_file import IndexFile

    # no periodic round meanwhile: this test drives the rounds itself
    store = await open_store(small_config(tmp_path, flushIntervalConsumeQueue=600_000))
    try:
        await store.put_message(msg(props={"KEYS": "k1"}))
        await wait_dispatched(store)
        calls: list[str] = []
        (index,) = store.index_service.files
        mf = index.mapped_file
        real_sync, real_flush = mf.sync_range, mf.flush

        def sync_range(offset: int, size: int) -> None:
            calls.append(f"range {offset} {size}")
            real_sync(offset, size)

        def flush(least_pages: int) -> int:
            calls.append(f"all {least_pages}")
            return real_flush(least_pages)

        mf.sync_range = sync_range  # type: ignore[method-assign]
        mf.flush = flush  # type: ignore[method-assign]
        store._flush_derived(2)
        assert calls == ["range 0 40"]
        calls.clear()
        store._flush_derived(0)
        assert calls == ["all 0"]
        reopened = IndexFile(mf.path, index.hash_slot_num, index.index_num)
        assert (reopened.index_count, reopened.end_timestamp) == (
            index.index_count,
            index.end_timestamp,
        )
        reopened.close()
    finally:
        await store.shutdown()


def test_offset_status_table() -> None:
    from ferrymq.store.get_message import offset_status

    s = GetMessageStatus
    assert offset_status(0, 0, 0) == (s.NO_MESSAGE_IN_QUEUE, 0)
    assert offset_status(3, 5, 10) == (s.OFFSET_TOO_SMALL, 5)
    assert offset_status(10, 5, 10) == (s.OFFSET_OVERFLOW_ONE, 10)
    assert offset_status(99, 5, 10) == (s.OFFSET_OVERFLOW_BADLY, 10)
    assert offset_status(99, 0, 10) == (s.OFFSET_OVERFLOW_BADLY, 0)
    assert offset_status(7, 5, 10) is None
    # a slave (upstream nextOffsetCorrection without offsetCheckInSlave) keeps the offset asked
    assert offset_status(744, 0, 743, correct=False) == (s.OFFSET_OVERFLOW_BADLY, 744)
    assert offset_status(3, 5, 10, correct=False) == (s.OFFSET_TOO_SMALL, 3)
    assert offset_status(4, 0, 0, correct=False) == (s.NO_MESSAGE_IN_QUEUE, 4)


async def test_failing_replica_waiter_means_stored_not_replicated(tmp_path: Path) -> None:
    store = await open_store(small_config(tmp_path, brokerRole="SYNC_MASTER"))

    async def broken(end_offset: int) -> PutMessageStatus:
        raise ConnectionResetError("slave went away")

    store.set_replica_waiter(broken)
    try:
        r = await store.put_message(msg())
        assert r.status is PutMessageStatus.SLAVE_NOT_AVAILABLE and r.is_ok
        assert r.append_result is not None
        assert store.look_message_by_offset(r.append_result.wrote_offset) is not None
    finally:
        await store.shutdown()


async def test_properties_dict_alone_is_stored(tmp_path: Path) -> None:
    from ferrymq.message import MessageInner

    store = await open_store(small_config(tmp_path))
    try:
        inner = MessageInner("T", 0, b"x", properties={"KEYS": "only-dict"})  # no encoded string
        r = await store.put_message(inner)
        assert r.append_result is not None
        m = store.look_message_by_offset(r.append_result.wrote_offset)
        assert m is not None and m.properties == {"KEYS": "only-dict"}
    finally:
        await store.shutdown()
