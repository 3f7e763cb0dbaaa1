"""Recovery on real files: many-segment rolls, torn tails and byte flips in the last CommitLog
file, the reput-after-crash gap (digest RC4), and rebuilding ConsumeQueue/index from scratch."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import shutil
from pathlib import Path

from ferrymq.store import record as rec
from ferrymq.store.mapped_file import offset_file_name
from ferrymq.store.message_store import MessageStore
from ferrymq.store.results import AppendMessageResult, PutMessageStatus

from .helpers import msg, open_store, read_queue, small_config, wait_dispatched

FAR_FUTURE_MS = 2**50


async def abandon(store: MessageStore) -> None:
    """Stop a store the way a crash would: no final flush, no checkpoint, abort file kept."""
    services = [
        store.reput,
        store._group_commit,
        store._flush_commit_log,
        store._flush_cq,
        store._cleanup,
    ]
    for service in services:
        task = getattr(service, "_task", None) if service is not None else None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    store._running = False
    store._shutdown = True
    store.commit_log.mapped_file_queue.shutdown()
    store.consume_queues.shutdown()
    store.index_service.shutdown()


async def fill(
    store: MessageStore, count: int, rng: random.Random, queues: int = 3
) -> list[AppendMessageResult]:
    out = []
    for i in range(count):
        body = bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 700)))
        r = await store.put_message(
            msg(queue_id=i % queues, body=body, props={"KEYS": f"key{i}", "TAGS": f"t{i % 5}"})
        )
        assert r.status is PutMessageStatus.PUT_OK and r.append_result is not None
        out.append(r.append_result)
    return out


def all_records(store: MessageStore, queues: int = 3) -> dict[int, bytes]:
    """CommitLog offset -> record bytes for everything reachable through the queues, checking
    queue offsets grow (a damaged record skipped leaves a gap) and every served record is whole
    and valid."""
    found: dict[int, bytes] = {}
    for qid in range(queues):
        entries = read_queue(store, "T", qid)
        offsets = [o for o, _ in entries]
        assert offsets == sorted(set(offsets))
        for queue_offset, raw in entries:
            check = rec.check_record(raw, 0, len(raw), check_crc=True)
            assert check.kind is rec.RecordKind.MESSAGE and check.record is not None
            assert check.record.queue_offset == queue_offset and check.record.queue_id == qid
            found[check.record.physical_offset] = raw
    return found


async def test_many_segments_roll_and_restart(tmp_path: Path) -> None:
    rng = random.Random(7)
    cfg = small_config(tmp_path, mappedFileSizeCommitLog=4096, mappedFileSizeConsumeQueue=20 * 10)
    store = await open_store(cfg)
    appended = await fill(store, 400, rng)
    await wait_dispatched(store)
    before = all_records(store)
    files = store.commit_log.mapped_file_queue.files
    assert len(files) > 40
    assert [f.path.name for f in files] == [offset_file_name(i * 4096) for i in range(len(files))]
    # Records never straddle files, and each non-last file ends with a blank record.
    for a in appended:
        assert a.wrote_offset // 4096 == (a.end_offset - 1) // 4096
    assert sorted(before) == [a.wrote_offset for a in appended]
    await store.shutdown()

    store = await open_store(cfg)
    try:
        assert store.recovery_stats["lastExitOk"] == "true"
        assert all_records(store) == before
        r = await store.put_message(msg(queue_id=1))
        assert r.append_result is not None
        assert r.append_result.queue_offset == sum(1 for i in range(400) if i % 3 == 1)
        assert (
            r.append_result.wrote_offset == appended[-1].end_offset
            or r.append_result.wrote_offset % 4096 == 0
        )
    finally:
        await store.shutdown()


def _corrupt_last_file(root: Path, rng: random.Random, mode: str, limit: int) -> int:
    """Damage the last CommitLog file; returns the absolute offset of the first damaged byte."""
    last = sorted((root / "commitlog").iterdir())[-1]
    start = int(last.name)
    pos = rng.randrange(0, limit - start) if limit > start else 0
    with open(last, "r+b") as fh:
        if mode == "truncate":
            os.truncate(last, pos)
        else:
            fh.seek(pos)
            byte = fh.read(1)
            fh.seek(pos)
            fh.write(bytes([byte[0] ^ rng.randint(1, 255)]))
    return start + pos


async def test_random_truncation_and_flips_recover_to_last_valid(tmp_path: Path) -> None:
    rng = random.Random(1234)
    for round_no in range(12):
        root = tmp_path / f"r{round_no}"
        cfg = small_config(root, mappedFileSizeCommitLog=8192)
        store = await open_store(cfg)
        appended = await fill(store, rng.randint(20, 60), rng)
        await wait_dispatched(store)
        end = store.max_phy_offset
        crash = rng.random() < 0.7
        if crash:
            await abandon(store)
        else:
            await store.shutdown()
        mode = rng.choice(["truncate", "flip"])
        damaged = _corrupt_last_file(root, rng, mode, end)

        store = await open_store(cfg)  # must not raise
        try:
            hit = [a for a in appended if a.wrote_offset <= damaged < a.end_offset]
            recovered_end = store.max_phy_offset
            if mode == "truncate" and hit:
                assert recovered_end == hit[0].wrote_offset, (round_no, mode, crash)
            elif hit and hit[0] is appended[-1]:
                # The last record damaged is a torn tail: cut (unless the flip hit a field no
                # check covers, e.g. born time, which leaves the record valid).
                assert recovered_end in (hit[0].wrote_offset, end), (round_no, mode, crash)
            elif hit:
                # A damaged record before valid ones is skipped: nothing after it is lost.
                assert recovered_end == end, (round_no, mode, crash)
            else:
                assert recovered_end >= max(
                    (a.end_offset for a in appended if a.end_offset <= damaged), default=0
                )
            served = all_records(store)
            intact = {a.wrote_offset for a in appended if a.end_offset <= recovered_end}
            if mode == "flip" and hit:
                assert intact - set(served) <= {hit[0].wrote_offset}, (round_no, mode, crash)
                assert set(served) <= intact
            else:
                assert set(served) == intact, (round_no, mode, crash)
            # The log accepts new messages right after the cut, and survives another restart.
            r = await store.put_message(msg(queue_id=0, body=b"after"))
            assert r.append_result is not None
            await wait_dispatched(store)
            after = all_records(store)
        finally:
            await store.shutdown()
        store = await open_store(cfg)
        try:
            assert all_records(store) == after
        finally:
            await store.shutdown()


async def test_reput_gap_after_crash_is_closed(tmp_path: Path) -> None:
    """Digest RC4: messages appended but not dispatched at the tail of an earlier file."""
    rng = random.Random(5)
    cfg = small_config(tmp_path, mappedFileSizeCommitLog=8192)
    store = await open_store(cfg)
    first = await fill(store, 10, rng)
    await wait_dispatched(store)
    assert store.reput._task is not None
    store.reput._task.cancel()  # dispatch stops; appends go on
    with contextlib.suppress(asyncio.CancelledError):
        await store.reput._task
    store.reput._task = None
    rest = await fill(store, 60, rng)
    assert store.commit_log.mapped_file_queue.files[-1].file_from_offset > first[-1].end_offset
    # A checkpoint vouching for everything: upstream would start at the last file only.
    store.checkpoint.physic_msg_timestamp = FAR_FUTURE_MS
    store.checkpoint.logics_msg_timestamp = FAR_FUTURE_MS
    store.checkpoint.flush()
    await abandon(store)

    store = await open_store(cfg)
    try:
        assert store.recovery_stats["lastExitOk"] == "false"
        assert int(store.recovery_stats["reputFromOffset"]) <= first[-1].end_offset
        assert set(all_records(store)) == {a.wrote_offset for a in first + rest}
    finally:
        await store.shutdown()


def _snapshot(directory: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(directory)): p.read_bytes()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


async def test_consume_queue_and_index_rebuilt_identical(tmp_path: Path) -> None:
    rng = random.Random(99)
    cfg = small_config(tmp_path, mappedFileSizeCommitLog=8192, maxHashSlotNum=16, maxIndexNum=40)
    store = await open_store(cfg)
    await fill(store, 150, rng)
    await wait_dispatched(store)
    await store.shutdown()
    cq_before = _snapshot(tmp_path / "consumequeue")
    index_before = sorted(_snapshot(tmp_path / "index").values())
    assert len(index_before) > 3
    shutil.rmtree(tmp_path / "consumequeue")
    shutil.rmtree(tmp_path / "index")

    store = await open_store(cfg)
    try:
        assert int(store.recovery_stats["redispatchedMessages"]) == 150
        await store.shutdown()
    finally:
        await store.shutdown()
    assert _snapshot(tmp_path / "consumequeue") == cq_before
    # Index files are named by creation time; their contents are what must match.
    assert sorted(_snapshot(tmp_path / "index").values()) == index_before
    store = await open_store(cfg)
    try:
        q = store.query_message("T", "key42", 5, 0, 2**62)
        assert len(q.messages) == 1 and q.messages[0].properties["KEYS"] == "key42"
    finally:
        await store.shutdown()


async def test_empty_commit_log_drops_stale_queues(tmp_path: Path) -> None:
    cfg = small_config(tmp_path)
    store = await open_store(cfg)
    await fill(store, 5, random.Random(1))
    await store.shutdown()
    shutil.rmtree(tmp_path / "commitlog")
    store = await open_store(cfg)
    try:
        assert store.get_max_offset_in_queue("T", 0) == 0
        r = await store.put_message(msg())
        assert r.append_result is not None and r.append_result.queue_offset == 0
    finally:
        await store.shutdown()


async def test_index_files_newer_than_checkpoint_are_rebuilt_from_their_start(
    tmp_path: Path,
) -> None:
    cfg = small_config(tmp_path, mappedFileSizeCommitLog=4096, maxHashSlotNum=8, maxIndexNum=20)
    store = await open_store(cfg)
    appended = []
    for i in range(90):
        r = await store.put_message(msg(body=b"i" * 200, props={"KEYS": f"key{i}"}))
        assert r.append_result is not None
        appended.append(r.append_result)
        # store timestamps are ms: 90 puts can share one, and then no index file ends before
        # message 59 (the checkpoint below needs some that do)
        await asyncio.sleep(0.002)
    await wait_dispatched(store)
    assert len(store.index_service.files) >= 4
    # A checkpoint that vouches for the index only up to message 59.
    store.checkpoint.physic_msg_timestamp = FAR_FUTURE_MS
    store.checkpoint.logics_msg_timestamp = FAR_FUTURE_MS
    store.checkpoint.index_msg_timestamp = appended[59].store_timestamp - 1
    store.checkpoint.flush()
    kept = [
        f for f in store.index_service.files if f.end_timestamp <= appended[59].store_timestamp - 1
    ]
    assert kept and len(kept) < len(store.index_service.files)
    last_kept_entry = kept[-1].end_phy_offset
    await abandon(store)

    store = await open_store(cfg)
    try:
        # Dispatch resumed at the last entry the kept index files hold (the dropped files
        # began right after it), not at the CommitLog start.
        assert int(store.recovery_stats["reputFromOffset"]) == last_kept_entry > 0
        for i in range(90):
            q = store.query_message("T", f"key{i}", 3, 0, 2**62)
            assert [m.commit_log_offset for m in q.messages] == [appended[i].wrote_offset], i
    finally:
        await store.shutdown()


async def test_queue_that_lost_its_tail_is_redispatched_from_the_checkpoint(tmp_path: Path) -> None:
    """Power-loss shape: queue 1's last units never reached the disk while queue 0's did.
    Resuming only from the highest queue would skip them; the checkpoint bound does not."""
    # No index: its own resume point would mask what this test is about.
    cfg = small_config(tmp_path, mappedFileSizeCommitLog=8192, messageIndexEnable=False)
    store = await open_store(cfg)
    appended = []
    for i in range(40):
        r = await store.put_message(msg(queue_id=i % 2, body=b"p%d" % i))
        assert r.append_result is not None
        appended.append(r.append_result)
    await wait_dispatched(store)
    store.checkpoint.physic_msg_timestamp = appended[-1].store_timestamp + 10_000
    store.checkpoint.logics_msg_timestamp = appended[30].store_timestamp + 2999  # margin is 3 s
    store.checkpoint.flush()
    await abandon(store)
    cq_file = sorted((tmp_path / "consumequeue" / "T" / "1").iterdir())[-1]
    data = bytearray(cq_file.read_bytes())
    used = len(data.rstrip(b"\0")) // 20 * 20 + 20 * (len(data.rstrip(b"\0")) % 20 != 0)
    data[used - 3 * 20 : used] = bytes(60)  # queue 1 loses its last three units
    cq_file.write_bytes(bytes(data))

    store = await open_store(cfg)
    try:
        assert store.recovery_stats["lastExitOk"] == "false"
        assert set(all_records(store, queues=2)) == {a.wrote_offset for a in appended}
    finally:
        await store.shutdown()


def _body_len(store: MessageStore, a: AppendMessageResult) -> int:
    found = store.look_message_by_offset(a.wrote_offset)
    assert found is not None
    return len(found.body)


def _flip_body_byte(root: Path, a: AppendMessageResult, file_size: int) -> None:
    """Flip one byte in the middle of a record's body (the body CRC then fails)."""
    path = root / "commitlog" / offset_file_name(a.wrote_offset - a.wrote_offset % file_size)
    position = a.wrote_offset % file_size + rec.BODY_POS + 1
    with open(path, "r+b") as fh:
        fh.seek(position)
        old = fh.read(1)
        fh.seek(position)
        fh.write(bytes([old[0] ^ 0x5A]))


