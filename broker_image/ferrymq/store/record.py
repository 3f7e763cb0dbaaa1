"""The CommitLog record (upstream ``CommitLog.DefaultAppendMessageCallback`` and
``CommitLog.checkMessageAndReturnSize``, ``MessageDecoder.decode``): its writers and readers.

The layout is declared once, in :mod:`ferrymq.store.record_layout`; the structs, positions and
sizes here are derived from it. With IPv4 hosts and magic code v1 (what ferrymq writes for an
IPv4 broker and producer), big-endian::

    off  field                      type
    0    TOTALSIZE                  i32   whole record, this field included
    4    MAGICCODE                  u32   0xDAA320A7 (message) / 0xCBD43194 (blank end of file)
    8    BODYCRC                    i32   zlib.crc32(body) & 0x7FFFFFFF (upstream UtilAll.crc32)
    12   QUEUEID                    i32
    16   FLAG                       i32   application flag
    20   QUEUEOFFSET                i64   logical offset in the ConsumeQueue
    28   PHYSICALOFFSET             i64   offset of this record in the CommitLog
    36   SYSFLAG                    i32   MessageSysFlag bits
    40   BORNTIMESTAMP              i64   ms
    48   BORNHOST                   4s+i32  IPv4 + port (16s+i32 with BORNHOST_V6_FLAG)
    56   STORETIMESTAMP             i64   ms
    64   STOREHOST                  4s+i32  IPv4 + port (16s+i32 with STOREHOSTADDRESS_V6_FLAG)
    72   RECONSUMETIMES             i32
    76   PREPAREDTRANSACTIONOFFSET  i64
    84   BODYLEN                    i32   then BODY
    ..   TOPICLEN                   i8    then TOPIC (UTF-8; i16 under magic code v2)
    ..   PROPERTIESLEN              i16   then PROPERTIES (UTF-8 ``k\\x01v\\x02``, at most 32767 bytes)

``TOTALSIZE = 91 + bodyLen + topicLen + propertiesLen`` for that layout; each IPv6 host adds 12
bytes. A file ends with a blank record of ``TOTALSIZE = remaining bytes, MAGICCODE = BLANK``; a
writer always keeps 8 bytes for it. The hot paths (the single append, the reput's and the
client's fused loops) read and write the IPv4/v1 layout inline and hand any other record to
the general code, which reads every layout.

Pure functions over buffers: no files here. Spark executors and the client reuse the decoders.
"""

from __future__ import annotations

import enum
import mmap
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, fields
from typing import Any

from ferrymq.message import (
    MessageConst,
    MessageExt,
    MessageSysFlag,
    create_message_id,
    decode_properties,
    unpack_host,
)
from ferrymq.store import record_layout as layout
from ferrymq.store.record_layout import BLANK_MAGIC_CODE as BLANK_MAGIC_CODE
from ferrymq.store.record_layout import HOST_V6_FLAGS as HOST_V6_FLAGS
from ferrymq.store.record_layout import MESSAGE_MAGIC_CODE as MESSAGE_MAGIC_CODE
from ferrymq.store.record_layout import MESSAGE_MAGIC_CODE_V2 as MESSAGE_MAGIC_CODE_V2
from ferrymq.store.record_layout import MESSAGE_MAGIC_CODES as MESSAGE_MAGIC_CODES
from ferrymq.store.record_layout import head_layout as head_layout
from ferrymq.store.record_layout import record_size as record_size

try:  # SIMD CRC-32 (same polynomial and values as zlib.crc32); optional for light installs
    from zlib_ng.zlib_ng import crc32 as _crc32
except ImportError:  # pragma: no cover - exercised only where zlib-ng is not installed
    _crc32 = zlib.crc32

crc32 = _crc32
"""CRC-32 as ``zlib.crc32``, from zlib-ng when installed (much faster on the append path)."""

_V4 = layout.HEAD_V4
# The fixed part of a record with IPv4 hosts, up to and including BODYLEN; one struct, one call
# per record. Records with an IPv6 host use ``head_layout(sys_flag).struct`` (same fields).
RECORD_HEAD = _V4.struct
TOTAL_SIZE_POS = _V4.offset["TOTALSIZE"]
MAGIC_POS = _V4.offset["MAGICCODE"]
BODY_CRC_POS = _V4.offset["BODYCRC"]
QUEUE_ID_POS = _V4.offset["QUEUEID"]
FLAG_POS = _V4.offset["FLAG"]
QUEUE_OFFSET_POS = _V4.offset["QUEUEOFFSET"]
PHYSICAL_OFFSET_POS = _V4.offset["PHYSICALOFFSET"]
SYS_FLAG_POS = _V4.offset["SYSFLAG"]
BORN_TIMESTAMP_POS = _V4.offset["BORNTIMESTAMP"]
# The positions above are those of every layout; the ones below are for IPv4 hosts.
STORE_TIMESTAMP_POS = _V4.offset["STORETIMESTAMP"]
RECONSUME_TIMES_POS = _V4.offset["RECONSUMETIMES"]
PREPARED_TRANSACTION_OFFSET_POS = _V4.offset["PREPAREDTRANSACTIONOFFSET"]
BODY_LEN_POS = _V4.offset["BODYLEN"]
BODY_POS = _V4.size
MIN_RECORD_SIZE = layout.min_record_size()  # 91: empty body, topic and properties
# STORETIMESTAMP of any layout lies before this (a born IPv6 host moves it)
STORE_TIMESTAMP_END_MAX = max(
    head_layout(bits).end_of("STORETIMESTAMP") for bits in (0, HOST_V6_FLAGS)
)

