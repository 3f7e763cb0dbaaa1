"""From CommitLog to ConsumeQueue and IndexFile (upstream ``DispatchRequest``,
``CommitLogDispatcher`` and ``ReputMessageService``).

The reput task follows the CommitLog tail from ``reput_from_offset``: it parses each new record
once, hands a :class:`DispatchRequest` to every dispatcher (ConsumeQueue builder, index builder),
then calls the dispatch listeners (pull long polling). Runs of same-shaped records (a batch, a
busy producer) are parsed and dispatched as columns instead (:mod:`dispatch_columns`), with the
same result. It is woken by each append rather than polling every millisecond. Dispatchers are
idempotent, so recovery can restart it from any earlier offset.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol, overload

import numpy as np

from ferrymq.message import (
    MessageConst,
    MessageSysFlag,
    decode_properties,
    property_value,
    tags_string_to_tags_code,
)
from ferrymq.store import record as rec
from ferrymq.store.commit_log import CommitLog, takes_queue_offset
from ferrymq.store.consume_queue_store import ConsumeQueueStore
from ferrymq.store.dispatch_columns import DispatchColumns, parse_columns
from ferrymq.store.index_service import IndexService
from ferrymq.store.mapped_file import DiskFullError, SelectMappedBufferResult
from ferrymq.topic_validator import SCHEDULE_TOPIC

log = logging.getLogger(__name__)

DispatchListener = Callable[[str, int, int, int, int, dict[str, str]], None]
"""``cb(topic, queue_id, logic_offset, tags_code, store_timestamp, properties)``."""


@dataclass(slots=True)
class DispatchRequest:
    topic: str
    queue_id: int
    commit_log_offset: int
    msg_size: int
    tags_code: int
    store_timestamp: int
    consume_queue_offset: int
    keys: list[str]
    uniq_key: str | None
    sys_flag: int
    prepared_transaction_offset: int
    properties_text: str = ""  # as stored; decoded only when asked for

    @property
    def properties(self) -> dict[str, str]:
        return decode_properties(self.properties_text)


RoundPart = list[DispatchRequest] | DispatchColumns
"""A piece of one reput round: requests from the scalar parser, or a columnar run."""


def requests_of(columns: DispatchColumns) -> list[DispatchRequest]:
    """The requests the scalar parser would have made of a columnar run's records."""
    texts = [row.tobytes().decode("ascii") for row in columns.properties]
    span = columns.uniq_key_span
    uniq: list[str | None] = [t[span[0] : span[1]] for t in texts] if span else [None] * len(texts)
    topic = columns.topic
    return [
        DispatchRequest(topic, q, phy, size, tags, ts, cq, [], u, flag, prepared, text)
        for q, phy, size, tags, ts, cq, u, flag, prepared, text in zip(
            columns.queue_id.tolist(),
            columns.commit_log_offset.tolist(),
            columns.msg_size.tolist(),
            columns.tags_code.tolist(),
            columns.store_timestamp.tolist(),
            columns.consume_queue_offset.tolist(),
            uniq,
            columns.sys_flag.tolist(),
            columns.prepared_transaction_offset.tolist(),
            texts,
            strict=True,
        )
    ]