async def test_flip_in_the_oldest_file_after_a_crash_loses_only_that_record(
    tmp_path: Path,
) -> None:
    """Issue 23: with no checkpoint yet, a crash rescans from the first file; one flipped byte
    there used to cut the log and lose everything after it."""
    rng = random.Random(23)
    cfg = small_config(tmp_path, mappedFileSizeCommitLog=8192)
    store = await open_store(cfg)
    appended = await fill(store, 120, rng)
    await wait_dispatched(store)
    victim = next(a for a in appended[3:] if _body_len(store, a) > 2)
    await abandon(store)
    (tmp_path / "checkpoint").unlink(missing_ok=True)
    assert victim.wrote_offset < 8192  # in the oldest file
    _flip_body_byte(tmp_path, victim, 8192)

    store = await open_store(cfg)
    try:
        assert store.recovery_stats["lastExitOk"] == "false"
        assert store.recovery_stats["recoverDamagedRecords"] == "1"
        assert store.corrupt_records_skipped == 1
        info = store.runtime_info()
        assert info["commitLogCorruptRecordsSkipped"] == "1"
        assert int(info["commitLogCorruptBytesSkipped"]) == victim.wrote_bytes
        assert store.max_phy_offset == appended[-1].end_offset
        assert set(all_records(store)) == {a.wrote_offset for a in appended} - {victim.wrote_offset}
        # new sends continue each queue after its last offset
        r = await store.put_message(msg(queue_id=victim.queue_offset % 3))
        assert r.append_result is not None
    finally:
        await store.shutdown()