BLANK_HEAD = layout.BLANK_LAYOUT.struct  # TOTALSIZE, BLANK_MAGIC_CODE
END_FILE_MIN_BLANK_LENGTH = BLANK_HEAD.size

_TOPIC_LEN = struct.Struct(">" + layout.TOPIC_LEN_CODES[MESSAGE_MAGIC_CODE])
_TOPIC_LEN_V2 = struct.Struct(">" + layout.TOPIC_LEN_CODES[MESSAGE_MAGIC_CODE_V2])
_PROPS_LEN = struct.Struct(">" + layout.PROPERTIES_LEN_CODE)
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_SYS_FLAG = _V4.field_struct("SYSFLAG")

MAX_TOPIC_BYTES = layout.MAX_TOPIC_BYTES[MESSAGE_MAGIC_CODE]  # what ferrymq writes (v1)
MAX_PROPERTIES_BYTES = layout.MAX_PROPERTIES_BYTES

assert RECORD_HEAD.size == 88 and MIN_RECORD_SIZE == 91  # the upstream constants


def body_crc(body: bytes | bytearray | memoryview) -> int:
    """The stored BODYCRC: CRC-32 masked to a non-negative int32, as upstream."""
    return crc32(body) & 0x7FFFFFFF


def with_host_flags(sys_flag: int, born_ip: bytes, store_ip: bytes) -> int:
    """``sys_flag`` with its host bits set by the addresses written (4 or 16 bytes), as upstream
    ``MessageExtBrokerInner`` sets them from the socket addresses: whatever a client claimed."""
    return (sys_flag & ~HOST_V6_FLAGS) | layout.host_flags(len(born_ip), len(store_ip))


def encode_record_into(
    buf: bytearray | memoryview | object,
    pos: int,
    *,
    queue_id: int,
    flag: int,
    queue_offset: int,
    physical_offset: int,
    sys_flag: int,
    born_timestamp: int,
    born_ip: bytes,
    born_port: int,
    store_timestamp: int,
    store_ip: bytes,
    store_port: int,
    reconsume_times: int,
    prepared_transaction_offset: int,
    body: bytes | memoryview,
    topic: bytes,
    properties: bytes,
    crc: int | None = None,
    magic: int = MESSAGE_MAGIC_CODE,
) -> int:
    """Encode one record at ``buf[pos:]`` (a bytearray or an ``mmap``); returns its size.

    The host addresses (4 or 16 bytes) set SYSFLAG's host bits and so the layout; the record
    is ``record_size(..., with_host_flags(sys_flag, born_ip, store_ip), magic)`` bytes. The
    caller has checked the lengths (see :func:`validate_lengths`) and the free space.
    """
    sys_flag = with_host_flags(sys_flag, born_ip, store_ip)
    head = head_layout(sys_flag)
    body_len = len(body)
    topic_len = len(topic)
    size = layout.record_size(body_len, topic_len, len(properties), sys_flag, magic)
    head.struct.pack_into(
        buf,  # type: ignore[arg-type]
        pos,
        size,
        magic,
        body_crc(body) if crc is None else crc,
        queue_id,
        flag,
        queue_offset,
        physical_offset,
        sys_flag,
        born_timestamp,
        born_ip,
        born_port,
        store_timestamp,
        store_ip,
        store_port,
        reconsume_times,
        prepared_transaction_offset,
        body_len,
    )
    p = pos + head.size
    buf[p : p + body_len] = body  # type: ignore[index]
    p += body_len
    topic_len_struct = _TOPIC_LEN if magic == MESSAGE_MAGIC_CODE else _TOPIC_LEN_V2
    topic_len_struct.pack_into(buf, p, topic_len)  # type: ignore[arg-type]
    p += topic_len_struct.size
    buf[p : p + topic_len] = topic  # type: ignore[index]
    p += topic_len
    _PROPS_LEN.pack_into(buf, p, len(properties))  # type: ignore[arg-type]
    p += _PROPS_LEN.size
    buf[p : p + len(properties)] = properties  # type: ignore[index]
    return size