class RoundRecords(Sequence[DispatchRequest]):
    """The records of one reput round that entered their ConsumeQueue (CommitLog order;
    prepared and rolled-back transaction records left out), as round listeners see them. A
    columnar run becomes requests only when a listener reads its records."""

    __slots__ = ("_flat", "_parts")

    def __init__(self, parts: Sequence[RoundPart]) -> None:
        self._parts = [p for p in map(_arriving, parts) if len(p)]
        self._flat: list[DispatchRequest] | None = None

    def topics(self) -> set[str]:
        """The topics of the round's records (without making requests of columnar runs)."""
        out: set[str] = set()
        for part in self._parts:
            if isinstance(part, DispatchColumns):
                out.add(part.topic)
            else:
                out.update(r.topic for r in part)
        return out

    def topic_totals(self) -> dict[str, tuple[int, int]]:
        """``topic -> (records, record bytes)`` of the round (a columnar run costs one sum);
        what the broker's messages/throughput-in metrics add up."""
        out: dict[str, tuple[int, int]] = {}
        for part in self._parts:
            if isinstance(part, DispatchColumns):
                n, size = out.get(part.topic, (0, 0))
                out[part.topic] = (n + len(part), size + int(part.msg_size.sum()))
            else:
                for r in part:
                    n, size = out.get(r.topic, (0, 0))
                    out[r.topic] = (n + 1, size + r.msg_size)
        return out

    def arrivals(self) -> Iterator[tuple[str, int, int, int]]:
        """``(topic, queue_id, consume_queue_offset, tags_code)`` of each record: what waking
        held pulls needs, read from a columnar run without making its requests."""
        for part in self._parts:
            if isinstance(part, DispatchColumns):
                topic = part.topic
                for queue_id, offset, tags_code in zip(
                    part.queue_id.tolist(),
                    part.consume_queue_offset.tolist(),
                    part.tags_code.tolist(),
                    strict=True,
                ):
                    yield topic, queue_id, offset, tags_code
            else:
                for r in part:
                    yield r.topic, r.queue_id, r.consume_queue_offset, r.tags_code

    def __len__(self) -> int:
        return sum(map(len, self._parts))

    def __iter__(self) -> Iterator[DispatchRequest]:
        if self._flat is not None:
            return iter(self._flat)
        return itertools.chain.from_iterable(
            requests_of(p) if isinstance(p, DispatchColumns) else p for p in self._parts
        )

    @overload
    def __getitem__(self, index: int) -> DispatchRequest: ...
    @overload
    def __getitem__(self, index: slice) -> list[DispatchRequest]: ...
    def __getitem__(self, index: int | slice) -> DispatchRequest | list[DispatchRequest]:
        if self._flat is None:
            self._flat = list(self)
        return self._flat[index]


def _arriving(part: RoundPart) -> RoundPart:
    if isinstance(part, DispatchColumns):
        tran = part.sys_flag & _TRAN_BITS
        keep = (tran == _NOT_TYPE) | (tran == _COMMIT_TYPE)
        return part if keep.all() else part.select(keep)
    return [r for r in part if (r.sys_flag & _TRAN_BITS) in _ARRIVING]


DispatchRoundListener = Callable[[RoundRecords], None]
"""``cb(records)``: the records of one reput round that entered their ConsumeQueue. One call
per round, so a listener that only needs "something arrived" pays once per round instead of
once per record."""


class CommitLogDispatcher(Protocol):
    def dispatch(self, request: DispatchRequest) -> None: ...

    def dispatch_many(self, requests: list[DispatchRequest]) -> None:
        """The records of one reput round, in CommitLog order (one call per round, not per
        record: the per-record work is the loop body only). A dispatcher may also have
        ``dispatch_columns(DispatchColumns)`` for columnar runs; without it they come here as
        requests."""
        ...


# transaction bits of sysFlag that keep a record out of its ConsumeQueue (prepared, rollback):
# ``takes_queue_offset`` inlined for the per-record loops
_TRAN_BITS = MessageSysFlag.TRANSACTION_ROLLBACK_TYPE
_NOT_TYPE = MessageSysFlag.TRANSACTION_NOT_TYPE
_COMMIT_TYPE = MessageSysFlag.TRANSACTION_COMMIT_TYPE
_ARRIVING = (_NOT_TYPE, _COMMIT_TYPE)


