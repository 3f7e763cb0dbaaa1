"""Start-up recovery decisions and the CommitLog scan (upstream ``CommitLog.recoverNormally`` /
``recoverAbnormally``, folded into one scan with two start rules).

- Normal exit (no abort file): scan from the third-last file.
- Abnormal exit: walk back from the last file to the first whose first record is intact and was
  stored no later than the checkpoint's trusted time; scan from there.

The scan validates every record (magic, lengths, CRC, and that PHYSICALOFFSET equals its
position, which rejects stale bytes from an older timeline). Upstream cuts the log at the first
record that fails; here a failing record is skipped when a valid record follows it (found by
:func:`resync`, in the same file or a later one) and only a failing record with nothing valid
after it (a torn tail) ends the data: one damaged record never costs the records after it. The
skipped ranges are returned for the caller to log, count and keep out of the ConsumeQueues.
Where dispatch resumes is a separate pure decision (:func:`choose_reput_offset`): it closes the
digest's RC4 gap by never starting after what the ConsumeQueues and index actually hold.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from ferrymq.message import MessageSysFlag
from ferrymq.store import record as rec
from ferrymq.store.mapped_file import MappedFile
from ferrymq.store.record_layout import HEAD_V4

log = logging.getLogger(__name__)


@dataclass(slots=True)
class ScanResult:
    end_offset: int  # first byte after the last valid record
    last_store_timestamp: int
    messages: int
    stop_reason: str
    # First record stored after the ``after_ms`` given to the scan (end_offset when none): data
    # from there on is newer than what the checkpoint vouches for.
    first_after: int = -1
    # ``[start, end)`` CommitLog ranges skipped as damaged (valid records follow each of them).
    damaged: list[tuple[int, int]] = field(default_factory=list)
    damaged_reasons: list[str] = field(default_factory=list)


def normal_start_index(file_count: int) -> int:
    """Normal recovery scans the last three files (RC2)."""
    return max(0, file_count - 3)


def first_record_timestamp(mf: MappedFile) -> int:
    """STORETIMESTAMP of a file's first record, or 0 when the file does not start with one."""
    view = memoryview(mf.buffer)
    try:
        check = rec.check_record(view, 0, mf.file_size, check_crc=True)
    finally:
        view.release()
    if check.kind is not rec.RecordKind.MESSAGE or check.record is None:
        return 0
    if check.record.physical_offset != mf.file_from_offset:
        return 0
    return check.record.store_timestamp


def abnormal_start_index(files: list[MappedFile], checkpoint_min_ms: int) -> int:
    """The last file whose first record is intact, non-zero-timed and not newer than the
    checkpoint (RC3); the first file when none qualifies."""
    for index in range(len(files) - 1, -1, -1):
        ts = first_record_timestamp(files[index])
        if ts != 0 and ts <= checkpoint_min_ms:
            return index
    return 0


class QueueEndCheck:
    """Fed every valid record of the scan: notes the first record whose queue offset is at or
    beyond what its ConsumeQueue holds (``ends``: ``(topic bytes, queue id)`` -> next queue
    offset; a queue missing from it holds nothing). Dispatch from there rebuilds what a queue
    lost (a deleted or cut file), so the next send never gets an offset already assigned."""

    # MAGICCODE, QUEUEID, QUEUEOFFSET, SYSFLAG and BODYLEN of an IPv4-host head
    _FIELDS = HEAD_V4.struct_of(keep=("MAGICCODE", "QUEUEID", "QUEUEOFFSET", "SYSFLAG", "BODYLEN"))

    def __init__(self, ends: dict[tuple[bytes, int], int]) -> None:
        self.ends = ends
        self.rebuild_from = -1
        # queue -> CommitLog offset of its first record the queue does not hold
        self.short: dict[tuple[bytes, int], int] = {}

    def see(self, view: memoryview, pos: int, phy: int) -> None:
        magic, queue_id, queue_offset, sys_flag, body_len = self._FIELDS.unpack_from(view, pos)
        if sys_flag & _NO_QUEUE_SLOT:
            return  # prepared / rolled back: no queue offset
        if magic == rec.MESSAGE_MAGIC_CODE and not sys_flag & rec.HOST_V6_FLAGS:
            tpos = pos + rec.BODY_POS + body_len
            topic_pos, topic_len = tpos + 1, view[tpos]
        else:
            topic_pos, topic_len = rec.topic_span(view, pos)
        key = (bytes(view[topic_pos : topic_pos + topic_len]), queue_id)
        if queue_offset >= self.ends.get(key, 0) and key not in self.short:
            if self.rebuild_from < 0:
                self.rebuild_from = phy
            self.short[key] = phy


_NO_QUEUE_SLOT = MessageSysFlag.TRANSACTION_PREPARED_TYPE  # rollback shares this bit