async def test_dispatch_steps_over_a_damaged_record(tmp_path: Path) -> None:
    """A record damaged after it was appended but before dispatch reached it: dispatch skips to
    the next valid record, counts and logs it, and every other message is indexed."""
    rng = random.Random(5)
    cfg = small_config(tmp_path, mappedFileSizeCommitLog=8192)
    store = await open_store(cfg)
    try:
        first = await fill(store, 5, rng)
        await wait_dispatched(store)
        assert store.reput._task is not None
        store.reput._task.cancel()  # dispatch stops; appends go on
        with contextlib.suppress(asyncio.CancelledError):
            await store.reput._task
        store.reput._task = None
        rest = await fill(store, 30, rng)
        victim = rest[10]
        mf = store.commit_log.mapped_file_queue.find_mapped_file_by_offset(victim.wrote_offset)
        assert mf is not None
        # a byte of its MAGICCODE: structural damage, which dispatch sees (it does not check
        # body CRCs; the pull path does, see test_get_path_never_serves_a_damaged_body)
        pos = victim.wrote_offset - mf.file_from_offset + rec.MAGIC_POS + 1
        mf.buffer[pos] ^= 0x5A
        store.reput.do_reput()
        assert store.reput.corrupt_records_skipped == 1
        assert store.corrupt_records_skipped == 1
        assert store.dispatch_behind_bytes() == 0
        assert set(all_records(store)) == {a.wrote_offset for a in first + rest} - {
            victim.wrote_offset
        }
    finally:
        await store.shutdown()


async def test_get_path_never_serves_a_damaged_body(tmp_path: Path) -> None:
    """A record damaged after dispatch (its unit exists): the pull passes over it and goes on."""
    rng = random.Random(8)
    cfg = small_config(tmp_path, mappedFileSizeCommitLog=8192)
    store = await open_store(cfg)
    try:
        appended = await fill(store, 30, rng, queues=1)
        await wait_dispatched(store)
        victim = next(a for a in appended[5:] if _body_len(store, a) > 2)
        mf = store.commit_log.mapped_file_queue.find_mapped_file_by_offset(victim.wrote_offset)
        assert mf is not None
        mf.buffer[victim.wrote_offset - mf.file_from_offset + rec.BODY_POS + 1] ^= 0x5A
        served = all_records(store, queues=1)
        assert set(served) == {a.wrote_offset for a in appended} - {victim.wrote_offset}
        # nor by offset id (VIEW_MESSAGE_BY_ID) or key (QUERY_MESSAGE)
        assert store.look_message_by_offset(victim.wrote_offset) is None
        assert store.look_message_by_offset(appended[0].wrote_offset) is not None
    finally:
        await store.shutdown()