def compute_tags_code(
    topic: str,
    properties_text: str,
    store_timestamp: int,
    delay_levels_ms: list[int],
    tags_cache: dict[str, int] | None = None,
) -> int:
    """The ConsumeQueue tags code: Java hash of TAGS; for the delay topic, the delivery time
    (upstream: the schedule service scans its queues by this value)."""
    if topic == SCHEDULE_TOPIC:
        raw = property_value(properties_text, MessageConst.PROPERTY_DELAY_TIME_LEVEL)
        if raw and raw.isdigit() and int(raw) > 0 and delay_levels_ms:
            level = min(int(raw), len(delay_levels_ms))
            return store_timestamp + delay_levels_ms[level - 1]
    tags = property_value(properties_text, MessageConst.PROPERTY_TAGS)
    if not tags:
        return 0
    if tags_cache is None:
        return tags_string_to_tags_code(tags)
    # A broker sees few distinct tags; hashing each once saves a loop per message.
    code = tags_cache.get(tags)
    if code is None:
        if len(tags_cache) >= 4096:
            tags_cache.clear()
        code = tags_cache[tags] = tags_string_to_tags_code(tags)
    return code


def request_from_fields(
    fields: rec.DispatchFields,
    delay_levels_ms: list[int],
    tags_cache: dict[str, int] | None = None,
) -> DispatchRequest:
    size, queue_id, queue_offset, phy, sys_flag, store_ts, prepared, topic, props = fields
    # the `in` tests skip a call for the names most records lack (KEYS, TAGS)
    raw_keys = property_value(props, _KEYS) if _KEYS_HEAD in props else None
    if _TAGS_HEAD in props or topic == SCHEDULE_TOPIC:
        tags_code = compute_tags_code(topic, props, store_ts, delay_levels_ms, tags_cache)
    else:
        tags_code = 0
    # Positional, in field order: this runs once per dispatched message.
    return DispatchRequest(
        topic,
        queue_id,
        phy,
        size,
        tags_code,
        store_ts,
        queue_offset,
        [k for k in raw_keys.split(" ") if k] if raw_keys else [],
        property_value(props, _UNIQ_KEY),
        sys_flag,
        prepared,
        props,
    )


_KEYS = MessageConst.PROPERTY_KEYS
_KEYS_HEAD = _KEYS + "\x01"
_TAGS_HEAD = MessageConst.PROPERTY_TAGS + "\x01"
_UNIQ_KEY = MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX

_HEAD = rec.RECORD_HEAD
_HEAD_SIZE = rec.RECORD_HEAD.size
_MESSAGE_MAGIC = rec.MESSAGE_MAGIC_CODE
_BODY_POS = rec.BODY_POS
_MIN_RECORD = rec.MIN_RECORD_SIZE
_MAX_TOPIC = rec.MAX_TOPIC_BYTES
_V6_FLAGS = rec.HOST_V6_FLAGS  # records with an IPv6 host: the general parser reads them


def parse_round(
    buf: memoryview,
    pos: int,
    end: int,
    limit: int,
    delay_levels_ms: list[int],
    tags_cache: dict[str, int] | None = None,
) -> tuple[list[DispatchRequest], int, rec.RecordKind | None]:
    """Dispatch requests of the records from ``pos`` (at most ``limit``; -1 for no limit):
    ``(requests, position after them, why it stopped or None)``.

    One loop for the whole slice. A well-formed message record is read inline, with exactly the
    checks of :func:`record.parse_for_dispatch`; anything else (blank, end, torn) is handed to
    that function, which says what it is.
    """
    out: list[DispatchRequest] = []
    unpack = _HEAD.unpack_from
    while pos < end and limit != 0:
        if end - pos >= _HEAD_SIZE:
            (
                total, magic, _crc, queue_id, _flag, queue_offset, phy, sys_flag,
                _born_ts, _born_ip, _born_port, store_ts, _store_ip, _store_port, _reconsume,
                prepared, body_len,
            ) = unpack(buf, pos)  # fmt: skip
            rend = pos + total
            tpos = pos + _BODY_POS + body_len
            if (
                magic == _MESSAGE_MAGIC
                and _MIN_RECORD <= total <= end - pos
                and not sys_flag & _V6_FLAGS
                and body_len >= 0
                and tpos + 3 <= rend
            ):
                topic_len = buf[tpos]
                ppos = tpos + 1 + topic_len
                if 0 < topic_len <= _MAX_TOPIC and ppos + 2 <= rend:
                    props_len = (buf[ppos] << 8) | buf[ppos + 1]
                    if ppos + 2 + props_len == rend:
                        try:
                            topic = str(buf[tpos + 1 : ppos], "utf-8")
                            props = str(buf[ppos + 2 : rend], "utf-8") if props_len else ""
                        except UnicodeDecodeError:
                            pass
                        else:
                            out.append(
                                request_from_fields(
                                    (
                                        total, queue_id, queue_offset, phy, sys_flag, store_ts,
                                        prepared, topic, props,
                                    ),
                                    delay_levels_ms,
                                    tags_cache,
                                )
                            )  # fmt: skip
                            pos = rend
                            limit -= 1
                            continue
        kind, size, fields = rec.parse_for_dispatch(buf, pos, end)
        if fields is None:
            return out, pos, kind
        out.append(request_from_fields(fields, delay_levels_ms, tags_cache))
        pos += size
        limit -= 1
    return out, pos, None


