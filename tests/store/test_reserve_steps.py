"""CommitLog and ConsumeQueue files reserve their blocks in steps as they fill (issue 34,
item 3), as index files do (``test_index_reserve.py``): disk use follows what the store holds.

Before, each ConsumeQueue file reserved its whole 6 MB when created (60 GB for 10,000 queues)
and each CommitLog file its whole 1 GB. A write past the reserved part still reserves first, so
a full disk is an error before any byte goes through the map (never SIGBUS; the real-process
full-disk test is ``tests/reliability/test_full_disk.py``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from ferrymq.store.config import MessageStoreConfig
from ferrymq.store.consume_queue import ConsumeQueue
from ferrymq.store.mapped_file import CQ_RESERVE_STEP, RESERVE_STEP, DiskFullError
from ferrymq.store.results import PutMessageStatus

from .helpers import msg, open_store, tmpfs, wait_dispatched

QUEUES = 10_000
TOPICS = 10
GB = 1_000_000_000


def allocated(root: Path) -> int:
    """Bytes the files under ``root`` hold on disk (blocks, not apparent sizes)."""
    return sum(p.stat().st_blocks * 512 for p in root.rglob("*") if p.is_file())


@pytest.fixture
def disk_1gib(tmp_path: Path) -> Iterator[Path]:
    # bounded: the old whole-file reservations (60 GB here) end in ENOSPC, not a full host disk
    with tmpfs(tmp_path / "disk", 1024) as disk:
        yield disk


async def test_ten_thousand_queues_use_under_one_gigabyte(disk_1gib: Path) -> None:
    # upstream's default file sizes: CommitLog 1 GB, ConsumeQueue 300,000 units (6 MB)
    config = MessageStoreConfig.model_validate({"storePathRootDir": str(disk_1gib / "store")})
    store = await open_store(config)
    try:
        per_topic = QUEUES // TOPICS
        for t in range(TOPICS):
            for q in range(per_topic):
                result = await store.put_message(msg(f"T{t}", q, b"x" * 100))
                assert result.status is PutMessageStatus.PUT_OK, result
        await wait_dispatched(store, timeout=120)
        used = allocated(disk_1gib / "store")
        queue_files = sum(1 for p in (disk_1gib / "store" / "consumequeue").rglob("0" * 20))
        assert queue_files == QUEUES
        assert used < GB, f"{QUEUES} queues hold {used / 1e6:.0f} MB on disk"
        for t in (0, TOPICS - 1):
            assert store.get_max_offset_in_queue(f"T{t}", per_topic - 1) == 1
    finally:
        await store.shutdown()
    print(f"{QUEUES} queues, one message each: {used / 1e6:.0f} MB on disk")


def test_a_consume_queue_file_reserves_as_units_are_written(tmp_path: Path) -> None:
    cq = ConsumeQueue("T", 0, tmp_path, 300_000 * 20)
    try:
        assert cq.put_message_position_info(0, 100, 0, 0)
        mf = cq.mapped_file_queue.get_last_mapped_file()
        assert mf is not None
        assert mf.reserved == CQ_RESERVE_STEP
        assert allocated(tmp_path) <= CQ_RESERVE_STEP + 4096
        units = CQ_RESERVE_STEP // 20 + 5  # past the first step, one unit at a time
        for i in range(1, units):
            assert cq.put_message_position_info(i * 100, 100, 0, i)
        assert mf.reserved == 2 * CQ_RESERVE_STEP
        n = 2 * CQ_RESERVE_STEP // 20 - units + 7  # and past the second, as one run
        cq.put_units([100 * (units + i) for i in range(n)], [100] * n, [0] * n, units)
        assert mf.reserved == 3 * CQ_RESERVE_STEP
        assert cq.max_offset_in_queue == units + n
        assert cq.get_index_buffer(units + n - 1) is not None
    finally:
        cq.mapped_file_queue.shutdown()


def test_a_full_disk_refuses_the_unit_before_writing_it(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "disk", 1) as disk:
        cq = ConsumeQueue("T", 0, disk, 300_000 * 20)
        filler = disk / "filler"
        try:
            assert cq.put_message_position_info(0, 100, 0, 0)
            with open(filler, "wb") as f:  # the rest of the disk, but for less than a step
                f.write(bytes(os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize - 4096))
            step_units = CQ_RESERVE_STEP // 20
            for i in range(1, step_units):
                assert cq.put_message_position_info(i * 100, 100, 0, i)
            with pytest.raises(DiskFullError, match="no space left"):
                cq.put_message_position_info(step_units * 100, 100, 0, step_units)
            assert cq.max_offset_in_queue == step_units  # nothing half-written
            filler.unlink()
            assert cq.put_message_position_info(step_units * 100, 100, 0, step_units)
            assert cq.max_offset_in_queue == step_units + 1
        finally:
            cq.mapped_file_queue.shutdown()


async def test_a_commit_log_file_reserves_as_records_are_written(tmp_path: Path) -> None:
    size = 64 * 1024 * 1024
    config = MessageStoreConfig.model_validate(
        {"storePathRootDir": str(tmp_path), "mappedFileSizeCommitLog": size}
    )
    store = await open_store(config)
    try:
        body = b"y" * 1000
        assert (await store.put_message(msg("T", 0, body))).status is PutMessageStatus.PUT_OK
        mf = store.commit_log.mapped_file_queue.get_last_mapped_file()
        assert mf is not None and mf.reserved == RESERVE_STEP
        for _ in range(RESERVE_STEP // 1000 + 10):  # past the first step
            assert (await store.put_message(msg("T", 0, body))).status is PutMessageStatus.PUT_OK
        assert mf.reserved == 2 * RESERVE_STEP
        assert allocated(config.commit_log_dir) < 3 * RESERVE_STEP < size
        await wait_dispatched(store, timeout=60)
        assert store.get_max_offset_in_queue("T", 0) == RESERVE_STEP // 1000 + 11
    finally:
        await store.shutdown()
