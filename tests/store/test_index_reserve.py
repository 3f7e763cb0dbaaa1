"""An index file reserves its hash slots up front and its entries in steps as they are written:
its disk use follows what it holds (420 MB reserved per file filled disks), and a full disk is
still an error before any write through the map (never SIGBUS)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from ferrymq.store.index_file import IndexFile, index_key_hash
from ferrymq.store.mapped_file import RESERVE_STEP, DiskFullError

from .helpers import tmpfs

SLOTS, ENTRIES = 1000, 1_000_000  # a 20 MB file


def allocated(path: Path) -> int:
    return os.stat(path).st_blocks * 512


def test_entries_are_reserved_as_they_are_written(tmp_path: Path) -> None:
    index = IndexFile(tmp_path / "00000000000000000000", SLOTS, ENTRIES)
    try:
        size = index.mapped_file.file_size
        assert os.stat(index.path).st_size == size  # mapped whole
        assert allocated(index.path) < 2 * RESERVE_STEP < size  # but not reserved whole
        for i in range(RESERVE_STEP // 20 + 10):  # past the first step of entries
            assert index.put_key(f"k{i}", 1000 + i, 1_700_000_000_000 + i)
        assert index.mapped_file.reserved >= index._entries_at + index.index_count * 20
        assert allocated(index.path) >= index.mapped_file.reserved - 4096
        assert index.select_phy_offsets("k7", 4, 0, 2**62) == [1007]
    finally:
        index.close()


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    with tmpfs(tmp_path / "disk", 6) as disk:
        yield disk


def test_a_full_disk_refuses_the_entry_and_leaves_the_file_as_it_was(tiny_disk: Path) -> None:
    """6 MB of disk: the slots and the first 4 MB step fit, the second step does not."""
    index = IndexFile(tiny_disk / "00000000000000000000", SLOTS, ENTRIES)
    try:
        written = 0
        with pytest.raises(DiskFullError, match="no space left"):
            for i in range(2 * RESERVE_STEP // 20):
                index.put_key(f"k{i}", i, 1_700_000_000_000)
                written += 1
        assert written >= RESERVE_STEP // 20 - 1
        assert index.index_count == written + 1  # entry 0 is the sentinel; nothing half-written
        hashes = np.array([index_key_hash("x")], dtype="int64")
        with pytest.raises(DiskFullError):
            index.put_keys(hashes, [1], [1_700_000_000_000])
        assert index.index_count == written + 1
        assert index.select_phy_offsets("k3", 4, 0, 2**62) == [3]
    finally:
        index.close()