# After a run that is not columnar, this many records go through the scalar parser before
# the columnar path is tried again (a failed try costs as much as ~20 scalar records).
_SCALAR_STRETCH = 256


def parse_parts(
    buf: memoryview,
    pos: int,
    end: int,
    limit: int,
    delay_levels_ms: list[int],
    tags_cache: dict[str, int] | None = None,
) -> tuple[list[RoundPart], int, int, rec.RecordKind | None]:
    """:func:`parse_round` with runs of same-shaped records parsed as columns
    (:mod:`dispatch_columns`): ``(parts in CommitLog order, records in them, position after
    them, why it stopped or None)``. The parts' requests equal ``parse_round``'s."""
    parts: list[RoundPart] = []
    count = 0
    while pos < end and limit != 0:
        columns = parse_columns(buf, pos, end, limit)
        if columns is not None:
            parts.append(columns)
            n, pos = len(columns), columns.end
        else:
            stretch = _SCALAR_STRETCH if limit < 0 else min(limit, _SCALAR_STRETCH)
            batch, pos, stop = parse_round(buf, pos, end, stretch, delay_levels_ms, tags_cache)
            n = len(batch)
            if n:
                parts.append(batch)
            if stop is not None or n < stretch:
                return parts, count + n, pos, stop
        count += n
        if limit > 0:
            limit -= n
    return parts, count, pos, None