def encode_record(
    *,
    born_ip: bytes,
    store_ip: bytes,
    sys_flag: int,
    body: bytes | memoryview,
    topic: bytes,
    properties: bytes,
    magic: int = MESSAGE_MAGIC_CODE,
    **fields: Any,
) -> bytes:
    """One record as bytes (:func:`encode_record_into`'s keywords), sized by its layout."""
    size = layout.record_size(
        len(body), len(topic), len(properties), with_host_flags(sys_flag, born_ip, store_ip), magic
    )
    buf = bytearray(size)
    encode_record_into(
        buf,
        0,
        born_ip=born_ip,
        store_ip=store_ip,
        sys_flag=sys_flag,
        body=body,
        topic=topic,
        properties=properties,
        magic=magic,
        **fields,
    )
    return bytes(buf)


def reencode_record(
    record: DecodedRecord,
    *,
    queue_id: int,
    body: bytes | memoryview,
    topic: bytes,
    properties: bytes,
) -> bytes:
    """``record`` encoded again under another topic, queue and properties, its other fields kept.

    A message read from an internal topic (transaction half, POP retry) is handed to its client
    as if read from its real topic: only the address and properties change, never the offsets,
    hosts, timestamps or flags the client reports back.
    """
    return encode_record(
        queue_id=queue_id,
        flag=record.flag,
        queue_offset=record.queue_offset,
        physical_offset=record.physical_offset,
        sys_flag=record.sys_flag,
        born_timestamp=record.born_timestamp,
        born_ip=record.born_ip,
        born_port=record.born_port,
        store_timestamp=record.store_timestamp,
        store_ip=record.store_ip,
        store_port=record.store_port,
        reconsume_times=record.reconsume_times,
        prepared_transaction_offset=record.prepared_transaction_offset,
        body=body,
        topic=topic,
        properties=properties,
    )


def encode_blank_into(buf: object, pos: int, remaining: int) -> None:
    """Write the end-of-file blank record covering ``remaining`` bytes (>= 8)."""
    BLANK_HEAD.pack_into(buf, pos, remaining, BLANK_MAGIC_CODE)  # type: ignore[arg-type]


def set_queue_offset(buf: object, pos: int, queue_offset: int) -> None:
    """Patch QUEUEOFFSET of the record at ``pos`` (batch items get theirs at append time)."""
    _I64.pack_into(buf, pos + QUEUE_OFFSET_POS, queue_offset)  # type: ignore[arg-type]


def validate_lengths(
    topic_len: int, properties_len: int, body_len: int, max_size: int
) -> str | None:
    """Why a record with these lengths cannot be stored, or None. Pure; used before the append."""
    if topic_len > MAX_TOPIC_BYTES:
        return f"topic is {topic_len} bytes; max {MAX_TOPIC_BYTES}"
    if properties_len > MAX_PROPERTIES_BYTES:
        return f"properties are {properties_len} bytes; max {MAX_PROPERTIES_BYTES}"
    if body_len > max_size:
        return f"body is {body_len} bytes; maxMessageSize is {max_size}"
    return None


class RecordKind(enum.Enum):
    """What :func:`check_record` found at a position."""

    MESSAGE = "message"
    BLANK = "blank"  # the end-of-file filler: skip to the next file
    END = "end"  # zero bytes / too short for a header: no more data in this file
    INVALID = "invalid"  # torn or corrupt record: recovery truncates here


@dataclass(slots=True)
class DecodedRecord:
    """The fields of one record that dispatch, recovery and lookups need (body not copied)."""

    size: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    physical_offset: int
    sys_flag: int
    born_timestamp: int
    born_ip: bytes
    born_port: int
    store_timestamp: int
    store_ip: bytes
    store_port: int
    reconsume_times: int
    prepared_transaction_offset: int
    body_pos: int  # position of BODY within the buffer given to check_record
    body_len: int
    topic: str
    properties: dict[str, str]

    @property
    def born_host(self) -> tuple[str, int]:
        """``(ip, port)`` of the producer (decoded on demand: dispatch never needs it)."""
        return unpack_host(self.born_ip), self.born_port

    @property
    def store_host(self) -> tuple[str, int]:
        return unpack_host(self.store_ip), self.store_port

    @property
    def tags(self) -> str | None:
        return self.properties.get(MessageConst.PROPERTY_TAGS)

    @property
    def keys(self) -> list[str]:
        raw = self.properties.get(MessageConst.PROPERTY_KEYS)
        if not raw:
            return []
        return [k for k in raw.split(MessageConst.KEY_SEPARATOR) if k]

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)


