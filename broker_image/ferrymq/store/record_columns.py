"""Columnar decoding of CommitLog records: a run of records in, one ``pyarrow.RecordBatch`` out.

The per-record decoder (:func:`ferrymq.store.record.check_record`) costs ~20 us a record in
Python, most of it building objects. A scan (the Spark data source) wants columns, not objects:
here Python only walks the TOTALSIZE chain (one struct call per record); every fixed field is
then gathered for all records at once with numpy (a structured dtype derived from the layout
declared in :mod:`ferrymq.store.record_layout`), and the variable fields (topic,
properties, and their TAGS / KEYS / UNIQ_KEY values) are cut out of the buffer into Arrow
string arrays, all vectorised.

Exactness: a record is emitted only when it passes every check ``check_record`` makes (its CRC
when asked, UTF-8 topic and properties included). A run stops before the first record that does
not; the caller then asks ``check_record`` what is there (a blank end-of-file record, zeros,
damage, or a record this fast path declined), so both decoders give the same rows and stop at
the same place. Properties follow ``decode_properties`` (the last of repeated names wins).

numpy and pyarrow are imported lazily, so ``import ferrymq`` does not need them.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence
from typing import Any

from ferrymq.message import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR,
    MessageConst,
)
from ferrymq.store.record import (
    BLANK_HEAD,
    BODY_POS,
    HOST_V6_FLAGS,
    MESSAGE_MAGIC_CODE,
    MIN_RECORD_SIZE,
    RECORD_HEAD,
    DecodedRecord,
    crc32,
)
from ferrymq.store.record_layout import HEAD_V4

# One row per message; the names are the Spark data source's columns (upstream MessageExt).
COLUMNS: tuple[tuple[str, str], ...] = (
    ("topic", "string"),
    ("queueId", "int32"),
    ("queueOffset", "int64"),
    ("physicalOffset", "int64"),
    ("storeTimestamp", "int64"),
    ("bornTimestamp", "int64"),
    ("bodySize", "int32"),
    ("tags", "string"),
    ("keys", "list<string>"),
    ("reconsumeTimes", "int32"),
    ("sysFlag", "int32"),
    ("flag", "int32"),
    ("storeSize", "int32"),
    ("uniqKey", "string"),
)

COLUMN_NAMES: tuple[str, ...] = tuple(name for name, _ in COLUMNS)

# Head fields read for every record: declared field name -> column (or internal) name.
_HEAD_FIELDS: dict[str, str] = {
    "TOTALSIZE": "storeSize",
    "BODYCRC": "bodyCrc",
    "QUEUEID": "queueId",
    "FLAG": "flag",
    "QUEUEOFFSET": "queueOffset",
    "PHYSICALOFFSET": "physicalOffset",
    "SYSFLAG": "sysFlag",
    "BORNTIMESTAMP": "bornTimestamp",
    "STORETIMESTAMP": "storeTimestamp",
    "RECONSUMETIMES": "reconsumeTimes",
    "BODYLEN": "bodySize",
    "PREPAREDTRANSACTIONOFFSET": "preparedTransactionOffset",
}

_V6_FLAGS = HOST_V6_FLAGS  # records with an IPv6 host are left to check_record
_MAX_I16 = 0x7FFF  # PROPERTIESLEN is a signed i16 in check_record: above this it is negative
_MAX_ARROW_BYTES = 2**31 - 1  # int32 offsets of an Arrow string column
_SPACE = ord(MessageConst.KEY_SEPARATOR)
_PROPERTY_SEP = ord(PROPERTY_SEPARATOR)
_PROPERTY_NAMES = {
    "tags": MessageConst.PROPERTY_TAGS,
    "keys": MessageConst.PROPERTY_KEYS,
    "uniqKey": MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
}


def projection(columns: Sequence[str] | None) -> tuple[str, ...]:
    """The columns to decode, in their order: all of :data:`COLUMNS` for None; an unknown or
    repeated name is a ValueError naming it (and the known ones)."""
    if columns is None:
        return COLUMN_NAMES
    unknown = [c for c in columns if c not in COLUMN_NAMES]
    if unknown:
        raise ValueError(
            f"unknown column(s) {', '.join(unknown)}; the columns are {', '.join(COLUMN_NAMES)}"
        )
    repeated = sorted({c for c in columns if list(columns).count(c) > 1})
    if repeated:
        raise ValueError(f"column(s) {', '.join(repeated)} named more than once")
    return tuple(columns)


@functools.cache
def commit_log_schema(columns: tuple[str, ...] = COLUMN_NAMES) -> Any:
    """The ``pyarrow.Schema`` of the batches holding ``columns`` (every column nullable, as Spark
    declares them)."""
    import pyarrow as pa

    types = {
        "string": pa.string(),
        "int32": pa.int32(),
        "int64": pa.int64(),
        "list<string>": pa.list_(pa.field("element", pa.string())),
    }
    kinds = dict(COLUMNS)
    return pa.schema([(name, types[kinds[name]]) for name in projection(columns)])


@functools.cache
def head_dtype() -> Any:
    """A numpy record type over one IPv4-host head (``RECORD_HEAD``) holding the fields of
    ``_HEAD_FIELDS`` (a gather of whole heads viewed with it reads every field of every record
    at once). Offsets, types and the item size come from the layout's declaration."""
    return HEAD_V4.numpy_dtype(_HEAD_FIELDS)