class BuildConsumeQueue:
    """Dispatcher: one ConsumeQueue unit per non-transactional / committed message."""

    def __init__(self, queues: ConsumeQueueStore) -> None:
        self.queues = queues
        self.last_store_timestamp = 0

    def dispatch(self, request: DispatchRequest) -> None:
        if not takes_queue_offset(request.sys_flag):
            return
        cq = self.queues.find_or_create(request.topic, request.queue_id)
        cq.put_message_position_info(
            request.commit_log_offset,
            request.msg_size,
            request.tags_code,
            request.consume_queue_offset,
        )
        self.last_store_timestamp = request.store_timestamp

    def dispatch_many(self, requests: list[DispatchRequest]) -> None:
        # runs of one queue with consecutive offsets (a batch's messages, a busy queue's
        # appends) go to the queue together: put_units writes a long run in one copy
        run: list[DispatchRequest] = []
        stamp = 0
        for r in requests:
            tran = r.sys_flag & _TRAN_BITS
            if tran != _NOT_TYPE and tran != _COMMIT_TYPE:
                continue
            if run:
                tail = run[-1]
                if (
                    r.queue_id != tail.queue_id
                    or r.consume_queue_offset != tail.consume_queue_offset + 1
                    or r.topic != tail.topic
                ):
                    self._put_run(run)
                    run = []
            run.append(r)
            stamp = r.store_timestamp
        if run:
            self._put_run(run)
        if stamp:
            self.last_store_timestamp = stamp

    def _put_run(self, run: list[DispatchRequest]) -> None:
        first = run[0]
        cq = self.queues.find_or_create(first.topic, first.queue_id)
        if len(run) == 1:
            cq.put_message_position_info(
                first.commit_log_offset, first.msg_size, first.tags_code, first.consume_queue_offset
            )
            return
        cq.put_units(
            [r.commit_log_offset for r in run],
            [r.msg_size for r in run],
            [r.tags_code for r in run],
            first.consume_queue_offset,
        )

    def dispatch_columns(self, columns: DispatchColumns) -> None:
        tran = columns.sys_flag & _TRAN_BITS
        keep = (tran == _NOT_TYPE) | (tran == _COMMIT_TYPE)
        if not keep.all():
            columns = columns.select(keep)
        n = len(columns)
        if not n:
            return
        stamp = int(columns.store_timestamp[-1])
        queue_id, cq_offset = columns.queue_id, columns.consume_queue_offset
        offsets, sizes, tags = columns.commit_log_offset, columns.msg_size, columns.tags_code
        if (queue_id[1:] < queue_id[:-1]).any():
            # Sends spread over the queues (round robin) interleave them: grouped per queue
            # (stable, so each queue keeps CommitLog order) the runs are long enough for one
            # copy each. Queues are independent files, so only the order within one matters.
            order = np.argsort(queue_id, kind="stable")
            queue_id, cq_offset = queue_id[order], cq_offset[order]
            offsets, sizes, tags = offsets[order], sizes[order], tags[order]
        # runs of one queue with consecutive offsets, as in dispatch_many
        cuts = np.flatnonzero(
            (queue_id[1:] != queue_id[:-1]) | (cq_offset[1:] != cq_offset[:-1] + 1)
        )
        bounds = [0, *(cuts + 1).tolist(), n]
        for a, b in itertools.pairwise(bounds):
            cq = self.queues.find_or_create(columns.topic, int(queue_id[a]))
            cq.put_units(offsets[a:b], sizes[a:b], tags[a:b], int(cq_offset[a]))
        self.last_store_timestamp = stamp


class BuildIndex:
    """Dispatcher: index entries for UNIQ_KEY and KEYS."""

    def __init__(self, index: IndexService) -> None:
        self.index = index

    def dispatch(self, request: DispatchRequest) -> None:
        self.index.build_index(
            request.topic,
            request.keys,
            request.uniq_key,
            request.commit_log_offset,
            request.store_timestamp,
            request.sys_flag,
        )

    def dispatch_many(self, requests: list[DispatchRequest]) -> None:
        self.index.build_index_many(requests)

    def dispatch_columns(self, columns: DispatchColumns) -> None:
        uniq_keys = columns.uniq_keys()
        if uniq_keys is not None:  # a columnar run has no KEYS: UNIQ_KEY is its only key
            self.index.build_index_columns(
                columns.topic,
                uniq_keys,
                columns.commit_log_offset,
                columns.store_timestamp,
                columns.sys_flag,
            )


def _beyond_end_offset(sel: SelectMappedBufferResult, pos: int) -> rec.RecordKind | None:
    """What the record at ``pos`` is in all the written data of ``sel``: None for a whole
    message (dispatch waits for the end offset to pass it), BLANK (the file's filler: roll on),
    INVALID when it is damaged however far the data goes."""
    kind = rec.parse_for_dispatch(sel.buffer, pos, sel.size)[0]
    if kind is rec.RecordKind.MESSAGE or kind is rec.RecordKind.END:
        return None
    return kind