@dataclass(slots=True)
class RecordCheck:
    kind: RecordKind
    size: int  # bytes to advance (0 for END and INVALID)
    record: DecodedRecord | None = None
    reason: str = ""


# What _structure found: head fields (RECORD_HEAD's order), BODY position, TOPIC's position
# and length, PROPERTIES' position and length.
_Structure = tuple[tuple[Any, ...], int, int, int, int, int]


def _structure(buf: object, pos: int, limit: int, total: int, magic: int) -> _Structure | str:
    """The structure of a message record of any layout (IPv4/IPv6 hosts, magic v1/v2) whose
    TOTALSIZE and MAGICCODE were read, or why it does not hold together: every length must add
    up to TOTALSIZE, inside ``limit``. No CRC, no decoding."""
    if total < MIN_RECORD_SIZE or total > limit - pos:
        return f"record size {total} out of range"
    (sys_flag,) = _SYS_FLAG.unpack_from(buf, pos)  # type: ignore[arg-type]
    head = head_layout(sys_flag)
    if total < head.size + 3:
        return f"record size {total} out of range"
    fields = head.struct.unpack_from(buf, pos)  # type: ignore[arg-type]
    body_len = fields[-1]
    body_pos = pos + head.size
    end = pos + total
    tl = _TOPIC_LEN if magic == MESSAGE_MAGIC_CODE else _TOPIC_LEN_V2
    if body_len < 0 or body_pos + body_len + tl.size + _PROPS_LEN.size > end:
        return f"body length {body_len} out of range"
    tpos = body_pos + body_len
    (topic_len,) = tl.unpack_from(buf, tpos)  # type: ignore[arg-type]
    topic_pos = tpos + tl.size
    ppos = topic_pos + topic_len
    if topic_len <= 0 or ppos + _PROPS_LEN.size > end:
        return f"topic length {topic_len} out of range"
    (props_len,) = _PROPS_LEN.unpack_from(buf, ppos)  # type: ignore[arg-type]
    props_pos = ppos + _PROPS_LEN.size
    if props_len < 0 or props_pos + props_len != end:
        return f"lengths do not add up to TOTALSIZE {total}"
    return fields, body_pos, topic_pos, topic_len, props_pos, props_len


def check_record(
    buf: bytes | bytearray | memoryview | object,
    pos: int,
    limit: int,
    *,
    check_crc: bool = True,
) -> RecordCheck:
    """Validate and parse the record at ``buf[pos:limit]``; never raises on bad bytes.

    Mirrors upstream ``checkMessageAndReturnSize``: a blank record means "next file", anything that
    does not fully parse (bad magic, lengths that disagree, CRC mismatch, bytes beyond ``limit``)
    is INVALID, which recovery treats as the torn tail. Reads every layout of
    :mod:`record_layout` (IPv4 or IPv6 hosts, magic code v1 or v2).
    """
    avail = limit - pos
    if avail < BLANK_HEAD.size:
        return RecordCheck(RecordKind.END, 0, reason="no room for a record header")
    total, magic = BLANK_HEAD.unpack_from(buf, pos)  # type: ignore[arg-type]
    if magic == BLANK_MAGIC_CODE:
        if total < BLANK_HEAD.size or total > avail:
            return RecordCheck(RecordKind.INVALID, 0, reason=f"blank record with size {total}")
        return RecordCheck(RecordKind.BLANK, total)
    if magic not in MESSAGE_MAGIC_CODES:
        if total == 0 and magic == 0:
            return RecordCheck(RecordKind.END, 0, reason="zero bytes")
        return RecordCheck(RecordKind.INVALID, 0, reason=f"bad magic 0x{magic:08X}")
    found = _structure(buf, pos, limit, total, magic)
    if isinstance(found, str):
        return RecordCheck(RecordKind.INVALID, 0, reason=found)
    fields, body_pos, topic_pos, topic_len, props_pos, props_len = found
    (
        _total, _magic, crc, queue_id, flag, queue_offset, physical_offset, sys_flag,
        born_ts, born_ip, born_port, store_ts, store_ip, store_port, reconsume, prepared,
        body_len,
    ) = fields  # fmt: skip
    mv = memoryview(buf)  # type: ignore[arg-type]
    try:
        if check_crc and crc32(mv[body_pos : body_pos + body_len]) & 0x7FFFFFFF != crc:
            return RecordCheck(RecordKind.INVALID, 0, reason="body CRC mismatch")
        try:
            topic = str(mv[topic_pos : topic_pos + topic_len], "utf-8")
            properties = (
                decode_properties(str(mv[props_pos : props_pos + props_len], "utf-8"))
                if props_len
                else {}
            )
        except UnicodeDecodeError:
            return RecordCheck(RecordKind.INVALID, 0, reason="topic or properties not UTF-8")
    finally:
        mv.release()
    record = DecodedRecord(
        size=total,
        body_crc=crc,
        queue_id=queue_id,
        flag=flag,
        queue_offset=queue_offset,
        physical_offset=physical_offset,
        sys_flag=sys_flag,
        born_timestamp=born_ts,
        born_ip=born_ip,
        born_port=born_port,
        store_timestamp=store_ts,
        store_ip=store_ip,
        store_port=store_port,
        reconsume_times=reconsume,
        prepared_transaction_offset=prepared,
        body_pos=body_pos,
        body_len=body_len,
        topic=topic,
        properties=properties,
    )
    return RecordCheck(RecordKind.MESSAGE, total, record)


