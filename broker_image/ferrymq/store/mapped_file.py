"""One fixed-size memory-mapped file named by the offset of its first byte (upstream
``ReferenceResource`` + ``DefaultMappedFile``).

Promises:
- ``wrote_position`` is where the next append goes; bytes before it are readable (``read_position``).
  There is no write buffer (no TransientStorePool), so the committed position equals the wrote one.
- ``flushed_position`` only grows, and every byte before it has been through ``fdatasync``.
  :meth:`MappedFile.flush` blocks: callers on the event loop run it in a thread.
- Readers :meth:`hold` the file (or get a :class:`SelectMappedBufferResult`, which holds it) and
  release it; :meth:`destroy` unmaps and deletes only when the last reader has let go, or forcibly
  after ``interval_forcibly`` ms (then a slice still exported keeps the mapping alive until it is
  released, which CPython enforces; the file itself is deleted anyway).
- The file layer knows bytes and cursors, never messages: callers encode into :attr:`buffer`.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import mmap
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

OS_PAGE_SIZE = 4096
OFFSET_NAME_DIGITS = 20

_MS_SYNC = 4  # Linux
_msync: Any = None  # libc msync through ctypes (which releases the GIL); False: unavailable


def _libc_msync() -> Any:
    global _msync
    if _msync is None:
        try:
            import ctypes

            fn = ctypes.CDLL(None, use_errno=True).msync
            fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
            fn.restype = ctypes.c_int
            _msync = fn
        except (OSError, AttributeError):
            _msync = False
    return _msync


class StoreFileError(OSError):
    """A store file that cannot be opened, mapped or has an unexpected size."""


def offset_file_name(offset: int) -> str:
    """The 20-digit name of a file starting at ``offset``."""
    return f"{offset:0{OFFSET_NAME_DIGITS}d}"


class DiskFullError(StoreFileError):
    """No space left on the device to reserve a store file's blocks (ENOSPC)."""


def _zero_fill(fd: int, start: int, size: int) -> None:
    """Write zeros over ``[start, size)``: reserves the blocks through a path that returns ENOSPC
    (for filesystems without fallocate)."""
    chunk = bytes(1 << 20)
    pos = start
    while pos < size:
        n = os.pwrite(fd, chunk[: min(len(chunk), size - pos)], pos)
        if n <= 0:
            raise OSError(errno.ENOSPC, "short write")
        pos += n


# Index and CommitLog files reserve their blocks in steps of this many bytes as they are
# written; a ConsumeQueue file (one per queue: 10,000 queues are 10,000 files) in smaller ones.
RESERVE_STEP = 4 * 1024 * 1024
CQ_RESERVE_STEP = 64 * 1024


def reserve_blocks(fd: int, size: int, path: Path, start: int = 0) -> None:
    """Reserve every block of ``[start, size)`` before anything writes there through the map.

    A write to a mapped page whose block the filesystem cannot allocate is SIGBUS, which kills
    the process with no log line; reserved first, a full disk is an ENOSPC here instead
    (raised as :class:`DiskFullError`, naming the file and its filesystem's free bytes).
    Reserving blocks a file already has is cheap, so loading existing files calls it too.
    """
    try:
        try:
            os.posix_fallocate(fd, start, size - start)
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                raise
            # No fallocate here: write zeros where the file was never written.
            _zero_fill(fd, max(start, os.fstat(fd).st_size), size)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise DiskFullError(
                f"{path}: no space left on the store disk to reserve {size} bytes "
                f"({free_bytes(path.parent)} bytes free)",
            ) from exc
        raise StoreFileError(f"{path}: cannot reserve {size} bytes: {exc.strerror}") from exc


def free_bytes(path: Path) -> int:
    """Bytes an unprivileged writer can still allocate on ``path``'s filesystem (-1 unknown);
    a path not created yet is measured at its nearest existing parent."""
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        st = os.statvfs(probe)
    except OSError:
        return -1
    return st.f_bavail * st.f_frsize


