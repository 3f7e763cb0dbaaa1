"""The reput's columnar path: a run of records sharing one shape, parsed as numpy columns.

Messages from one producer usually share a topic and a properties layout: the same property
names in the same order, values of the same lengths (UNIQ_KEY is 32 hex characters). For a run
of such records each record's tail (TOPICLEN, TOPIC, PROPERTIESLEN, PROPERTIES) has one length
and its separators at the same places, so a wanted value (UNIQ_KEY, TAGS) is at the same
columns of every tail. The run is then parsed with a fixed number of numpy operations instead
of a Python loop body per record: heads and tails are gathered (one memcpy per record), checked
as columns, and the ConsumeQueue units and index key hashes come straight from the columns.

Exactness: a row is taken only if it passes the checks of ``dispatch.parse_round`` and its
topic and properties are ASCII (so UTF-8 decoding cannot fail) in the first row's layout; the
run ends before the first row that does not, and the scalar parser reads on from there. Runs
that need per-record Python anyway (KEYS, the delay topic's tags code) are left to it too.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from ferrymq.message import MessageConst, property_span, tags_string_to_tags_code
from ferrymq.store import record as rec
from ferrymq.store.record_columns import head_dtype, walk_records
from ferrymq.topic_validator import SCHEDULE_TOPIC

# Below this many records numpy's per-call overhead (~65 us a run) outweighs the scalar
# parser's per-record loop (~3.4 us a record).
MIN_ROWS = 24
MAX_ROWS = 4096  # the reput's rounds are at most 2048 records
# Tails (topic and properties) longer than this stay on the scalar path: a run copies its tails
# into one rows x width array, which must stay small (the usual tail is about 100 bytes).
MAX_TAIL = 2048

_TAGS = MessageConst.PROPERTY_TAGS
_KEYS = MessageConst.PROPERTY_KEYS
_UNIQ_KEY = MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX

_V6_FLAGS = rec.HOST_V6_FLAGS  # records with an IPv6 host: the general parser reads them
_HEAD_SIZE = rec.RECORD_HEAD.size
_MESSAGE_MAGIC = rec.MESSAGE_MAGIC_CODE


@dataclass(slots=True, eq=False)
class DispatchColumns:
    """One run's records (CommitLog order) as columns; every array has one row per record.
    The arrays are copies: nothing refers to the CommitLog's map afterwards."""

    topic: str
    queue_id: np.ndarray
    commit_log_offset: np.ndarray
    msg_size: np.ndarray
    tags_code: np.ndarray
    store_timestamp: np.ndarray
    consume_queue_offset: np.ndarray
    sys_flag: np.ndarray
    prepared_transaction_offset: np.ndarray
    properties: np.ndarray
    """``rows x PROPERTIESLEN`` bytes (ASCII) of each record's properties."""
    uniq_key_span: tuple[int, int] | None
    """Columns of ``properties`` holding UNIQ_KEY's value; None when the layout has none."""
    end: int
    """Position in the parsed buffer right after the run."""

    def __len__(self) -> int:
        return len(self.commit_log_offset)

    def select(self, rows: np.ndarray) -> DispatchColumns:
        """The run's records where the boolean mask ``rows`` is True."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        return DispatchColumns(
            **{k: v[rows] if isinstance(v, np.ndarray) else v for k, v in values.items()}
        )

    def uniq_keys(self) -> np.ndarray | None:
        """``rows x length`` bytes of each record's UNIQ_KEY; None if absent or empty."""
        span = self.uniq_key_span
        if span is None or span[0] == span[1]:
            return None
        return self.properties[:, span[0] : span[1]]


def parse_columns(buf: Any, pos: int, end: int, limit: int) -> DispatchColumns | None:
    """The run of same-shaped message records from ``buf[pos:end]`` (at most ``limit``; -1 for
    no limit), or None when there are fewer than :data:`MIN_ROWS` of them (or the run needs the
    scalar path: KEYS, the delay topic). Pure: reads ``buf``, writes nothing."""
    if end - pos < rec.BLANK_HEAD.size:
        return None
    first_total, magic = rec.BLANK_HEAD.unpack_from(buf, pos)
    if magic != _MESSAGE_MAGIC or first_total < rec.MIN_RECORD_SIZE:
        return None
    rows = (end - pos) // first_total  # as many as records of the first's size would fill
    if limit >= 0:
        rows = min(rows, limit)
    rows = min(rows, MAX_ROWS)
    if rows < MIN_ROWS:
        return None
    starts = _starts(buf, pos, end, first_total, rows)
    if len(starts) < MIN_ROWS:
        return None
    return _parse(buf, starts, end)


def _starts(buf: Any, pos: int, end: int, size: int, rows: int) -> np.ndarray:
    """Record starts from ``pos``: records all of ``size`` bytes are recognised with one strided
    read of their TOTALSIZE and MAGICCODE; otherwise the TOTALSIZE chain is walked."""
    heads = np.ndarray((rows, 2), dtype=">u4", buffer=buf, offset=pos, strides=(size, 4))
    same = (heads[:, 0] == size) & (heads[:, 1] == _MESSAGE_MAGIC)
    n = _prefix(same)
    if n >= MIN_ROWS:
        return pos + size * np.arange(n, dtype=np.int64)
    return np.array(walk_records(buf, pos, end, end, rows), dtype=np.int64)