def validate_record(
    buf: memoryview, pos: int, limit: int, check_crc: bool
) -> tuple[RecordKind, int, int, int]:
    """``(kind, size, physical offset, store timestamp)`` for recovery: the structural checks
    and CRC of :func:`check_record` without decoding topic or properties."""
    if limit - pos < BLANK_HEAD.size:
        return RecordKind.END, 0, 0, 0
    total, magic = BLANK_HEAD.unpack_from(buf, pos)
    if magic != MESSAGE_MAGIC_CODE:
        if magic == BLANK_MAGIC_CODE and BLANK_HEAD.size <= total <= limit - pos:
            return RecordKind.BLANK, total, 0, 0
        if magic == MESSAGE_MAGIC_CODE_V2:
            return _validate_general(buf, pos, limit, total, magic, check_crc)
        return (RecordKind.END if total == 0 and magic == 0 else RecordKind.INVALID), 0, 0, 0
    if total < MIN_RECORD_SIZE or total > limit - pos:
        return RecordKind.INVALID, 0, 0, 0
    (
        _t, _m, crc, _qid, _flag, _qoff, physical_offset, sys_flag, _born_ts, _born_ip,
        _born_port, store_ts, _store_ip, _store_port, _reconsume, _prepared, body_len,
    ) = RECORD_HEAD.unpack_from(buf, pos)  # fmt: skip
    if sys_flag & HOST_V6_FLAGS:
        return _validate_general(buf, pos, limit, total, magic, check_crc)
    tpos = pos + BODY_POS + body_len
    end = pos + total
    if body_len < 0 or tpos + 3 > end:
        return RecordKind.INVALID, 0, 0, 0
    topic_len = buf[tpos]
    ppos = tpos + 1 + topic_len
    if topic_len == 0 or topic_len > MAX_TOPIC_BYTES or ppos + 2 > end:
        return RecordKind.INVALID, 0, 0, 0
    if ppos + 2 + ((buf[ppos] << 8) | buf[ppos + 1]) != end:
        return RecordKind.INVALID, 0, 0, 0
    if check_crc and crc32(buf[pos + BODY_POS : tpos]) & 0x7FFFFFFF != crc:
        return RecordKind.INVALID, 0, 0, 0
    return RecordKind.MESSAGE, total, physical_offset, store_ts


def _validate_general(
    buf: memoryview, pos: int, limit: int, total: int, magic: int, check_crc: bool
) -> tuple[RecordKind, int, int, int]:
    """:func:`validate_record` for the layouts its inline path leaves out (IPv6, v2)."""
    found = _structure(buf, pos, limit, total, magic)
    if isinstance(found, str):
        return RecordKind.INVALID, 0, 0, 0
    fields, body_pos, _topic_pos, _topic_len, _props_pos, _props_len = found
    body_len = fields[-1]
    if check_crc and crc32(buf[body_pos : body_pos + body_len]) & 0x7FFFFFFF != fields[2]:
        return RecordKind.INVALID, 0, 0, 0
    return RecordKind.MESSAGE, total, fields[6], fields[11]


_MESSAGE_MAGIC_BYTES = tuple(magic.to_bytes(4, "big") for magic in MESSAGE_MAGIC_CODES)
_BLANK_MAGIC_BYTES = BLANK_MAGIC_CODE.to_bytes(4, "big")