class ReferenceResource:
    """Hold/release counting so a resource is cleaned up only after its last user lets go.

    Thread-safe: flushes run in worker threads while the event loop reads and deletes.
    """

    def __init__(self) -> None:
        self._ref_lock = threading.Lock()
        self._ref_count = 1
        self._available = True
        self._cleanup_over = False
        self._first_shutdown_ms = 0

    @property
    def is_available(self) -> bool:
        return self._available

    @property
    def is_cleanup_over(self) -> bool:
        return self._ref_count <= 0 and self._cleanup_over

    def hold(self) -> bool:
        with self._ref_lock:
            if self._available and self._ref_count > 0:
                self._ref_count += 1
                return True
            return False

    def release(self) -> None:
        with self._ref_lock:
            self._ref_count -= 1
            if self._ref_count > 0:
                return
            if not self._cleanup_over:
                self._cleanup_over = self._cleanup()

    def shutdown(self, interval_forcibly_ms: int) -> None:
        if self._available:
            with self._ref_lock:
                self._available = False
                self._first_shutdown_ms = int(time.time() * 1000)
            self.release()
        elif (
            self._ref_count > 0
            and int(time.time() * 1000) - self._first_shutdown_ms >= interval_forcibly_ms
        ):
            with self._ref_lock:
                self._ref_count = -1000 - self._ref_count
            self.release()

    def _cleanup(self) -> bool:
        raise NotImplementedError