def scan_valid_end(
    files: list[MappedFile],
    start_index: int,
    check_crc: bool,
    after_ms: int = 2**62,
    queue_check: QueueEndCheck | None = None,
) -> ScanResult:
    """Walk records from ``files[start_index]`` and return where valid data ends. Never raises
    on bad bytes: anything that does not parse ends the scan."""
    if not files:
        return ScanResult(0, 0, 0, "no files", 0)
    result = _scan(files, start_index, check_crc, after_ms, queue_check)
    if result.first_after < 0:
        result.first_after = result.end_offset
    return result


def resync(files: list[MappedFile], index: int, pos: int) -> tuple[int, int] | None:
    """Where valid data resumes after a damaged record at ``files[index]`` + ``pos``:
    ``(file index, position)`` of the next valid record (or a file-ending blank), in this file
    or a later one; None when nothing valid follows (a torn tail)."""
    mf = files[index]
    found = rec.find_next_valid(mf.buffer, pos + 1, mf.file_size, mf.file_from_offset)
    if found >= 0:
        return index, found
    for later in range(index + 1, len(files)):
        nf = files[later]
        found = rec.find_next_valid(nf.buffer, 0, nf.file_size, nf.file_from_offset)
        if found >= 0:
            return later, found
    return None


def _scan(
    files: list[MappedFile],
    start_index: int,
    check_crc: bool,
    after_ms: int,
    queue_check: QueueEndCheck | None,
) -> ScanResult:
    last_ts = 0
    count = 0
    first_after = -1
    damaged: list[tuple[int, int]] = []
    reasons: list[str] = []
    index = start_index
    pos = 0
    base = files[start_index].file_from_offset
    size = files[start_index].file_size
    while index < len(files):
        mf = files[index]
        if mf.file_from_offset != base + (index - start_index) * size:
            return ScanResult(
                mf.file_from_offset,
                last_ts,
                count,
                f"file {mf.path.name} does not follow on",
                first_after,
                damaged,
                reasons,
            )
        view = memoryview(mf.buffer)
        try:
            next_file = False
            while True:
                kind, rsize, phy, store_ts = rec.validate_record(view, pos, size, check_crc)
                if kind is rec.RecordKind.MESSAGE and phy == mf.file_from_offset + pos:
                    if first_after < 0 and store_ts > after_ms:
                        first_after = mf.file_from_offset + pos
                    last_ts = store_ts
                    count += 1
                    if queue_check is not None:
                        queue_check.see(view, pos, phy)
                    pos += rsize
                    continue
                if kind is rec.RecordKind.BLANK and pos + rsize == size:
                    next_file = True
                    break
                if kind is rec.RecordKind.END and index == len(files) - 1:
                    # Zero bytes in the last file: where the data ends.
                    return ScanResult(
                        mf.file_from_offset + pos,
                        last_ts,
                        count,
                        rec.check_record(view, pos, size).reason or kind.value,
                        first_after,
                        damaged,
                        reasons,
                    )
                if kind is rec.RecordKind.MESSAGE:
                    reason = "PHYSICALOFFSET does not match the position (stale bytes)"
                else:
                    detail = rec.check_record(view, pos, size, check_crc=check_crc)
                    reason = detail.reason or kind.value
                bad = mf.file_from_offset + pos
                found = resync(files, index, pos)
                if found is None:
                    # Nothing valid follows: a torn tail, cut here.
                    return ScanResult(bad, last_ts, count, reason, first_after, damaged, reasons)
                later, pos = found
                damaged.append((bad, files[later].file_from_offset + pos))
                reasons.append(reason)
                if later != index:
                    index = later
                    break
        finally:
            view.release()
        if next_file:
            index += 1
            pos = 0
    end = files[-1].file_from_offset + size
    return ScanResult(end, last_ts, count, "end of the last file", first_after, damaged, reasons)


def choose_reput_offset(
    commit_log_min: int,
    commit_log_end: int,
    cq_max_physic_offset: int,
    index_end_phy_offset: int | None,
    abnormal_scan_start: int | None,
) -> int:
    """Where dispatch resumes after start-up.

    - the ConsumeQueues' highest indexed end (RC4: dispatch ran in CommitLog order, so all
      before it was dispatched; a crash between append and dispatch leaves the rest to redo);
    - no further than the index's last entry when the index is on (it may lag the queues);
    - no further than the first record newer than the checkpoint's trusted time after a crash
      (queues flushed at different moments may each miss a different tail);
    clamped to the CommitLog's ``[min, end]``. Dispatchers skip what they already hold.
    """
    candidates = [cq_max_physic_offset if cq_max_physic_offset >= 0 else commit_log_min]
    if index_end_phy_offset is not None:
        # end_phy_offset is the start of the last indexed record: redo from there.
        candidates.append(index_end_phy_offset if index_end_phy_offset >= 0 else commit_log_min)
    if abnormal_scan_start is not None:
        candidates.append(abnormal_scan_start)
    offset = min(candidates)
    return max(commit_log_min, min(offset, commit_log_end))