def find_next_valid(buf: mmap.mmap | bytes | bytearray, start: int, limit: int, base: int) -> int:
    """The first position ``>= start`` in ``buf[:limit]`` where a record that passes every check
    of :func:`validate_record` (CRC included) *and* whose PHYSICALOFFSET equals ``base`` + its
    position begins, or a blank record ending exactly at ``limit``; -1 when there is none.

    Skipping a damaged record: records are not aligned, so candidates are found by their magic
    code (``find`` on the buffer, memchr speed), and only a candidate that names its own
    position counts, which a body that merely contains the magic bytes never does. ``buf``
    must have ``find`` (an ``mmap``, bytes); ``limit`` is the end of the file's data.
    """
    finder = buf.find
    view = memoryview(buf)
    try:
        best = -1
        for magic_bytes in _MESSAGE_MAGIC_BYTES:
            pos = start
            stop = limit if best < 0 else best
            while pos < stop:
                hit = finder(magic_bytes, pos + MAGIC_POS, limit)
                if hit < 0 or hit - MAGIC_POS >= stop:
                    break
                cand = hit - MAGIC_POS
                kind, _size, phy, _ts = validate_record(view, cand, limit, True)
                if kind is RecordKind.MESSAGE and phy == base + cand:
                    best = cand
                    break
                pos = cand + 1
        # A blank filler that ends the file is a resynchronisation point as well (the damaged
        # record was the file's last message).
        pos = start
        while pos < limit and (best < 0 or pos < best):
            hit = finder(_BLANK_MAGIC_BYTES, pos + MAGIC_POS, limit if best < 0 else best + 4)
            if hit < 0:
                break
            cand = hit - MAGIC_POS
            if cand >= start:
                (total,) = _I32.unpack_from(view, cand)
                if cand + total == limit and total >= BLANK_HEAD.size:
                    return cand
            pos = cand + 1
        return best
    finally:
        view.release()


DispatchFields = tuple[int, int, int, int, int, int, int, str, str]
"""``(size, queue_id, queue_offset, physical_offset, sys_flag, store_timestamp,
prepared_transaction_offset, topic, properties text)``: the properties stay encoded (dispatch
reads a few names with ``property_value``)."""


def parse_for_dispatch(
    buf: memoryview, pos: int, limit: int
) -> tuple[RecordKind, int, DispatchFields | None]:
    """The fields dispatch needs, with the same structural checks as :func:`check_record` but
    no CRC and no objects beyond the result (the reput hot path)."""
    if limit - pos < BLANK_HEAD.size:
        return RecordKind.END, 0, None
    total, magic = BLANK_HEAD.unpack_from(buf, pos)
    if magic not in MESSAGE_MAGIC_CODES:
        if magic == BLANK_MAGIC_CODE and BLANK_HEAD.size <= total <= limit - pos:
            return RecordKind.BLANK, total, None
        return (RecordKind.END if total == 0 and magic == 0 else RecordKind.INVALID), 0, None
    found = _structure(buf, pos, limit, total, magic)
    if isinstance(found, str):
        return RecordKind.INVALID, 0, None
    fields, _body_pos, topic_pos, topic_len, props_pos, props_len = found
    try:
        topic = str(buf[topic_pos : topic_pos + topic_len], "utf-8")
        properties = str(buf[props_pos : props_pos + props_len], "utf-8") if props_len else ""
    except UnicodeDecodeError:
        return RecordKind.INVALID, 0, None
    (
        _t, _m, _crc, queue_id, _flag, queue_offset, physical_offset, sys_flag,
        _born_ts, _born_ip, _born_port, store_ts, _store_ip, _store_port, _reconsume,
        prepared, _body_len,
    ) = fields  # fmt: skip
    return (
        RecordKind.MESSAGE,
        total,
        (
            total, queue_id, queue_offset, physical_offset, sys_flag, store_ts, prepared,
            topic, properties,
        ),
    )  # fmt: skip


def decode_message_ext(
    buf: bytes | bytearray | memoryview | object,
    pos: int = 0,
    limit: int | None = None,
    *,
    decompress_body: bool = True,
    check_crc: bool = False,
) -> MessageExt:
    """One record as a :class:`MessageExt`; raises ValueError on a record that does not parse.

    ``msg_id`` is the client's UNIQ_KEY when present (as upstream ``MessageClientExt``), else the
    offset msgId. A compressed body (sysFlag bit 0) is inflated when ``decompress_body``.
    """
    end = len(buf) if limit is None else limit  # type: ignore[arg-type]
    check = check_record(buf, pos, end, check_crc=check_crc)
    if check.kind is not RecordKind.MESSAGE or check.record is None:
        raise ValueError(f"no message record at byte {pos}: {check.kind.value} {check.reason}")
    r = check.record
    mv = memoryview(buf)  # type: ignore[arg-type]
    try:
        body = bytes(mv[r.body_pos : r.body_pos + r.body_len])
    finally:
        mv.release()
    sys_flag = r.sys_flag
    if decompress_body and sys_flag & MessageSysFlag.COMPRESSED_FLAG:
        try:
            body = zlib.decompress(body)
        except zlib.error as exc:
            raise ValueError(f"record at byte {pos}: compressed body does not inflate") from exc
    offset_id = create_message_id((r.store_ip, r.store_port), r.physical_offset)
    return MessageExt(
        topic=r.topic,
        body=body,
        flag=r.flag,
        properties=r.properties,
        queue_id=r.queue_id,
        store_size=r.size,
        queue_offset=r.queue_offset,
        sys_flag=sys_flag,
        born_timestamp=r.born_timestamp,
        born_host=r.born_host,
        store_timestamp=r.store_timestamp,
        store_host=r.store_host,
        msg_id=r.uniq_key or offset_id,
        commit_log_offset=r.physical_offset,
        body_crc=r.body_crc,
        reconsume_times=r.reconsume_times,
        prepared_transaction_offset=r.prepared_transaction_offset,
    )