def walk_records(buf: Any, pos: int, stop: int, limit: int, max_rows: int) -> list[int]:
    """Starts of the message records from ``pos`` while they start before ``stop``, at most
    ``max_rows``. Stops at anything whose TOTALSIZE / MAGICCODE are not a message's that fits
    in ``buf[:limit]`` (the per-record decoder then says what it is)."""
    # The one per-record Python loop of a scan: kept to one unpack, two tests and an append.
    unpack = BLANK_HEAD.unpack_from
    magic_code, min_size = MESSAGE_MAGIC_CODE, MIN_RECORD_SIZE
    starts: list[int] = []
    append = starts.append
    end = min(stop, limit - min_size + 1)  # a record starting at or after it cannot fit
    for _ in itertools.repeat(None, max_rows):
        if pos >= end:
            break
        total, magic = unpack(buf, pos)
        if magic != magic_code or total < min_size:
            break
        append(pos)
        pos += total
    if starts and pos > limit:  # the last record runs past the data: not one to decode here
        starts.pop()
    return starts


def decode_columns(
    buf: Any,
    pos: int,
    stop: int,
    limit: int,
    *,
    max_rows: int,
    check_crc: bool = False,
    columns: Sequence[str] | None = None,
) -> tuple[Any, int]:
    """Decode the message records from ``buf[pos:limit]`` starting before ``stop``.

    Returns ``(batch, next_pos)``: a ``pyarrow.RecordBatch`` (schema :func:`commit_log_schema`
    of ``columns``, default all, at most ``max_rows`` rows, possibly none) of the records that
    passed every check, and the position right after them. ``next_pos < stop`` with fewer than ``max_rows`` rows means the
    record at ``next_pos`` is not one this path decodes: ask ``check_record``. The batch owns
    its memory (nothing refers to ``buf`` afterwards, so an mmap can be closed).
    """
    import numpy as np

    wanted = projection(columns)
    starts = walk_records(buf, pos, stop, limit, max_rows)
    if not starts:
        return _empty_batch(wanted), pos
    p = np.array(starts, dtype=np.int64)
    # Every byte offset seen as the start of an opaque 88-byte item: gathering those is one
    # memcpy per record (a gather with the field dtype would copy field by field, 60x slower).
    heads_view = np.ndarray(
        (limit - RECORD_HEAD.size + 1,), dtype=f"V{RECORD_HEAD.size}", buffer=buf, strides=(1,)
    )
    u8 = np.ndarray((limit,), dtype=np.uint8, buffer=buf)
    try:
        heads = heads_view[p].view(head_dtype())  # a copy: one head per record
        return _decode(np, u8, p, heads, buf, check_crc, wanted)
    finally:
        del heads_view, u8  # release the exports of buf (an mmap cannot close while they live)


def _prefix(ok: Any) -> int:
    """How many leading entries of a boolean array are True."""
    import numpy as np

    bad = np.flatnonzero(~ok)
    return int(bad[0]) if len(bad) else len(ok)


