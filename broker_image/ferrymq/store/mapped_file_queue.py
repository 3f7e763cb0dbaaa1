"""The ordered mapped files of one directory (upstream ``MappedFileQueue``).

Files are contiguous: file *i+1* starts at ``file i start + mapped_file_size``. The first file
need not start at 0 once old files expire, so lookups subtract the first file's index (MQ3).

Threading: the event loop appends, rolls and deletes; flush threads read a snapshot of the list
under a lock and hold each file while syncing it.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from ferrymq.store.json_file import fsync_dir
from ferrymq.store.mapped_file import MappedFile, SelectMappedBufferResult, offset_file_name

log = logging.getLogger(__name__)

# Upstream deletes at most this many expired files per cleanup turn, to spread the IO.
DELETE_FILES_BATCH_MAX = 10


class MappedFileQueue:
    def __init__(
        self,
        store_path: Path,
        mapped_file_size: int,
        *,
        reserve_step: int | None = None,
        keep_fd: bool = True,
    ) -> None:
        """``reserve_step``: each file reserves its blocks that many bytes at a time as it is
        written (writers call ``ensure_reserved``); None: each file whole when created.
        ``keep_fd``: see :class:`MappedFile` (False: one descriptor per file, not two)."""
        self.store_path = store_path
        self.mapped_file_size = mapped_file_size
        self.reserve_step = reserve_step
        self.keep_fd = keep_fd
        self._files: list[MappedFile] = []
        self._lock = threading.Lock()
        self.flushed_where = 0
        self.store_timestamp = 0  # store time of the last record known flushed
        self._dir_dirty = False  # a file was created since the last directory fsync

    # --- loading -------------------------------------------------------------------------

    def load(self) -> None:
        """Map every file of the directory, positions at the end (recovery corrects them)."""
        if not self.store_path.is_dir():
            return
        names = sorted(
            p.name for p in self.store_path.iterdir() if p.is_file() and p.name.isdigit()
        )
        files: list[MappedFile] = []
        for index, name in enumerate(names):
            expected = files[-1].file_from_offset + self.mapped_file_size if files else None
            if expected is not None and int(name) != expected:
                # Data after a hole cannot be reached by offset; move it aside (never reuse a
                # file that holds stale records) and say so.
                for later in names[index:]:
                    (self.store_path / later).rename(self.store_path / f"{later}.gap")
                log.error(
                    "%s: no file at offset %d; %d later file(s) renamed to *.gap and ignored",
                    self.store_path,
                    expected,
                    len(names) - index,
                )
                break
            mf = self._map(self.store_path / name, create=False)
            mf.set_positions(self.mapped_file_size)
            files.append(mf)
        with self._lock:
            self._files = files

    def _map(self, path: Path, *, create: bool) -> MappedFile:
        step = self.reserve_step
        if step is None:
            return MappedFile(path, self.mapped_file_size, create=create, keep_fd=self.keep_fd)
        return MappedFile(
            path,
            self.mapped_file_size,
            create=create,
            reserve=step,
            reserve_step=step,
            keep_fd=self.keep_fd,
        )

    # --- access ---------------------------------------------------------------------------

    @property
    def files(self) -> list[MappedFile]:
        with self._lock:
            return list(self._files)

    def is_empty(self) -> bool:
        return not self._files

    def get_first_mapped_file(self) -> MappedFile | None:
        files = self._files
        return files[0] if files else None

    def get_last_mapped_file(self) -> MappedFile | None:
        files = self._files
        return files[-1] if files else None

    def get_or_create_last_mapped_file(self, start_offset: int = 0) -> MappedFile:
        """The file to append to: the last one, or a new one when none exists or it is full.

        A first file is created at ``start_offset`` rounded down to a file boundary.
        """
        last = self.get_last_mapped_file()
        if last is None:
            create_offset = start_offset - start_offset % self.mapped_file_size
        elif last.is_full():
            create_offset = last.file_from_offset + self.mapped_file_size
        else:
            return last
        mf = self._map(self.store_path / offset_file_name(create_offset), create=True)
        with self._lock:
            if not self._files:
                mf.first_create_in_queue = True
            self._files.append(mf)
            self._dir_dirty = True
        return mf

    def find_mapped_file_by_offset(
        self, offset: int, return_first_on_not_found: bool = False
    ) -> MappedFile | None:
        files = self._files
        if not files:
            return None
        first = files[0]
        index = offset // self.mapped_file_size - first.file_from_offset // self.mapped_file_size
        if 0 <= index < len(files):
            mf = files[index]
            if mf.file_from_offset <= offset < mf.file_from_offset + self.mapped_file_size:
                return mf
        return first if return_first_on_not_found else None

    def find_mapped_file_by_time(self, timestamp_ms: int) -> MappedFile | None:
        """The first file modified after ``timestamp_ms``, else the last (MQ2)."""
        files = self.files
        for mf in files:
            if mf.last_modified_ms() >= timestamp_ms:
                return mf
        return files[-1] if files else None

    def select(self, offset: int, size: int | None = None) -> SelectMappedBufferResult | None:
        """A held slice at an absolute offset (to the end of written data when size is None)."""
        mf = self.find_mapped_file_by_offset(offset)
        if mf is None:
            return None
        return mf.select_mapped_buffer(offset - mf.file_from_offset, size)

    def get_min_offset(self) -> int:
        first = self.get_first_mapped_file()
        return first.file_from_offset if first else 0

    def get_max_offset(self) -> int:
        last = self.get_last_mapped_file()
        return last.file_from_offset + last.read_position if last else 0

    def roll_next_file(self, offset: int) -> int:
        return offset + self.mapped_file_size - offset % self.mapped_file_size

    def how_much_fall_behind(self) -> int:
        return self.get_max_offset() - self.flushed_where

    # --- durability -----------------------------------------------------------------------

    def flush(self, least_pages: int) -> bool:
        """fdatasync from ``flushed_where`` on. Blocking: run in a thread from the loop.

        Returns True when something new reached the disk. Continues across full files so one
        call covers a roll (upstream needs two calls).
        """
        if self._dir_dirty:
            self._dir_dirty = False
            fsync_dir(self.store_path, missing_ok=True)
        progressed = False
        for _ in range(len(self._files) + 1):
            mf = self.find_mapped_file_by_offset(self.flushed_where, self.flushed_where == 0)
            if mf is None:
                break
            ts = mf.store_timestamp
            offset = mf.flush(least_pages)
            where = mf.file_from_offset + offset
            if where > self.flushed_where:
                progressed = True
                self.flushed_where = where
                if least_pages == 0 and ts:
                    self.store_timestamp = ts
                elif ts:
                    self.store_timestamp = max(self.store_timestamp, ts)
            if not (mf.is_full() and offset >= mf.file_size):
                break
        return progressed

    # --- truncation and expiry ------------------------------------------------------------

    def truncate_dirty_files(self, offset: int) -> None:
        """Drop everything at or beyond ``offset``: later files are deleted, the file holding it
        is cut there (and wiped beyond, so stale bytes never look like records)."""
        keep: list[MappedFile] = []
        doomed: list[MappedFile] = []
        for mf in self.files:
            file_tail = mf.file_from_offset + self.mapped_file_size
            if file_tail <= offset:
                keep.append(mf)
            elif mf.file_from_offset <= offset:
                mf.set_positions(offset - mf.file_from_offset)
                mf.zero_from(offset - mf.file_from_offset)
                keep.append(mf)
            else:
                doomed.append(mf)
        with self._lock:
            self._files = keep
        for mf in doomed:
            mf.destroy(1000)
        if self.flushed_where > offset:
            self.flushed_where = offset

    def delete_last_mapped_file(self) -> None:
        last = self.get_last_mapped_file()
        if last is not None:
            with self._lock:
                self._files.remove(last)
            last.destroy(1000)

    def delete_expired_files_by_time(
        self,
        expired_ms: int,
        delete_interval_ms: int,
        interval_forcibly_ms: int,
        clean_immediately: bool,
        now_ms: int | None = None,
    ) -> int:
        """Delete files (never the last) untouched for ``expired_ms``, or the oldest ones when
        ``clean_immediately``; returns how many were deleted."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        files = self.files[:-1]
        deleted: list[MappedFile] = []
        for mf in files:
            if len(deleted) >= DELETE_FILES_BATCH_MAX:
                break
            if not (clean_immediately or now >= mf.last_modified_ms() + expired_ms):
                break  # files are in time order: nothing later is older
            if not mf.destroy(interval_forcibly_ms):
                break  # still in use: retry on a later turn
            deleted.append(mf)
            if delete_interval_ms > 0:
                time.sleep(delete_interval_ms / 1000)
        self._remove(deleted)
        return len(deleted)

    def delete_files_before(
        self, keep: Callable[[MappedFile], bool], interval_forcibly_ms: int = 1000
    ) -> int:
        """Delete leading files (never the last) for which ``keep`` is False (ConsumeQueue and
        index expiry by CommitLog offset)."""
        deleted: list[MappedFile] = []
        for mf in self.files[:-1]:
            # a file an earlier turn began to destroy (a flush thread held it) is unmapped once
            # released: it was judged already, and its map may be closed by now
            if mf.is_available and keep(mf):
                break
            if not mf.destroy(interval_forcibly_ms):
                break
            deleted.append(mf)
        self._remove(deleted)
        return len(deleted)

    def _remove(self, deleted: list[MappedFile]) -> None:
        if not deleted:
            return
        gone = {id(mf) for mf in deleted}
        with self._lock:
            self._files = [mf for mf in self._files if id(mf) not in gone]

    def destroy(self) -> None:
        """Delete every file and the directory (topic deletion, rebuilds)."""
        for mf in self.files:
            mf.destroy(0)
            if not mf.is_cleanup_over:
                mf.destroy(0)
        with self._lock:
            self._files = []
        self.flushed_where = 0
        with contextlib.suppress(OSError):
            self.store_path.rmdir()

    def shutdown(self) -> None:
        for mf in self.files:
            mf.close()