class SelectMappedBufferResult:
    """A slice of a mapped file, valid until :meth:`release` (the file is held meanwhile)."""

    __slots__ = ("_file", "buffer", "size", "start_offset")

    def __init__(self, start_offset: int, buffer: memoryview, mapped_file: MappedFile) -> None:
        self.start_offset = start_offset
        self.buffer: memoryview = buffer
        self.size = len(buffer)
        self._file: MappedFile | None = mapped_file

    @property
    def mapped_file(self) -> MappedFile | None:
        return self._file

    def release(self) -> None:
        """Release the slice and the hold on its file (idempotent)."""
        if self._file is not None:
            self.buffer.release()
            mapped_file, self._file = self._file, None
            mapped_file.release()

    def __enter__(self) -> SelectMappedBufferResult:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class MappedFile(ReferenceResource):
    """A file of exactly ``file_size`` bytes mapped read-write; name = start offset (20 digits)."""

    def __init__(
        self,
        path: Path,
        file_size: int,
        *,
        create: bool = True,
        reserve: int | None = None,
        reserve_step: int = RESERVE_STEP,
        keep_fd: bool = True,
    ) -> None:
        """``reserve``: bytes whose blocks are reserved before mapping (default: all of them);
        a writer past them calls :meth:`ensure_reserved` first, which reserves ``reserve_step``
        more at a time. Files written from the front use it (index entries, CommitLog records,
        ConsumeQueue units): reserving 420 MB per index file, or 6 MB per ConsumeQueue file
        (60 GB for 10,000 queues), up front filled disks with nothing.

        ``keep_fd=False``: the descriptor is closed once the file is mapped and opened again
        for the rare calls that need one (a reservation step, a flush): Python's mmap holds a
        descriptor of its own, so a file costs one descriptor instead of two (10,000 queues are
        10,000 ConsumeQueue files)."""
        super().__init__()
        self.path = path
        self.file_size = file_size
        self.reserve_step = reserve_step
        self.reserved = file_size if reserve is None else max(0, min(reserve, file_size))
        try:
            self.file_from_offset = int(path.name)
        except ValueError as exc:
            raise StoreFileError(f"{path}: file name is not a start offset") from exc
        path.parent.mkdir(parents=True, exist_ok=True)
        flags = os.O_RDWR | (os.O_CREAT if create else 0)
        try:
            self._fd = os.open(path, flags, 0o644)
        except OSError as exc:
            raise StoreFileError(f"{path}: cannot open: {exc.strerror}") from exc
        actual = -1
        try:
            actual = os.fstat(self._fd).st_size
            if actual > file_size:
                raise StoreFileError(
                    f"{path}: size {actual} is larger than the configured {file_size}; "
                    "was the file size setting changed?"
                )
            if self.reserved < file_size and actual < file_size:
                os.ftruncate(self._fd, file_size)  # sparse beyond what is reserved now
            if actual < file_size or create:
                # Every mapped file (CommitLog, ConsumeQueue, index) gets its blocks reserved
                # before it is mapped, so no later write through the map can hit a full disk.
                reserve_blocks(self._fd, self.reserved, path)
            else:
                try:
                    reserve_blocks(self._fd, self.reserved, path)
                except DiskFullError as exc:
                    # An existing file written sparse (older versions did so for queues and
                    # index files): it is mapped anyway, its data must stay readable.
                    log.error("%s; the file stays sparse", exc)
            self._mm = mmap.mmap(
                self._fd, file_size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE
            )
        except OSError as exc:
            os.close(self._fd)
            if create and actual == 0:
                path.unlink(missing_ok=True)  # leave no empty file behind for the next load
            if isinstance(exc, StoreFileError):
                raise
            raise StoreFileError(f"{path}: cannot map {file_size} bytes: {exc.strerror}") from exc
        # Bytes the file had when opened: less than file_size means it was cut short on disk
        # (a partly reserved file is extended sparse to file_size first, so its size says so too)
        # (its tail now reads as zeros), which the ConsumeQueue start-up check acts on.
        self.loaded_size = file_size if create and actual == 0 else actual
        self.wrote_position = 0
        self.flushed_position = 0
        # Store timestamp of the last record appended (ms); for checkpoints and expiry.
        self.store_timestamp = 0
        self.first_create_in_queue = False
        self._fd_closed = False
        if not keep_fd:
            os.close(self._fd)
            self._fd_closed = True

    @contextlib.contextmanager
    def _io_fd(self) -> Iterator[int]:
        """The file's descriptor for a call that needs one (a short-lived one when the file
        keeps none open)."""
        if not self._fd_closed:
            yield self._fd
            return
        try:
            fd = os.open(self.path, os.O_RDWR)
        except OSError as exc:
            raise StoreFileError(f"{self.path}: cannot open: {exc.strerror}") from exc
        try:
            yield fd
        finally:
            os.close(fd)

    def prefetch(self, start: int, length: int) -> None:
        """Bring ``[start, start + length)`` of the file into the page cache (upstream's
        ``madvise(WILLNEED)`` warm-up). Blocking: run it in a worker thread, so that zero-filling
        fresh pages happens there, not in a page fault on the loop thread's next write."""
        if not self.hold():
            return
        try:
            with self._io_fd() as fd:
                os.posix_fadvise(fd, start, length, os.POSIX_FADV_WILLNEED)
        except OSError as exc:  # advice only: an append never depends on it
            log.debug("%s: prefetch failed: %s", self.path, exc)
        finally:
            self.release()

    # --- positions ---------------------------------------------------------------------------

    def ensure_reserved(self, end: int) -> None:
        """Reserve the blocks up to ``end`` (at least ``reserve_step`` more) before a write
        there; raises :class:`DiskFullError` on a full disk, before anything touched the map."""
        if end <= self.reserved:
            return
        target = min(self.file_size, max(end, self.reserved + self.reserve_step))
        with self._io_fd() as fd:
            reserve_blocks(fd, target, self.path, start=self.reserved)
        self.reserved = target

    @property
    def buffer(self) -> mmap.mmap:
        """The whole mapping, for encoders writing at ``wrote_position`` (loop thread only)."""
        return self._mm

    @property
    def read_position(self) -> int:
        return self.wrote_position

    @property
    def committed_position(self) -> int:
        return self.wrote_position

    @property
    def free_space(self) -> int:
        return self.file_size - self.wrote_position

    def is_full(self) -> bool:
        return self.wrote_position >= self.file_size

    def set_positions(self, position: int) -> None:
        """Recovery: the valid data ends at ``position`` (wrote = flushed = position)."""
        self.wrote_position = position
        self.flushed_position = position

    def advance(self, nbytes: int, store_timestamp: int = 0) -> None:
        """Account for ``nbytes`` the caller encoded at the old wrote position."""
        self.wrote_position += nbytes
        if store_timestamp:
            self.store_timestamp = store_timestamp

    def append_bytes(self, data: bytes | bytearray | memoryview, store_timestamp: int = 0) -> bool:
        """Copy ``data`` at the wrote position; False (nothing written) when it does not fit."""
        pos = self.wrote_position
        n = len(data)
        if pos + n > self.file_size:
            return False
        self._mm[pos : pos + n] = data
        self.advance(n, store_timestamp)
        return True

    def zero_from(self, position: int) -> None:
        """Zero bytes from ``position`` to the end, skipping chunks that already are zero.

        After a torn tail is cut, stale bytes beyond the cut must not be mistaken for records by
        a later recovery, so they are wiped (sparse, untouched pages stay untouched).
        """
        chunk = 1 << 20
        zeros = bytes(chunk)
        pos = position
        while pos < self.file_size:
            end = min(pos + chunk, self.file_size)
            if self._mm[pos:end] != zeros[: end - pos]:
                self._mm[pos:end] = zeros[: end - pos]
            pos = end

    # --- reading -----------------------------------------------------------------------------

    def select_mapped_buffer(
        self, pos: int, size: int | None = None
    ) -> SelectMappedBufferResult | None:
        """A held slice ``[pos, pos+size)`` (to the read position when ``size`` is None)."""
        read_pos = self.read_position
        end = read_pos if size is None else pos + size
        if pos < 0 or end > read_pos or end < pos or (size is None and pos >= read_pos):
            return None
        if not self.hold():
            return None
        try:
            view = memoryview(self._mm)[pos:end]
        except ValueError:  # the mapping was closed under us
            self.release()
            return None
        return SelectMappedBufferResult(self.file_from_offset + pos, view, self)

    # --- durability --------------------------------------------------------------------------

    def is_able_to_flush(self, least_pages: int) -> bool:
        flushed = self.flushed_position
        write = self.read_position
        if self.is_full():
            return write > flushed
        if least_pages > 0:
            return (write // OS_PAGE_SIZE) - (flushed // OS_PAGE_SIZE) >= least_pages
        return write > flushed

    def flush(self, least_pages: int) -> int:
        """fdatasync when enough pages are dirty; returns the flushed position. Blocking."""
        if self.is_able_to_flush(least_pages):
            if self.hold():
                try:
                    value = self.read_position
                    # On Linux a shared mapping's dirty pages are the file's page cache, so
                    # fdatasync on the descriptor persists them (and releases the GIL).
                    with self._io_fd() as fd:
                        os.fdatasync(fd)
                    self.flushed_position = value
                finally:
                    self.release()
            else:
                self.flushed_position = self.read_position
        return self.flushed_position

    def sync_range(self, offset: int, size: int) -> None:
        """Write back only the pages of ``[offset, offset + size)`` (msync MS_SYNC) and wait.
        Blocking, without holding the GIL: run in a thread (``mmap.flush`` keeps the GIL)."""
        start = offset - offset % OS_PAGE_SIZE
        length = min(self.file_size, offset + size) - start
        if length <= 0 or not self.hold():
            return
        try:
            msync = _libc_msync()
            if not msync or not sys.platform.startswith("linux"):
                self._mm.flush(start, length)
                return
            import ctypes

            anchor = ctypes.c_char.from_buffer(self._mm)
            addr = ctypes.addressof(anchor)
            del anchor  # no buffer export left behind (the mapping stays: the file is held)
            if msync(addr + start, length, _MS_SYNC) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"{self.path}: msync: {os.strerror(err)}")
        finally:
            self.release()

    # --- lifecycle ---------------------------------------------------------------------------

    def last_modified_ms(self) -> int:
        try:
            mtime = int(os.stat(self.path).st_mtime * 1000)
        except OSError:
            mtime = 0
        return max(mtime, self.store_timestamp)

    def _cleanup(self) -> bool:
        if self._available:
            return False
        try:
            self._mm.close()
        except BufferError:
            # A slice is still exported; the mapping goes when that slice is released.
            log.warning("%s: destroyed while a slice is still in use", self.path)
        if not self._fd_closed:
            os.close(self._fd)
            self._fd_closed = True
        return True

    def destroy(self, interval_forcibly_ms: int = 0) -> bool:
        """Unmap and delete once unreferenced; True when the file is gone."""
        self.shutdown(interval_forcibly_ms)
        if not self.is_cleanup_over:
            return False
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        return True

    def close(self) -> None:
        """Unmap without deleting (store shutdown); forced if a reader still holds it."""
        self.shutdown(0)
        if not self.is_cleanup_over:
            self.shutdown(0)

    def __repr__(self) -> str:
        return (
            f"MappedFile({self.path.name}, wrote={self.wrote_position}, "
            f"flushed={self.flushed_position}, size={self.file_size})"
        )