def iter_records(buf: bytes | bytearray | memoryview) -> Iterator[tuple[int, int]]:
    """``(position, size)`` of each record in back-to-back records (a pull body); stops at the end.

    Raises ValueError when a size field would run past the buffer (a truncated body).
    """
    pos = 0
    end = len(buf)
    while pos + 4 <= end:
        (size,) = _I32.unpack_from(buf, pos)
        if size < MIN_RECORD_SIZE or pos + size > end:
            raise ValueError(f"record at byte {pos} has size {size}; {end - pos} bytes remain")
        yield pos, size
        pos += size
    if pos != end:
        raise ValueError(f"{end - pos} trailing bytes after the last record")


_UNIQ_KEY = MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX
_V6_FLAGS = HOST_V6_FLAGS
# RECORD_HEAD with each IPv4 host as its 8 raw bytes (address + port): one cache key per host
_PULL_HEAD = _V4.struct_of(raw=(("BORNHOST", "BORNHOST_PORT"), ("STOREHOST", "STOREHOST_PORT")))


def _host_of(raw: bytes) -> tuple[str, int]:
    """``(address, port)`` of an IPv4 host's 8 record bytes."""
    return unpack_host(raw[:4]), _I32.unpack_from(raw, 4)[0]


def decode_messages(
    buf: bytes | bytearray | memoryview, *, decompress_body: bool = True
) -> list[MessageExt]:
    """All records of a pull response body as MessageExt objects (client side).

    The consumer's hot path: one fused loop with the structural checks of :func:`check_record`
    (no CRC, as :func:`decode_message_ext` by default) and no intermediate record object; a
    record that fails a check is handed to :func:`decode_message_ext`, which raises the same
    ValueError it always did. The records of a pull share their hosts: each distinct host is
    one shared ``(address, port)`` tuple, looked up only when it changes. The body is sliced as
    ``bytes``, the properties parsed inline (as :func:`ferrymq.message.decode_properties`) and
    each MessageExt gets its slots set directly, without the 18-argument ``__init__`` call
    (``_EXT_FIELDS`` pins the fields; the pull body's records are the client's hottest objects).
    """
    out: list[MessageExt] = []
    append = out.append
    end = len(buf)
    data = buf if isinstance(buf, bytes) else bytes(buf)
    hosts: dict[bytes, tuple[str, int]] = {}
    unpack_head = _PULL_HEAD.unpack_from
    ext = MessageExt
    new = object.__new__
    compressed = MessageSysFlag.COMPRESSED_FLAG
    topic = ""
    last_store = last_born = b""
    store_host = born_host = ("", 0)
    pos = 0
    while pos + 4 <= end:
        if pos + MIN_RECORD_SIZE > end:
            (size,) = _I32.unpack_from(data, pos)
            raise ValueError(f"record at byte {pos} has size {size}; {end - pos} bytes remain")
        (
            total, magic, crc, queue_id, flag, queue_offset, physical_offset, sys_flag,
            born_ts, born, store_ts, store, reconsume, prepared, body_len,
        ) = unpack_head(data, pos)  # fmt: skip
        rec_end = pos + total
        if total < MIN_RECORD_SIZE or rec_end > end:
            raise ValueError(f"record at byte {pos} has size {total}; {end - pos} bytes remain")
        body_pos = pos + BODY_POS
        tpos = body_pos + body_len
        properties: dict[str, str] | None = None
        if magic == MESSAGE_MAGIC_CODE and not sys_flag & _V6_FLAGS and body_len >= 0:
            try:
                topic_len = data[tpos]  # the signed i8 of check_record: above 127 is negative
                ppos = tpos + 1 + topic_len
                props_len = (data[ppos] << 8) | data[ppos + 1]
                # the lengths must add up to the record's size (so every read was inside it)
                if 0 < topic_len <= 127 and props_len < 0x8000 and ppos + 2 + props_len == rec_end:
                    topic = data[tpos + 1 : ppos].decode()
                    properties = {}
                    if props_len:
                        # decode_properties, inlined; a trailing separator closes no item,
                        # so it is left out of the text
                        text = data[
                            ppos + 2 : rec_end - 1 if data[rec_end - 1] == 2 else rec_end
                        ].decode()
                        if "\x02" in text:
                            for item in text.split("\x02"):
                                name, sep, value = item.partition("\x01")
                                if sep and name:
                                    properties[name] = value
                        else:
                            name, sep, value = text.partition("\x01")
                            if sep and name:
                                properties[name] = value
            except (IndexError, UnicodeDecodeError):  # a length past the body, bad UTF-8
                properties = None
        if properties is None:
            # the slow path names what is wrong (and raises)
            append(decode_message_ext(data, pos, rec_end, decompress_body=decompress_body))
            pos = rec_end
            continue
        body = data[body_pos:tpos]
        if decompress_body and sys_flag & compressed:
            try:
                body = zlib.decompress(body)
            except zlib.error as exc:
                raise ValueError(f"record at byte {pos}: compressed body does not inflate") from exc
        if store != last_store:
            if store not in hosts:
                hosts[store] = _host_of(store)
            store_host = hosts[store]
            last_store = store
        if born != last_born:
            if born not in hosts:
                hosts[born] = _host_of(born)
            born_host = hosts[born]
            last_born = born
        msg_id = properties.get(_UNIQ_KEY) or create_message_id(
            (store[:4], store_host[1]), physical_offset
        )
        m = new(ext)
        m.topic = topic
        m.body = body
        m.flag = flag
        m.properties = properties
        m.transaction_id = None
        m.queue_id = queue_id
        m.store_size = total
        m.queue_offset = queue_offset
        m.sys_flag = sys_flag
        m.born_timestamp = born_ts
        m.born_host = born_host
        m.store_timestamp = store_ts
        m.store_host = store_host
        m.msg_id = msg_id
        m.commit_log_offset = physical_offset
        m.body_crc = crc
        m.reconsume_times = reconsume
        m.prepared_transaction_offset = prepared
        append(m)
        pos = rec_end
    if pos != end:
        raise ValueError(f"{end - pos} trailing bytes after the last record")
    return out