def _decode(
    np: Any, u8: Any, p: Any, heads: Any, buf: Any, check_crc: bool, wanted: tuple[str, ...]
) -> tuple[Any, int]:
    # Checks of check_record, in stages; each stage keeps the leading run of records that pass,
    # so the next stage only reads bytes inside records already known to be well formed. They
    # run whatever the columns: which records are emitted, and where a run stops, never depend
    # on the projection.
    first = int(p[0])
    total = heads["storeSize"].astype(np.int64)
    end = p + total
    body_len = heads["bodySize"].astype(np.int64)
    sys_flag = heads["sysFlag"].astype(np.int64)
    tpos = p + BODY_POS + body_len
    n = _prefix(((sys_flag & _V6_FLAGS) == 0) & (body_len >= 0) & (tpos + 3 <= end))
    p, end, tpos, heads, body_len = p[:n], end[:n], tpos[:n], heads[:n], body_len[:n]

    topic_len = u8[tpos].view(np.int8).astype(np.int64)
    ppos = tpos + 1 + topic_len
    n = _prefix((topic_len > 0) & (ppos + 2 <= end))
    p, end, tpos, heads, body_len, topic_len, ppos = (
        p[:n], end[:n], tpos[:n], heads[:n], body_len[:n], topic_len[:n], ppos[:n],
    )  # fmt: skip

    props_len = (u8[ppos].astype(np.int64) << 8) | u8[ppos + 1]
    n = _prefix((props_len <= _MAX_I16) & (ppos + 2 + props_len == end))
    if check_crc and n:
        n = _crc_prefix(buf, p[:n] + BODY_POS, body_len[:n], heads["bodyCrc"][:n])
    # Arrow string offsets are int32: a batch never holds 2 GiB of topics or properties.
    n = min(
        n,
        int(np.searchsorted(np.cumsum(topic_len[:n]), _MAX_ARROW_BYTES, side="right")),
        int(np.searchsorted(np.cumsum(props_len[:n]), _MAX_ARROW_BYTES, side="right")),
    )
    topics = _ranges(np, u8, tpos[:n] + 1, topic_len[:n])
    props = _ranges(np, u8, ppos[:n] + 2, props_len[:n])
    good = min(_utf8_prefix(np, topics), _utf8_prefix(np, props))
    if good < n:
        n = good
        topics, props = topics.slice(0, n), props.slice(0, n)
    next_pos = int(end[n - 1]) if n else first
    return _assemble(np, heads[:n], topics, props, wanted), next_pos


def _crc_prefix(buf: Any, body_pos: Any, body_len: Any, stored: Any) -> int:
    """How many leading records have a body matching their BODYCRC (check_record's rule)."""
    mv = memoryview(buf)
    try:
        for i, (b, ln, crc) in enumerate(
            zip(body_pos.tolist(), body_len.tolist(), stored.tolist(), strict=True)
        ):
            if crc32(mv[b : b + ln]) & 0x7FFFFFFF != crc:
                return i
        return len(body_pos)
    finally:
        mv.release()


def _offsets(np: Any, lengths: Any) -> Any:
    out = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=out[1:])
    return out


def _ranges(np: Any, data: Any, starts: Any, lengths: Any, valid: Any = None) -> Any:
    """The byte ranges ``data[start : start + length]`` as an Arrow string array (not yet
    checked for UTF-8); null where ``valid`` is False (such rows must have start and length 0).

    The ranges are increasing and do not overlap (a field of consecutive records, an item of
    consecutive property strings), so with the bytes between them they cut ``data`` into
    consecutive values of one binary array over ``data`` itself; Arrow's ``take`` of every
    other value then copies them in C, one memcpy per value (a numpy gather indexes per byte).
    """
    import pyarrow as pa

    n = len(starts)
    if not n:
        return pa.StringArray.from_buffers(
            0, pa.py_buffer(np.zeros(1, dtype=np.int32)), pa.py_buffer(b"")
        )
    bounds = np.empty(2 * n, dtype=np.int64)
    bounds[0::2] = starts
    bounds[1::2] = starts + lengths
    if valid is not None:
        np.maximum.accumulate(bounds, out=bounds)  # an empty range where a null row is
    low, high = int(bounds[0]), int(bounds[-1])
    bounds -= low
    wide = high - low > _MAX_ARROW_BYTES
    segments = pa.Array.from_buffers(
        pa.large_binary() if wide else pa.binary(),
        2 * n - 1,
        [
            None,
            pa.py_buffer(bounds if wide else bounds.astype(np.int32)),
            pa.py_buffer(data[low:high]),
        ],
    )
    bitmap = None
    if valid is not None and not valid.all():
        bitmap = pa.py_buffer(np.packbits(valid, bitorder="little"))
    index = pa.Array.from_buffers(
        pa.int64(), n, [bitmap, pa.py_buffer(np.arange(0, 2 * n - 1, 2, dtype=np.int64))]
    )
    taken = segments.take(index)
    del segments  # the only reference to data's memory (an mmap cannot close while it lives)
    validity, offsets, values = taken.buffers()
    if wide:  # the values themselves fit int32 offsets: the caller caps a batch's bytes
        offsets = pa.py_buffer(np.frombuffer(offsets, dtype=np.int64)[: n + 1].astype(np.int32))
    if values is None:  # every value empty
        values = pa.py_buffer(b"")
    return pa.StringArray.from_buffers(n, offsets, values, validity, taken.null_count)


