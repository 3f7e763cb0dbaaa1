"""The pull read path (upstream ``DefaultMessageStore.getMessage``): which status an offset
gets, and the walk over ConsumeQueue units that collects raw CommitLog slices.

:func:`offset_status` is pure; :func:`read_queue` reads mapped files but never copies a record:
it hands back memoryviews held until ``GetMessageResult.release()``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

from ferrymq.store import record as rec
from ferrymq.store.commit_log import CommitLog
from ferrymq.store.consume_queue import BLANK_UNIT_SIZE, CQ_STORE_UNIT_SIZE, CQ_UNIT, ConsumeQueue
from ferrymq.store.mapped_file import SelectMappedBufferResult
from ferrymq.store.record_layout import HEAD_V4
from ferrymq.store.results import GetMessageResult, GetMessageStatus

log = logging.getLogger(__name__)


class MessageFilter(Protocol):
    """Tag / SQL92 filters implement this (upstream ``MessageFilter``)."""

    def is_matched_by_consume_queue(self, tags_code: int) -> bool: ...

    def is_matched_by_commit_log(
        self, record_buffer: memoryview, properties: dict[str, str] | None
    ) -> bool: ...


@dataclass(slots=True, frozen=True)
class PullLimits:
    max_bytes: int  # maxTransferBytesOnMessageInMemory
    max_count: int  # maxTransferCountOnMessageInMemory
    memory_budget: int  # bytes behind the tail beyond which a slave should serve the pull


def offset_status(
    offset: int, min_offset: int, max_offset: int, *, correct: bool = True
) -> tuple[GetMessageStatus, int] | None:
    """``(status, nextBeginOffset)`` for an offset that cannot be read, None when it can.

    ``correct=False`` (a SLAVE without offsetCheckInSlave, upstream ``nextOffsetCorrection``):
    the next offset stays the one asked for; a slave's queue may just be behind the master's,
    and moving a consumer to its end (or to 0) would make it skip or re-read messages."""
    if max_offset == 0:
        status, next_begin = GetMessageStatus.NO_MESSAGE_IN_QUEUE, 0
    elif offset < min_offset:
        status, next_begin = GetMessageStatus.OFFSET_TOO_SMALL, min_offset
    elif offset == max_offset:
        return GetMessageStatus.OFFSET_OVERFLOW_ONE, offset
    elif offset > max_offset:
        # Upstream: back to the start of an intact queue, else to its end.
        status = GetMessageStatus.OFFSET_OVERFLOW_BADLY
        next_begin = min_offset if min_offset == 0 else max_offset
    else:
        return None
    return status, next_begin if correct else offset


def _record_properties(view: memoryview) -> dict[str, str]:
    check = rec.check_record(view, 0, len(view), check_crc=False)
    return check.record.properties if check.record is not None else {}


# TOTALSIZE, MAGICCODE, BODYCRC, QUEUEID, QUEUEOFFSET, PHYSICALOFFSET, SYSFLAG, BODYLEN of an
# IPv4-host head (the other fields skipped)
_SERVE_HEAD = HEAD_V4.struct_of(
    keep=(
        "TOTALSIZE", "MAGICCODE", "BODYCRC", "QUEUEID", "QUEUEOFFSET", "PHYSICALOFFSET",
        "SYSFLAG", "BODYLEN",
    )
)  # fmt: skip
_MAGIC = rec.MESSAGE_MAGIC_CODE
_V6_FLAGS = rec.HOST_V6_FLAGS
_BODY_POS = rec.BODY_POS
_crc32 = rec.crc32
_damaged_reported: set[int] = set()


def _intact(
    view: memoryview, size: int, phy: int, topic: bytes, queue_id: int, queue_offset: int
) -> bool:
    """Whether the record a unit points at is the one it should be, undamaged: size, magic,
    its own position, topic, queue and queue offset, lengths that add up, the body CRC and
    properties a client can decode (one struct read, one CRC and one decode per record)."""
    if size < rec.MIN_RECORD_SIZE:
        return False
    total, magic, crc, qid, qoff, phy_field, sys_flag, body_len = _SERVE_HEAD.unpack_from(view, 0)
    if magic != _MAGIC or sys_flag & _V6_FLAGS:
        return _intact_general(view, size, phy, topic, queue_id, queue_offset)
    if not (
        total == size
        and phy_field == phy
        and qid == queue_id
        and qoff == queue_offset
        and 0 <= body_len <= size - rec.MIN_RECORD_SIZE
    ):
        return False
    tpos = _BODY_POS + body_len
    ppos = tpos + 1 + len(topic)
    if view[tpos] != len(topic) or view[tpos + 1 : ppos] != topic or ppos + 2 > size:
        return False
    if ppos + 2 + ((view[ppos] << 8) | view[ppos + 1]) != size:
        return False
    if _crc32(view[_BODY_POS:tpos]) & 0x7FFFFFFF != crc:
        return False
    try:
        str(view[ppos + 2 : size], "utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _intact_general(
    view: memoryview, size: int, phy: int, topic: bytes, queue_id: int, queue_offset: int
) -> bool:
    """:func:`_intact` for the layouts its inline path leaves out (an IPv6 host, magic v2)."""
    check = rec.check_record(view, 0, size, check_crc=True)
    r = check.record
    return (
        r is not None
        and r.size == size
        and r.physical_offset == phy
        and r.queue_id == queue_id
        and r.queue_offset == queue_offset
        and r.topic.encode("utf-8") == topic
    )


def _later_unit_within(cq: ConsumeQueue, index: int, max_phy: int) -> bool:
    """Whether the next non-blank unit from queue offset ``index`` (in this file or a later
    one) points inside the CommitLog."""
    for i in range(index, cq.max_offset_in_queue):
        unit = cq.get_unit(i)
        if unit is None:
            return False
        phy, size, _tags = unit
        if size != BLANK_UNIT_SIZE:
            return bool(phy >= 0 and size > 0 and phy + size <= max_phy)
    return False


def _report_damaged(cq: ConsumeQueue, queue_offset: int, phy: int, size: int) -> None:
    if phy in _damaged_reported:
        return
    if len(_damaged_reported) > 4096:
        _damaged_reported.clear()
    _damaged_reported.add(phy)
    log.error(
        "%s-%d: queue offset %d points at a damaged or foreign record (CommitLog %d, %d "
        "bytes); not served",
        cq.topic,
        cq.queue_id,
        queue_offset,
        phy,
        size,
    )


def read_queue(
    cq: ConsumeQueue,
    commit_log: CommitLog,
    offset: int,
    max_msg_nums: int,
    message_filter: MessageFilter | None,
    limits: PullLimits,
) -> GetMessageResult:
    """Messages from ``offset`` (which :func:`offset_status` accepted)."""
    result = GetMessageResult(
        GetMessageStatus.NO_MATCHED_MESSAGE, offset, cq.min_offset_in_queue, cq.max_offset_in_queue
    )
    sel = cq.get_index_buffer(offset)
    if sel is None:
        result.status = GetMessageStatus.OFFSET_FOUND_NULL
        result.next_begin_offset = cq.roll_next_file(offset)
        return result
    max_count = max(1, min(max_msg_nums, limits.max_count))
    # How far to look past non-matching units in one pull (upstream maxFilterMessageCount).
    max_filter_bytes = max(16000, max_msg_nums * CQ_STORE_UNIT_SIZE * 20)
    next_phy_file_start = -1
    max_phy = commit_log.max_offset
    last_phy_pulled = 0
    pos = 0
    messages = result.messages
    queue_offsets = result.queue_offsets
    # One held slice of a CommitLog file, from the first record read in it to its written end;
    # each record is a sub-view of it (one file hold per pull instead of one per record).
    span: SelectMappedBufferResult | None = None
    span_start = span_end = 0
    select = commit_log.mapped_file_queue.select
    topic = cq.topic.encode("utf-8")
    try:
        buf = sel.buffer
        limit = min(sel.size, max_filter_bytes)
        while pos + CQ_STORE_UNIT_SIZE <= limit:
            phy, size, tags = CQ_UNIT.unpack_from(buf, pos)
            if size == BLANK_UNIT_SIZE:
                pos += CQ_STORE_UNIT_SIZE
                continue
            if messages and (
                len(messages) >= max_count or result.buffer_total_size + size > limits.max_bytes
            ):
                break
            if phy + size > max_phy:
                if not _later_unit_within(cq, offset + pos // CQ_STORE_UNIT_SIZE + 1, max_phy):
                    break  # dispatched ahead of a cut CommitLog; never serve it
                # A later unit is within the CommitLog: this one is damaged (offsets only grow
                # along a queue). Passed over, or the queue would stop here for good.
                _report_damaged(cq, offset + pos // CQ_STORE_UNIT_SIZE, phy, size)
                pos += CQ_STORE_UNIT_SIZE
                continue
            if next_phy_file_start >= 0 and phy < next_phy_file_start:
                pos += CQ_STORE_UNIT_SIZE
                continue
            if message_filter is not None and not message_filter.is_matched_by_consume_queue(tags):
                pos += CQ_STORE_UNIT_SIZE
                continue
            if span is None or phy < span_start or phy + size > span_end:
                span = select(phy)
                if span is not None and span.size < size:
                    # The file is there but the record would run past its data: a damaged
                    # unit (records never cross files). Only this unit is passed over.
                    span.release()
                    span = None
                    _report_damaged(cq, offset + pos // CQ_STORE_UNIT_SIZE, phy, size)
                    pos += CQ_STORE_UNIT_SIZE
                    continue
                if span is None:
                    if not messages:
                        result.status = GetMessageStatus.MESSAGE_WAS_REMOVING
                    next_phy_file_start = commit_log.roll_next_file(phy)
                    pos += CQ_STORE_UNIT_SIZE
                    continue
                result._releasers.append(span.release)
                span_start = span.start_offset
                span_end = span_start + span.size
            view = span.buffer[phy - span_start : phy - span_start + size]
            queue_offset = offset + pos // CQ_STORE_UNIT_SIZE
            if not _intact(view, size, phy, topic, cq.queue_id, queue_offset):
                # Never serve a damaged record: the unit is passed over like a filtered one.
                view.release()
                _report_damaged(cq, queue_offset, phy, size)
                pos += CQ_STORE_UNIT_SIZE
                continue
            if message_filter is not None and not message_filter.is_matched_by_commit_log(
                view, _record_properties(view)
            ):
                view.release()
                pos += CQ_STORE_UNIT_SIZE
                continue
            messages.append(view)
            queue_offsets.append(queue_offset)
            result.buffer_total_size += size
            last_phy_pulled = phy
            result.status = GetMessageStatus.FOUND
            next_phy_file_start = -1
            pos += CQ_STORE_UNIT_SIZE
    finally:
        sel.release()
    result.next_begin_offset = offset + pos // CQ_STORE_UNIT_SIZE
    if result.messages:
        # Upstream: a consumer this far behind reads from disk; let a slave serve it.
        result.suggest_pulling_from_slave = max_phy - last_phy_pulled > limits.memory_budget
    return result
