"""One topic/queue's logical queue (upstream ``ConsumeQueue``).

A file is an array of 20-byte units ``commitLogOffset i64 | size i32 | tagsCode i64``; the unit's
index is the queue offset, file names are the byte offset of their first unit (a multiple of 20).
A unit with ``size == BLANK_UNIT_SIZE`` is a filler (before the first real entry of a rebuilt queue
whose early messages expired, or for a gap): readers skip it.

Writing is idempotent by construction: each CommitLog record carries its queue offset, and a unit
that already exists is not written again, so recovery may re-dispatch freely (no duplicates).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np

from ferrymq.store.config import CQ_STORE_UNIT_SIZE as CQ_STORE_UNIT_SIZE
from ferrymq.store.mapped_file import CQ_RESERVE_STEP, MappedFile, SelectMappedBufferResult
from ferrymq.store.mapped_file_queue import MappedFileQueue
from ferrymq.store.record_layout import Field, Layout

log = logging.getLogger(__name__)

CQ_UNIT_LAYOUT = Layout(
    (
        Field("COMMITLOGOFFSET", "q"),
        Field("SIZE", "i"),
        Field("TAGSCODE", "q"),
    )
)
CQ_UNIT = CQ_UNIT_LAYOUT.struct
BLANK_UNIT_SIZE = 0x7FFFFFFF  # upstream fillPreBlank writes Integer.MAX_VALUE
_BLANK_UNIT = CQ_UNIT.pack(0, BLANK_UNIT_SIZE, 0)

# the unit size the store's settings round file sizes to (config.CQ_STORE_UNIT_SIZE) is this one
assert CQ_UNIT.size == CQ_STORE_UNIT_SIZE

# CQ_UNIT as a numpy record (big-endian, unpadded): a run of units is written at once
UNIT_DTYPE = CQ_UNIT_LAYOUT.numpy_dtype(
    {"COMMITLOGOFFSET": "offset", "SIZE": "size", "TAGSCODE": "tags"}
)
# below this many units, one pack_into per unit is cheaper than numpy's per-call overhead
VECTOR_MIN_UNITS = 8
# Largest gap of queue offsets that dispatch fills with blank units (in units; at least a file):
# gaps come from damaged records skipped, a few at a time.
MAX_OFFSET_GAP_UNITS = 1024


def is_valid_unit(offset: int, size: int) -> bool:
    """A unit written by dispatch (a zero unit means "never written")."""
    return offset >= 0 and size > 0


def iter_units(buf: memoryview | bytes, start: int = 0) -> Iterator[tuple[int, int, int, int]]:
    """``(position, commitLogOffset, size, tagsCode)`` of every whole unit in ``buf``."""
    for pos in range(start, len(buf) - CQ_STORE_UNIT_SIZE + 1, CQ_STORE_UNIT_SIZE):
        offset, size, tags = CQ_UNIT.unpack_from(buf, pos)
        yield pos, offset, size, tags


class ConsumeQueue:
    def __init__(self, topic: str, queue_id: int, root: Path, mapped_file_size: int) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.mapped_file_size = mapped_file_size
        # blocks reserved as units are written (CQ_RESERVE_STEP at a time), not 6 MB per file;
        # one descriptor per file (a broker has one or more files per queue)
        self.mapped_file_queue = MappedFileQueue(
            root / topic / str(queue_id),
            mapped_file_size,
            reserve_step=CQ_RESERVE_STEP,
            keep_fd=False,
        )
        # End (offset + size) of the last CommitLog record indexed here; -1 when empty.
        self.max_physic_offset = -1
        self.min_logic_offset = 0  # bytes
        self.damaged_unit_at = -1  # queue byte offset of a damaged unit recovery cut at

    # --- load / recover ---------------------------------------------------------------------

    def load(self) -> None:
        self.mapped_file_queue.load()

    def recover(self) -> None:
        """Find the end of valid units (scan from the third-last file) and cut there."""
        mfq = self.mapped_file_queue
        files = mfq.files
        if not files:
            return
        index = max(0, len(files) - 3)
        process_offset = files[index].file_from_offset
        max_ext = -1
        for mf in files[index:]:
            end_in_file = 0
            view = memoryview(mf.buffer)
            try:
                for pos, offset, size, tags in iter_units(view):
                    if not is_valid_unit(offset, size):
                        if offset or size or tags:
                            # Not the zeros of a unit never written: a damaged one. The queue
                            # is cut here and rebuilt from the CommitLog (check_units).
                            self.damaged_unit_at = mf.file_from_offset + pos
                        break
                    end_in_file = pos + CQ_STORE_UNIT_SIZE
                    if size != BLANK_UNIT_SIZE:
                        max_ext = offset + size
            finally:
                view.release()
            process_offset = mf.file_from_offset + end_in_file
            if end_in_file < self.mapped_file_size:
                break
        self.max_physic_offset = max_ext
        mfq.truncate_dirty_files(process_offset)
        mfq.flushed_where = process_offset

    def check_units(self, matches: Callable[[int, int, int], bool]) -> tuple[bool, str]:
        """Start-up check against the CommitLog: a file cut short on disk, and a last entry that
        does not point at this queue's record at that queue offset (``matches(offset, size,
        queue offset)``). What does not hold is cut off; returns ``(needs rebuild, why)``: the
        caller re-dispatches from :attr:`max_physic_offset` (the end of what holds)."""
        mfq = self.mapped_file_queue
        reasons: list[str] = []
        for mf in mfq.files:
            if mf.loaded_size < mf.file_size:
                cut = mf.file_from_offset + mf.loaded_size - mf.loaded_size % CQ_STORE_UNIT_SIZE
                reasons.append(f"file {mf.path.name} is {mf.loaded_size} bytes, not {mf.file_size}")
                if cut < mfq.get_max_offset():
                    self._cut(cut)
                break
        if self.damaged_unit_at >= 0:
            reasons.append(
                f"a damaged entry at queue offset {self.damaged_unit_at // CQ_STORE_UNIT_SIZE}"
            )
            self.damaged_unit_at = -1
        last_good = -1
        bad_from = -1
        for pos, offset, size in self._units_backwards():
            if size == BLANK_UNIT_SIZE:
                continue
            if matches(offset, size, pos // CQ_STORE_UNIT_SIZE):
                last_good = pos
                break
            bad_from = pos
        if bad_from >= 0:
            reasons.append(
                f"entries from queue offset {bad_from // CQ_STORE_UNIT_SIZE} do not match the "
                "CommitLog"
            )
            self._cut(bad_from if last_good < 0 else last_good + CQ_STORE_UNIT_SIZE)
        last = self.last_unit()
        self.max_physic_offset = last[0] + last[1] if last else -1
        return bool(reasons), "; ".join(reasons)

    def blank_units_in(self, ranges: Sequence[tuple[int, int]]) -> int:
        """Blank the units whose record starts in one of the ``[start, end)`` CommitLog ranges."""
        blanked = 0
        for mf in self.mapped_file_queue.files:
            count = mf.wrote_position // CQ_STORE_UNIT_SIZE
            if not count:
                continue
            units = np.frombuffer(mf.buffer, UNIT_DTYPE, count)
            offsets = units["offset"]
            hit = np.zeros(count, dtype=bool)
            for start, end in ranges:
                hit |= (offsets >= start) & (offsets < end)
            hit &= units["size"] != BLANK_UNIT_SIZE
            positions = (np.flatnonzero(hit) * CQ_STORE_UNIT_SIZE).tolist()
            del units, offsets  # no buffer export may outlive this (the map closes later)
            for pos in positions:
                mf.buffer[pos : pos + CQ_STORE_UNIT_SIZE] = _BLANK_UNIT
                log.error(
                    "%s-%d: queue offset %d pointed at a damaged record; now a blank unit",
                    self.topic,
                    self.queue_id,
                    (mf.file_from_offset + pos) // CQ_STORE_UNIT_SIZE,
                )
            blanked += len(positions)
        return blanked

    def _units_backwards(self) -> Iterator[tuple[int, int, int]]:
        """``(queue byte position, commitLogOffset, size)`` of the written units, last first."""
        for mf in reversed(self.mapped_file_queue.files):
            pos = mf.wrote_position - CQ_STORE_UNIT_SIZE
            while pos >= 0:
                offset, size, _tags = CQ_UNIT.unpack_from(mf.buffer, pos)
                yield mf.file_from_offset + pos, offset, size
                pos -= CQ_STORE_UNIT_SIZE

    def _cut(self, position: int) -> None:
        self.mapped_file_queue.truncate_dirty_files(position)
        if position < self.min_logic_offset:
            self.min_logic_offset = position

    # --- offsets ------------------------------------------------------------------------------

    @property
    def min_offset_in_queue(self) -> int:
        return self.min_logic_offset // CQ_STORE_UNIT_SIZE

    @property
    def max_offset_in_queue(self) -> int:
        """The queue offset the next message will get (= number of units incl. expired)."""
        return self.mapped_file_queue.get_max_offset() // CQ_STORE_UNIT_SIZE

    def roll_next_file(self, index: int) -> int:
        units_per_file = self.mapped_file_size // CQ_STORE_UNIT_SIZE
        return index + units_per_file - index % units_per_file

    def last_unit(self) -> tuple[int, int, int] | None:
        """The last valid non-blank unit ``(offset, size, tags)`` or None."""
        mfq = self.mapped_file_queue
        for mf in reversed(mfq.files):
            pos = mf.wrote_position - CQ_STORE_UNIT_SIZE
            while pos >= 0:
                offset, size, tags = CQ_UNIT.unpack_from(mf.buffer, pos)
                if size != BLANK_UNIT_SIZE and is_valid_unit(offset, size):
                    return offset, size, tags
                pos -= CQ_STORE_UNIT_SIZE
        return None

    def correct_min_offset(self, phy_min_offset: int) -> None:
        """min_logic_offset = first unit pointing at or beyond the CommitLog's first byte."""
        first = self.mapped_file_queue.get_first_mapped_file()
        if first is None:
            return
        sel = first.select_mapped_buffer(0)
        if sel is None:
            self.min_logic_offset = max(self.min_logic_offset, first.file_from_offset)
            return
        try:
            for pos, offset, size, _tags in iter_units(sel.buffer):
                if size != BLANK_UNIT_SIZE and offset >= phy_min_offset:
                    self.min_logic_offset = first.file_from_offset + pos
                    return
            self.min_logic_offset = first.file_from_offset + sel.size
        finally:
            sel.release()

    # --- writing -----------------------------------------------------------------------------

    def put_message_position_info(
        self, offset: int, size: int, tags_code: int, cq_offset: int
    ) -> bool:
        """Append the unit for queue offset ``cq_offset``; True if it is (now) present.

        Already present (a re-dispatch) -> no write. Ahead of the queue end -> blank units fill
        the gap first so unit index and queue offset stay equal.
        """
        if offset + size <= self.max_physic_offset:
            return True
        mfq = self.mapped_file_queue
        expect = cq_offset * CQ_STORE_UNIT_SIZE
        last = mfq.get_last_mapped_file()
        if (
            last is not None
            and last.file_from_offset + last.wrote_position == expect
            and last.wrote_position + CQ_STORE_UNIT_SIZE <= last.reserved
        ):
            # The common case: the next unit of the current file, its blocks reserved.
            CQ_UNIT.pack_into(last.buffer, last.wrote_position, offset, size, tags_code)
            last.wrote_position += CQ_STORE_UNIT_SIZE
            self.max_physic_offset = offset + size
            return True
        if mfq.is_empty():
            mf = mfq.get_or_create_last_mapped_file(expect)
            if expect > mf.file_from_offset:
                self._fill_blank(mf, expect - mf.file_from_offset)
            self.min_logic_offset = expect
        current = mfq.get_max_offset()
        if expect < current:
            log.debug("%s-%d: unit %d already present", self.topic, self.queue_id, cq_offset)
            self.max_physic_offset = max(self.max_physic_offset, offset + size)
            return True
        if expect - current > max(MAX_OFFSET_GAP_UNITS * CQ_STORE_UNIT_SIZE, self.mapped_file_size):
            # Queue offsets of one queue are consecutive in the CommitLog: a jump this large is
            # a damaged QUEUEOFFSET, and filling it would write blank units without end.
            log.error(
                "%s-%d: record at CommitLog offset %d claims queue offset %d but the queue ends "
                "at %d; not indexed (damaged header)",
                self.topic,
                self.queue_id,
                offset,
                cq_offset,
                current // CQ_STORE_UNIT_SIZE,
            )
            return False
        if expect > current:
            log.warning(
                "%s-%d: queue offset gap %d..%d filled with blank units",
                self.topic,
                self.queue_id,
                current // CQ_STORE_UNIT_SIZE,
                cq_offset,
            )
            while current < expect:
                mf = mfq.get_or_create_last_mapped_file(current)
                n = min(expect - current, mf.free_space)
                self._fill_blank(mf, n)
                current += n
        mf = mfq.get_or_create_last_mapped_file(expect)
        mf.ensure_reserved(mf.wrote_position + CQ_STORE_UNIT_SIZE)  # DiskFullError: nothing written
        CQ_UNIT.pack_into(mf.buffer, mf.wrote_position, offset, size, tags_code)
        mf.advance(CQ_STORE_UNIT_SIZE)
        self.max_physic_offset = offset + size
        return True

    def put_units(
        self,
        offsets: Sequence[int] | np.ndarray,
        sizes: Sequence[int] | np.ndarray,
        tags_codes: Sequence[int] | np.ndarray,
        first_cq_offset: int,
    ) -> None:
        """``put_message_position_info`` for units of consecutive queue offsets from
        ``first_cq_offset`` (CommitLog order). The usual case, a run that continues the current
        file and fits in it, is one copy; anything else goes unit by unit."""
        n = len(offsets)
        last = self.mapped_file_queue.get_last_mapped_file()
        if (
            n >= VECTOR_MIN_UNITS
            and last is not None
            and offsets[0] + sizes[0] > self.max_physic_offset
            and last.file_from_offset + last.wrote_position == first_cq_offset * CQ_STORE_UNIT_SIZE
            and last.wrote_position + n * CQ_STORE_UNIT_SIZE <= last.file_size
        ):
            last.ensure_reserved(last.wrote_position + n * CQ_STORE_UNIT_SIZE)
            units = np.empty(n, UNIT_DTYPE)
            units["offset"] = offsets
            units["size"] = sizes
            units["tags"] = tags_codes
            pos = last.wrote_position
            last.buffer[pos : pos + n * CQ_STORE_UNIT_SIZE] = units.tobytes()
            last.wrote_position = pos + n * CQ_STORE_UNIT_SIZE
            self.max_physic_offset = int(offsets[-1]) + int(sizes[-1])
            return
        put = self.put_message_position_info
        for i, (offset, size, tags) in enumerate(
            zip(_ints(offsets), _ints(sizes), _ints(tags_codes), strict=True)
        ):
            put(offset, size, tags, first_cq_offset + i)

    @staticmethod
    def _fill_blank(mf: MappedFile, nbytes: int) -> None:
        pos = mf.wrote_position
        mf.ensure_reserved(pos + nbytes)
        for p in range(pos, pos + nbytes, CQ_STORE_UNIT_SIZE):
            mf.buffer[p : p + CQ_STORE_UNIT_SIZE] = _BLANK_UNIT
        mf.advance(nbytes)

    # --- reading -----------------------------------------------------------------------------

    def get_index_buffer(self, start_index: int) -> SelectMappedBufferResult | None:
        """Units from ``start_index`` to the end of its file (None if expired or beyond)."""
        offset = start_index * CQ_STORE_UNIT_SIZE
        if offset < self.min_logic_offset:
            return None
        mf = self.mapped_file_queue.find_mapped_file_by_offset(offset)
        if mf is None:
            return None
        return mf.select_mapped_buffer(offset % self.mapped_file_size)

    def get_unit(self, index: int) -> tuple[int, int, int] | None:
        sel = self.get_index_buffer(index)
        if sel is None:
            return None
        try:
            if sel.size < CQ_STORE_UNIT_SIZE:
                return None
            offset, size, tags = CQ_UNIT.unpack_from(sel.buffer, 0)
            return int(offset), int(size), int(tags)
        finally:
            sel.release()

    def get_offset_in_queue_by_time(
        self, timestamp_ms: int, store_time_of: Callable[[int, int], int]
    ) -> int:
        """The first queue offset whose message was stored at or after ``timestamp_ms``
        (upstream binary search; the nearest offset when no exact match)."""
        mf = self.mapped_file_queue.find_mapped_file_by_time(timestamp_ms)
        if mf is None:
            return 0
        sel = mf.select_mapped_buffer(0)
        if sel is None:
            return self.max_offset_in_queue
        try:
            units = [
                (pos, off, size)
                for pos, off, size, _t in iter_units(sel.buffer)
                if size != BLANK_UNIT_SIZE and mf.file_from_offset + pos >= self.min_logic_offset
            ]
            if not units:
                return self.max_offset_in_queue
            lo, hi = 0, len(units) - 1
            found = -1
            while lo <= hi:
                mid = (lo + hi) // 2
                _pos, off, size = units[mid]
                ts = store_time_of(off, size)
                if ts < 0:
                    lo = mid + 1  # unreadable (expired) message: look later
                elif ts >= timestamp_ms:
                    found = mid
                    hi = mid - 1
                else:
                    lo = mid + 1
            # When everything in the file is older: the offset after its last unit.
            pos = units[-1][0] + CQ_STORE_UNIT_SIZE if found < 0 else units[found][0]
            return (mf.file_from_offset + pos) // CQ_STORE_UNIT_SIZE
        finally:
            sel.release()

    # --- truncation and expiry -------------------------------------------------------------

    def truncate_dirty_logic_files(self, phy_offset: int) -> None:
        """Remove trailing units that point at or beyond ``phy_offset`` (a cut CommitLog)."""
        mfq = self.mapped_file_queue
        while True:
            last = mfq.get_last_mapped_file()
            if last is None:
                self.max_physic_offset = -1
                return
            pos = last.wrote_position
            new_max = -1
            while pos >= CQ_STORE_UNIT_SIZE:
                offset, size, _t = CQ_UNIT.unpack_from(last.buffer, pos - CQ_STORE_UNIT_SIZE)
                if size == BLANK_UNIT_SIZE:
                    break  # fillers keep queue offsets aligned: never cut them
                if offset + size > phy_offset:
                    pos -= CQ_STORE_UNIT_SIZE
                    continue
                new_max = offset + size
                break
            if pos > 0 or mfq.get_first_mapped_file() is last:
                cut = last.file_from_offset + pos
                mfq.truncate_dirty_files(cut)
                if new_max < 0:
                    prev = self.last_unit()
                    new_max = prev[0] + prev[1] if prev else -1
                self.max_physic_offset = new_max
                if cut < self.min_logic_offset:
                    self.min_logic_offset = cut
                return
            mfq.delete_last_mapped_file()

    def delete_expired_files(self, commit_log_min_offset: int) -> int:
        """Delete leading files whose last unit points before the CommitLog's first byte."""

        def keep(mf: MappedFile) -> bool:
            pos = mf.wrote_position - CQ_STORE_UNIT_SIZE
            if pos < 0:
                return True
            offset, size, _t = CQ_UNIT.unpack_from(mf.buffer, pos)
            return bool(size == BLANK_UNIT_SIZE or offset >= commit_log_min_offset)

        deleted = self.mapped_file_queue.delete_files_before(keep)
        self.correct_min_offset(commit_log_min_offset)
        return deleted

    def flush(self, least_pages: int) -> bool:
        return self.mapped_file_queue.flush(least_pages)

    def destroy(self) -> None:
        self.max_physic_offset = -1
        self.min_logic_offset = 0
        self.mapped_file_queue.destroy()


def _ints(values: Sequence[int] | np.ndarray) -> Sequence[int]:
    """Python ints of a column (numpy's scalars would leak into the queue's own fields)."""
    if isinstance(values, np.ndarray):
        out: list[int] = values.tolist()
        return out
    return values