def _prefix(ok: np.ndarray) -> int:
    """How many leading entries of a boolean array are True."""
    bad = np.flatnonzero(~ok)
    return int(bad[0]) if len(bad) else len(ok)


def _gather(buf: Any, end: int, starts: np.ndarray, width: int) -> np.ndarray:
    """``rows x width`` bytes copied from each start (one memcpy per row: every byte offset is
    seen as the start of an opaque ``width``-byte item)."""
    items = np.ndarray((end - width + 1,), dtype=f"V{width}", buffer=buf, strides=(1,))
    try:
        out: np.ndarray = items[starts].view(np.uint8).reshape(len(starts), width)
        return out
    finally:
        del items  # an mmap cannot close while an export of it lives


def _parse(buf: Any, starts: np.ndarray, end: int) -> DispatchColumns | None:
    heads = _gather(buf, end, starts, _HEAD_SIZE).view(head_dtype()).reshape(-1)
    total = heads["storeSize"].astype(np.int64)
    body_len = heads["bodySize"].astype(np.int64)
    tail_len = total - rec.BODY_POS - body_len
    width = int(tail_len[0])
    # parse_round's head checks, and the first row's tail length for every row
    ok = (
        (total >= rec.MIN_RECORD_SIZE)
        & (starts + total <= end)
        & ((heads["sysFlag"] & _V6_FLAGS) == 0)
        & (body_len >= 0)
        & (tail_len == width)
    )
    n = _prefix(ok)
    if n < MIN_ROWS or not 3 <= width <= MAX_TAIL:
        return None
    starts, heads, total = starts[:n], heads[:n], total[:n]
    tails = _gather(buf, end, starts + total - width, width)
    topic_len = int(tails[0, 0])
    props_at = 1 + topic_len + 2
    props_len = width - props_at
    if not 0 < topic_len <= rec.MAX_TOPIC_BYTES or props_len < 0:
        return None
    if int.from_bytes(tails[0, props_at - 2 : props_at].tobytes(), "big") != props_len:
        return None
    first = tails[0]
    # Columns that must equal the first row's: TOPICLEN, TOPIC, PROPERTIESLEN, then the
    # separators and names of the properties. Elsewhere no separator may appear, and every
    # byte but PROPERTIESLEN's must be ASCII.
    fixed = np.zeros(width, dtype=bool)
    fixed[:props_at] = True
    fixed[_layout_columns(first[props_at:].tobytes().decode("latin-1")) + props_at] = True
    text = np.ones(width, dtype=bool)
    text[props_at - 2 : props_at] = False
    separator = (tails - np.uint8(1)) <= 1  # NAME_VALUE_SEPARATOR or PROPERTY_SEPARATOR
    rows_ok = (
        ((tails == first) | ~fixed).all(axis=1)
        & ~(separator & ~fixed).any(axis=1)
        & ~((tails >= 0x80) & text).any(axis=1)
    )
    n = _prefix(rows_ok)
    if n < MIN_ROWS:
        return None
    topic = first[1 : 1 + topic_len].tobytes().decode("ascii")
    props0 = first[props_at:].tobytes().decode("ascii")
    if topic == SCHEDULE_TOPIC or property_span(props0, _KEYS) is not None:
        return None  # a delay level's tags code, KEYS' split: the scalar path's work
    heads, props = heads[:n], tails[:n, props_at:]
    return DispatchColumns(
        topic,
        heads["queueId"].astype(np.int64),
        heads["physicalOffset"].astype(np.int64),
        total[:n],
        _tags_codes(props, property_span(props0, _TAGS)),
        heads["storeTimestamp"].astype(np.int64),
        heads["queueOffset"].astype(np.int64),
        heads["sysFlag"].astype(np.int64),
        heads["preparedTransactionOffset"].astype(np.int64),
        props,
        property_span(props0, _UNIQ_KEY),
        int(starts[n - 1] + total[n - 1]),
    )


def _layout_columns(props: str) -> np.ndarray:
    """Columns of a properties text that fix where ``property_span`` finds every name: the
    separators and each item's name (its text before the first NAME_VALUE_SEPARATOR). Texts
    that agree on these bytes and have no separator elsewhere give the same spans."""
    fixed: list[int] = []
    at = 0
    for item in props.split("\x02"):
        cut = item.find("\x01")
        fixed.extend(range(at, at + cut + 1) if cut >= 0 else ())
        at += len(item)
        if at < len(props):
            fixed.append(at)  # the PROPERTY_SEPARATOR after the item
        at += 1
    return np.array(fixed, dtype=np.int64)


def _tags_codes(props: np.ndarray, span: tuple[int, int] | None) -> np.ndarray:
    """Each row's ConsumeQueue tags code (``compute_tags_code``): the Java hash of TAGS, each
    distinct value hashed once; 0 without TAGS or with an empty one."""
    n = len(props)
    if span is None or span[0] == span[1]:
        return np.zeros(n, dtype=np.int64)
    values = props[:, span[0] : span[1]]
    if (values == values[0]).all():  # one tag for the whole run: the usual case
        return np.full(n, tags_string_to_tags_code(values[0].tobytes().decode("ascii")), np.int64)
    raw = values.tobytes()
    width = span[1] - span[0]
    codes: dict[bytes, int] = {}
    out = []
    for at in range(0, len(raw), width):
        value = raw[at : at + width]
        code = codes.get(value)
        if code is None:
            code = codes[value] = tags_string_to_tags_code(value.decode("ascii"))
        out.append(code)
    return np.array(out, dtype=np.int64)