class ReputService:
    """Follows the CommitLog tail and dispatches every new record, in order."""

    def __init__(
        self,
        commit_log: CommitLog,
        dispatchers: list[CommitLogDispatcher],
        delay_levels_ms: list[int],
    ) -> None:
        self.commit_log = commit_log
        self.dispatchers = dispatchers
        self.listeners: list[DispatchListener] = []
        self.round_listeners: list[DispatchRoundListener] = []
        self.delay_levels_ms = delay_levels_ms
        self.reput_from_offset = 0
        # Upstream getReputEndOffset: records are dispatched (so readable by consumers) only up
        # to this CommitLog offset. None: up to the CommitLog end (readUnCommitted, the classic
        # broker); controller mode sets the confirm offset (MessageStore.set_confirm_offset_source).
        self.end_offset: Callable[[], int] | None = None
        self.dispatched_messages = 0
        self._tags_cache: dict[str, int] = {}
        # A wake-up is a flag plus, while the task sleeps, a future to resolve: cheaper per
        # append than an Event waited on with wait_for (a task and a timer per wait).
        self._woken = False
        self._waiter: asyncio.Future[None] | None = None
        self._stopped = False
        self._task: asyncio.Task[None] | None = None
        self._tick: asyncio.TimerHandle | None = None
        # Damaged CommitLog ranges recovery already counted: ``start -> end`` (skipped silently).
        self.skip_ranges: dict[int, int] = {}
        self.corrupt_records_skipped = 0  # damaged ranges found by dispatch itself
        self.corrupt_bytes_skipped = 0
        # Why the last round could not be dispatched (a file could not be reserved, e.g. a full
        # disk); "" while dispatch works. The round is retried from the CommitLog on the next
        # tick, so nothing is lost meanwhile.
        self.dispatch_error = ""
        self.dispatch_errors = 0
        self._stuck_at = -1  # offset of an undecodable record already logged

    def behind(self) -> int:
        """CommitLog bytes not dispatched yet (confirmed or not)."""
        return self.commit_log.max_offset - self.reput_from_offset

    def reput_end_offset(self) -> int:
        """Where dispatch stops: the CommitLog end, or the confirm offset when one is set."""
        end = self.commit_log.max_offset
        source = self.end_offset
        return end if source is None else min(end, source())

    def wakeup(self) -> None:
        self._woken = True
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    def do_reput(self, max_records: int | None = None, *, notify: bool = True) -> int:
        """Dispatch records from ``reput_from_offset`` to the CommitLog end (or ``max_records``);
        returns how many were dispatched. Synchronous; the run loop yields between rounds.

        A round parses the records of one CommitLog slice, then hands them to each dispatcher
        at once, then to the listeners (each record's ConsumeQueue unit exists before any
        listener hears of it); ``reput_from_offset`` moves past the round once it is dispatched.
        """
        done = 0
        cl = self.commit_log
        delays = self.delay_levels_ms
        tags_cache = self._tags_cache
        end = self.reput_end_offset()
        while self.reput_from_offset < end:
            if self.reput_from_offset < cl.min_offset:
                self.reput_from_offset = cl.min_offset  # expired under us
            sel = cl.get_data(self.reput_from_offset)
            if sel is None:
                break
            try:
                left = -1 if max_records is None else max_records - done
                size = min(sel.size, end - sel.start_offset)
                parts, n, pos, stop = parse_parts(sel.buffer, 0, size, left, delays, tags_cache)
                left -= n
                if n:
                    try:
                        self._dispatch_round(parts, notify)
                    except OSError as exc:
                        self._dispatch_failed(sel.start_offset, exc)
                        return done
                    if self.dispatch_error:
                        log.warning("dispatch resumed at CommitLog offset %d", sel.start_offset)
                        self.dispatch_error = ""
                    self.reput_from_offset = sel.start_offset + pos
                    done += n
                    self.dispatched_messages += n
                if stop is rec.RecordKind.INVALID and size < sel.size:
                    # the confirm offset may end inside a record (replicas ack raw bytes): a
                    # record that is whole in the written data waits for it, it is not damaged
                    stop = _beyond_end_offset(sel, pos)
                    if stop is None:
                        return done
                if stop is rec.RecordKind.BLANK:
                    self.reput_from_offset = cl.roll_next_file(self.reput_from_offset)
                elif stop is rec.RecordKind.INVALID:
                    if not self._skip_damaged(sel, pos):
                        return done
                elif stop is not None:
                    return done  # a partial header at the end of the data (a slave mid-copy)
                elif left == 0 or pos == 0:
                    return done
            finally:
                sel.release()
        return done

    def _dispatch_failed(self, offset: int, exc: OSError) -> None:
        self.dispatch_errors += 1
        full = "disk full: " if isinstance(exc, DiskFullError) else ""
        reason = f"{full}dispatch stopped at CommitLog offset {offset}: {exc}"
        if reason != self.dispatch_error:
            log.error("%s; retried every second, the messages stay in the CommitLog", reason)
        self.dispatch_error = reason

    def _skip_damaged(self, sel: SelectMappedBufferResult, pos: int) -> bool:
        """A record at ``sel`` + ``pos`` that does not decode: move past it to the next valid
        record (True), or stay (False) when nothing valid follows yet (data still arriving)."""
        bad = sel.start_offset + pos
        known = self.skip_ranges.get(bad)
        if known is not None:
            self.reput_from_offset = known
            return True
        mf = sel.mapped_file
        if mf is None:
            return False
        in_file = bad - mf.file_from_offset
        found = rec.find_next_valid(mf.buffer, in_file + 1, mf.read_position, mf.file_from_offset)
        if found >= 0:
            resume = mf.file_from_offset + found
        elif mf.is_full() and self.commit_log.max_offset > mf.file_from_offset + mf.file_size:
            resume = mf.file_from_offset + mf.file_size
        else:
            if self._stuck_at != bad:
                self._stuck_at = bad
                log.error("reput waits at CommitLog offset %d: the record does not decode", bad)
            return False
        self.corrupt_records_skipped += 1
        self.corrupt_bytes_skipped += resume - bad
        log.error(
            "damaged CommitLog record skipped by dispatch: offsets %d..%d (%d bytes)",
            bad,
            resume,
            resume - bad,
        )
        self.reput_from_offset = resume
        return True

    def _dispatch_round(self, parts: list[RoundPart], notify: bool) -> None:
        for dispatcher in self.dispatchers:
            many = getattr(dispatcher, "dispatch_many", None)
            columnar = getattr(dispatcher, "dispatch_columns", None)
            for part in parts:
                if isinstance(part, DispatchColumns):
                    if columnar is not None:
                        columnar(part)
                        continue
                    part = requests_of(part)
                if many is not None:
                    many(part)
                else:
                    for request in part:
                        dispatcher.dispatch(request)
        if not notify or not (self.listeners or self.round_listeners):
            return
        arrived = RoundRecords(parts)
        if not len(arrived):
            return
        if self.listeners:
            for request in arrived:
                self._notify(request)
        for listener in self.round_listeners:
            try:
                listener(arrived)
            except Exception:  # a listener bug must not stop dispatch
                log.exception("dispatch round listener failed")

    def _notify(self, request: DispatchRequest) -> None:
        for listener in self.listeners:
            try:
                listener(
                    request.topic,
                    request.queue_id,
                    request.consume_queue_offset,
                    request.tags_code,
                    request.store_timestamp,
                    request.properties,
                )
            except Exception:  # a listener bug must not stop dispatch
                log.exception("dispatch listener failed")

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._stopped:
            if not self._woken:
                waiter = self._waiter = loop.create_future()
                try:
                    await waiter
                finally:
                    self._waiter = None
            self._woken = False
            while not self._stopped:
                # Bounded rounds so appends and pulls interleave with a large catch-up.
                if self.do_reput(max_records=2048) < 2048:
                    break
                await asyncio.sleep(0)

    def _on_tick(self) -> None:
        """Once a second, as upstream's polling: a missed wake-up delays dispatch by 1 s at most."""
        if self._stopped:
            return
        self.wakeup()
        self._tick = asyncio.get_running_loop().call_later(1.0, self._on_tick)

    def start(self) -> None:
        self._stopped = False
        loop = asyncio.get_running_loop()
        self._task = loop.create_task(self.run(), name="ferrymq-reput")
        self._tick = loop.call_later(1.0, self._on_tick)

    async def stop(self) -> None:
        self._stopped = True
        if self._tick is not None:
            self._tick.cancel()
            self._tick = None
        self.wakeup()
        if self._task is not None:
            await self._task
            self._task = None
        # Whatever arrived meanwhile reaches the queues before shutdown flushes them.
        self.do_reput()