def _utf8_prefix(np: Any, strings: Any) -> int:
    """How many leading values are valid UTF-8 (Arrow's validation agrees with Python's strict
    decoder: surrogates, overlong forms and code points above U+10FFFF are rejected)."""
    import pyarrow as pa

    try:
        strings.validate(full=True)
        return len(strings)
    except pa.ArrowInvalid:
        pass
    offsets = np.frombuffer(strings.buffers()[1], dtype=np.int32)
    data = strings.buffers()[2]
    raw = data.to_pybytes() if data is not None else b""
    for i in range(len(strings)):
        try:
            raw[offsets[i] : offsets[i + 1]].decode("utf-8")
        except UnicodeDecodeError:
            return i
    return len(strings)  # pragma: no cover - validation failed on something other than UTF-8


def _property_values(np: Any, props: Any, wanted: Sequence[str]) -> dict[str, Any]:
    """Per wanted property column (of ``_PROPERTY_NAMES``): an Arrow string array of its value
    in every row (null if absent).

    ``decode_properties`` on bytes: items are separated by ``\\x02``; an item named N is one that
    starts with ``N\\x01`` (its name is the text before the first ``\\x01``); the last such item
    of a row wins. Both separators are ASCII, so byte positions are character boundaries.
    """
    n = len(props)
    po = np.frombuffer(props.buffers()[1], dtype=np.int32)[: n + 1].astype(np.int64)
    data_buf = props.buffers()[2]
    size = int(po[-1])
    # Zero padding after the data: an 8-byte word can be read at any item start.
    pb = np.zeros(size + 16, dtype=np.uint8)
    if size:
        pb[:size] = np.frombuffer(data_buf, dtype=np.uint8)[:size]
    words = np.ndarray((size + 9,), dtype="<u8", buffer=pb, strides=(1,))
    seps = np.flatnonzero(pb[:size] == _PROPERTY_SEP)
    # An item starts at the start of a non-empty row and after every separator.
    is_start = np.zeros(size + 1, dtype=bool)
    is_start[po[:-1][po[1:] > po[:-1]]] = True
    is_start[seps + 1] = True
    item_starts = np.flatnonzero(is_start[:size])
    rows = np.searchsorted(po, item_starts, side="right") - 1
    sep_after = np.append(seps, size)[np.searchsorted(seps, item_starts)]  # size: none left
    item_ends = np.minimum(sep_after, po[rows + 1])
    out: dict[str, Any] = {}
    for column in wanted:
        key = (_PROPERTY_NAMES[column] + NAME_VALUE_SEPARATOR).encode()
        match = item_starts + len(key) <= item_ends
        for at in range(0, len(key), 8):  # the name compared 8 bytes at a time
            chunk = key[at : at + 8]
            mask = (1 << (8 * len(chunk))) - 1
            match &= (words[item_starts + at] & np.uint64(mask)) == np.uint64(
                int.from_bytes(chunk, "little")
            )
        hits = np.flatnonzero(match)
        hit_rows = rows[hits]
        if len(hits) > 1:  # keep the last hit of each row (hits are in file order)
            last = np.ones(len(hits), dtype=bool)
            last[:-1] = hit_rows[1:] != hit_rows[:-1]
            hits, hit_rows = hits[last], hit_rows[last]
        valid = np.zeros(n, dtype=bool)
        valid[hit_rows] = True
        starts = np.zeros(n, dtype=np.int64)
        lengths = np.zeros(n, dtype=np.int64)
        starts[hit_rows] = item_starts[hits] + len(key)
        lengths[hit_rows] = item_ends[hits] - starts[hit_rows]
        out[column] = _ranges(np, pb, starts, lengths, valid)
    return out