# decode_messages sets MessageExt's slots itself: fail at import if the fields move
_EXT_FIELDS = (
    "topic", "body", "flag", "properties", "transaction_id", "queue_id", "store_size",
    "queue_offset", "sys_flag", "born_timestamp", "born_host", "store_timestamp", "store_host",
    "msg_id", "commit_log_offset", "body_crc", "reconsume_times", "prepared_transaction_offset",
)  # fmt: skip
if tuple(f.name for f in fields(MessageExt)) != _EXT_FIELDS:  # pragma: no cover - a guard
    raise ImportError("MessageExt fields moved: update decode_messages and _EXT_FIELDS")
# ... and sets every slot itself (no __init__ call): nothing may run at construction
if hasattr(MessageExt, "__post_init__"):  # pragma: no cover - a guard
    raise ImportError("MessageExt has __post_init__: decode_messages must call the constructor")


def topic_span(buf: object, pos: int) -> tuple[int, int]:
    """``(position, length)`` of TOPIC in a record already known to be valid (any layout)."""
    (sys_flag,) = _SYS_FLAG.unpack_from(buf, pos)  # type: ignore[arg-type]
    head = head_layout(sys_flag)
    (body_len,) = _I32.unpack_from(buf, pos + head.offset["BODYLEN"])  # type: ignore[arg-type]
    (magic,) = _U32.unpack_from(buf, pos + MAGIC_POS)  # type: ignore[arg-type]
    tl = _TOPIC_LEN if magic == MESSAGE_MAGIC_CODE else _TOPIC_LEN_V2
    tpos = pos + head.size + body_len
    (topic_len,) = tl.unpack_from(buf, tpos)  # type: ignore[arg-type]
    return tpos + tl.size, int(topic_len)


def read_physical_offset(buf: object, pos: int) -> int:
    (value,) = _I64.unpack_from(buf, pos + PHYSICAL_OFFSET_POS)  # type: ignore[arg-type]
    return int(value)


def read_store_timestamp(buf: object, pos: int) -> int:
    """STORETIMESTAMP of the record at ``pos`` (its position depends on the born host's width:
    ``buf`` must hold :data:`STORE_TIMESTAMP_END_MAX` bytes from ``pos``, or the record)."""
    (sys_flag,) = _SYS_FLAG.unpack_from(buf, pos)  # type: ignore[arg-type]
    at = head_layout(sys_flag).offset["STORETIMESTAMP"]
    (value,) = _I64.unpack_from(buf, pos + at)  # type: ignore[arg-type]
    return int(value)


def read_magic(buf: object, pos: int) -> int:
    (value,) = _U32.unpack_from(buf, pos + MAGIC_POS)  # type: ignore[arg-type]
    return int(value)
