"""MappedFile cursors and reference counting; MappedFileQueue roll, lookup, truncate, expiry."""

from __future__ import annotations

from pathlib import Path

import pytest
from ferrymq.store.mapped_file import MappedFile, StoreFileError, offset_file_name
from ferrymq.store.mapped_file_queue import MappedFileQueue


def test_cursors_flush_and_select(tmp_path: Path) -> None:
    mf = MappedFile(tmp_path / offset_file_name(4096), 4096)
    assert mf.file_from_offset == 4096 and mf.wrote_position == 0
    assert mf.append_bytes(b"a" * 100)
    assert not mf.is_able_to_flush(1) and mf.is_able_to_flush(0)
    assert mf.flush(0) == 100 and mf.flushed_position == 100
    sel = mf.select_mapped_buffer(10, 20)
    assert sel is not None and bytes(sel.buffer) == b"a" * 20 and sel.start_offset == 4106
    assert mf.select_mapped_buffer(90, 20) is None  # beyond the wrote position
    assert not mf.append_bytes(b"b" * 4000)  # does not fit: nothing written
    assert mf.wrote_position == 100
    # Destroy waits for the reader, then goes through once it releases.
    assert not mf.destroy(60_000)
    assert mf.path.exists()
    sel.release()
    assert mf.is_cleanup_over and mf.destroy(60_000)
    assert not mf.path.exists()


def test_forced_destroy_after_interval(tmp_path: Path) -> None:
    mf = MappedFile(tmp_path / offset_file_name(0), 4096)
    mf.append_bytes(b"x" * 10)
    sel = mf.select_mapped_buffer(0)
    assert sel is not None
    assert not mf.destroy(60_000)
    assert mf.destroy(0)  # second call past the interval: forced
    assert not mf.path.exists()
    sel.release()  # a late release is harmless


def test_wrong_size_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / offset_file_name(0)
    path.write_bytes(b"\0" * 8192)
    with pytest.raises(StoreFileError, match="larger than the configured"):
        MappedFile(path, 4096, create=False)
    with pytest.raises(StoreFileError, match="not a start offset"):
        MappedFile(tmp_path / "abc", 4096)


def test_queue_rolls_and_finds_by_offset(tmp_path: Path) -> None:
    q = MappedFileQueue(tmp_path / "q", 4096)
    written = 0
    for _ in range(10):
        mf = q.get_or_create_last_mapped_file()
        while mf.append_bytes(b"z" * 1000):
            written += 1000
        mf.advance(mf.free_space)  # pad the file to full (as a blank record would)
    names = [mf.path.name for mf in q.files]
    assert names == [offset_file_name(i * 4096) for i in range(10)]
    for offset in (0, 4095, 4096, 20000, 40959):
        found = q.find_mapped_file_by_offset(offset)
        assert found is not None and found.file_from_offset == offset - offset % 4096
    assert q.find_mapped_file_by_offset(40960) is None
    assert q.get_max_offset() == 40960
    assert q.flush(0) and q.flushed_where == 40960
    q.truncate_dirty_files(9000)
    assert q.get_max_offset() == 9000 and len(q.files) == 3
    last = q.get_last_mapped_file()
    assert last is not None and bytes(last.buffer[9000 - 8192 :]) == bytes(4096 - (9000 - 8192))
    # Expire the oldest files by time; the last file always stays.
    assert q.delete_expired_files_by_time(0, 0, 0, clean_immediately=True) == 2
    assert q.get_min_offset() == 8192
    assert q.find_mapped_file_by_offset(100) is None
    assert q.find_mapped_file_by_offset(100, return_first_on_not_found=True) is q.files[0]
    q.shutdown()
    # Reload from disk: same files, positions at the end until recovery says otherwise.
    q2 = MappedFileQueue(tmp_path / "q", 4096)
    q2.load()
    assert [mf.file_from_offset for mf in q2.files] == [8192]
    q2.shutdown()


def test_queue_first_file_at_non_zero_offset(tmp_path: Path) -> None:
    q = MappedFileQueue(tmp_path / "q", 4096)
    mf = q.get_or_create_last_mapped_file(10000)
    assert mf.file_from_offset == 8192
    q.shutdown()


def test_load_moves_files_after_a_hole_aside(tmp_path: Path) -> None:
    q = MappedFileQueue(tmp_path / "q", 4096)
    for _ in range(4):
        mf = q.get_or_create_last_mapped_file()
        mf.advance(mf.free_space)
    q.shutdown()
    (tmp_path / "q" / offset_file_name(8192)).unlink()
    q2 = MappedFileQueue(tmp_path / "q", 4096)
    q2.load()
    assert [mf.file_from_offset for mf in q2.files] == [0, 4096]
    assert (tmp_path / "q" / (offset_file_name(12288) + ".gap")).exists()
    q2.shutdown()