def _keys_column(np: Any, keys: Any, list_type: Any) -> Any:
    """KEYS values split on single spaces, empty pieces dropped (``DecodedRecord.keys``); a
    null (no KEYS) is an empty list."""
    import pyarrow as pa

    n = len(keys)
    offsets = np.frombuffer(keys.buffers()[1], dtype=np.int32)[: n + 1].astype(np.int64)
    size = int(offsets[-1])
    data = (
        np.frombuffer(keys.buffers()[2], dtype=np.uint8)[:size]
        if size
        else np.zeros(0, dtype=np.uint8)
    )
    word = data != _SPACE
    first = np.zeros(size, dtype=bool)  # first byte of a row's value
    first[offsets[:-1][offsets[1:] > offsets[:-1]]] = True
    last = np.zeros(size, dtype=bool)  # last byte of a row's value
    last[offsets[1:][offsets[1:] > offsets[:-1]] - 1] = True
    prev_word = np.zeros(size, dtype=bool)
    prev_word[1:] = word[:-1]
    next_word = np.zeros(size, dtype=bool)
    next_word[:-1] = word[1:]
    token_starts = np.flatnonzero(word & (first | ~prev_word))
    token_ends = np.flatnonzero(word & (last | ~next_word)) + 1
    token_rows = np.searchsorted(offsets, token_starts, side="right") - 1
    per_row = np.bincount(token_rows, minlength=n)
    values = _ranges(np, data, token_starts, token_ends - token_starts)
    offsets32 = _numbers(pa, _offsets(np, per_row).astype(np.int32), pa.int32())
    return pa.ListArray.from_arrays(offsets32, values, type=list_type)


def _numbers(pa: Any, values: Any, arrow_type: Any) -> Any:
    """A contiguous native numpy array as an Arrow array without a copy (``pa.array`` would
    import pandas on its first call: a second of start-up in every fresh worker)."""
    return pa.Array.from_buffers(arrow_type, len(values), [None, pa.py_buffer(values)])


def _assemble(np: Any, heads: Any, topics: Any, props: Any, wanted: tuple[str, ...]) -> Any:
    import pyarrow as pa

    schema = commit_log_schema(wanted)
    n = len(topics)
    if not n:
        return _empty_batch(wanted)
    # Property parsing is most of the decoding: only for the property columns asked for.
    wanted_props = [c for c in _PROPERTY_NAMES if c in wanted]
    values = _property_values(np, props, wanted_props) if wanted_props else {}
    columns: list[Any] = []
    for field in schema:
        name = field.name
        if name == "topic":
            columns.append(topics)
        elif name == "keys":
            columns.append(_keys_column(np, values["keys"], field.type))
        elif name in values:
            columns.append(values[name])
        else:
            native = np.int32 if field.type == pa.int32() else np.int64
            columns.append(_numbers(pa, heads[name].astype(native), field.type))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _empty_batch(wanted: tuple[str, ...] = COLUMN_NAMES) -> Any:
    import pyarrow as pa

    schema = commit_log_schema(wanted)
    return pa.RecordBatch.from_arrays([pa.array([], type=f.type) for f in schema], schema=schema)


def records_batch(records: Sequence[DecodedRecord], columns: Sequence[str] | None = None) -> Any:
    """The same columns from records decoded one at a time (``check_record``): the reference
    the columnar path is tested against, and the way a record it declines is still emitted."""
    import pyarrow as pa

    schema = commit_log_schema(projection(columns))
    rows: dict[str, list[Any]] = {
        "topic": [r.topic for r in records],
        "queueId": [r.queue_id for r in records],
        "queueOffset": [r.queue_offset for r in records],
        "physicalOffset": [r.physical_offset for r in records],
        "storeTimestamp": [r.store_timestamp for r in records],
        "bornTimestamp": [r.born_timestamp for r in records],
        "bodySize": [r.body_len for r in records],
        "tags": [r.tags for r in records],
        "keys": [r.keys for r in records],
        "reconsumeTimes": [r.reconsume_times for r in records],
        "sysFlag": [r.sys_flag for r in records],
        "flag": [r.flag for r in records],
        "storeSize": [r.size for r in records],
        "uniqKey": [r.uniq_key for r in records],
    }
    return pa.RecordBatch.from_arrays(
        [pa.array(rows[f.name], type=f.type) for f in schema], schema=schema
    )
