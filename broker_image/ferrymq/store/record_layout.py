"""The CommitLog record layout, declared once (upstream ``MessageDecoder``,
``CommitLog.DefaultAppendMessageCallback``, ``CommitLog.calMsgLength``, ``MessageVersion``).

Every writer, reader and numpy dtype of a record is derived from :data:`HEAD`: the struct
formats (the whole head, or the fields one reader needs with the others skipped, or spans of
it as raw bytes), the field positions, the record sizes. Change the table and they all follow.

The head is fixed-size for a given pair of host widths: BORNHOST and STOREHOST are a 4-byte
IPv4 address (+ i32 port) unless SYSFLAG has ``BORNHOST_V6_FLAG`` / ``STOREHOSTADDRESS_V6_FLAG``,
which make that address 16 bytes (IPv6), as upstream. So there are four head layouts
(:func:`head_layout` picks one by SYSFLAG); the fields before BORNHOST sit at the same place
in all of them, which is how a reader finds SYSFLAG before it knows the layout.

After the head come the variable parts: BODY (BODYLEN bytes), TOPICLEN + TOPIC, PROPERTIESLEN +
PROPERTIES. TOPICLEN is an i8 under MAGICCODE v1 (``MESSAGE_MAGIC_CODE``) and an i16 under v2
(``MESSAGE_MAGIC_CODE_V2``, upstream ``MessageVersion.MESSAGE_VERSION_V2``, which upstream
writes only for topics longer than 127 bytes). ferrymq writes v1 (its topics are at most 127
bytes) and reads both. The IPv6 hosts do not change the magic code: upstream signals them with
SYSFLAG alone.

A file ends with a blank record: TOTALSIZE (the rest of the file) + ``BLANK_MAGIC_CODE``.

The SEND_BATCH_MESSAGE body item (upstream ``MessageDecoder.encodeMessage``) is laid out here
too (:data:`BATCH_ITEM`, from the declaration in :mod:`ferrymq.message`, whose codec the client
uses): the broker turns each item into a record.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ferrymq.message import BATCH_ITEM_FIELDS, MessageSysFlag

MESSAGE_MAGIC_CODE = 0xDAA320A7
"""MAGICCODE v1 (upstream ``MESSAGE_MAGIC_CODE``, -626843481): TOPICLEN is an i8."""
MESSAGE_MAGIC_CODE_V2 = 0xDAA320AB
"""MAGICCODE v2 (upstream ``MESSAGE_MAGIC_CODE_V2``, -626843477): TOPICLEN is an i16."""
BLANK_MAGIC_CODE = 0xCBD43194
"""MAGICCODE of the end-of-file blank record (upstream ``BLANK_MAGIC_CODE``)."""
MESSAGE_MAGIC_CODES = (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2)

BORNHOST_V6_FLAG = MessageSysFlag.BORNHOST_V6_FLAG
STOREHOSTADDRESS_V6_FLAG = MessageSysFlag.STOREHOSTADDRESS_V6_FLAG
HOST_V6_FLAGS = BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG
"""The SYSFLAG bits that choose the head layout."""

IPV4_ADDRESS_BYTES = 4
IPV6_ADDRESS_BYTES = 16


@dataclass(frozen=True, slots=True)
class Field:
    """One field of the head: its upstream name and its big-endian ``struct`` code. A host
    (``code == "host"``) is an address of 4 or 16 bytes (by ``v6_flag`` in SYSFLAG) followed
    by an i32 port; it is two slots, ``<name>`` (the address) and ``<name>_PORT``."""

    name: str
    code: str
    v6_flag: int = 0


HEAD: tuple[Field, ...] = (
    Field("TOTALSIZE", "i"),  # the whole record, this field included
    Field("MAGICCODE", "I"),  # MESSAGE_MAGIC_CODE(_V2) / BLANK_MAGIC_CODE
    Field("BODYCRC", "i"),  # crc32(body) & 0x7FFFFFFF (upstream UtilAll.crc32)
    Field("QUEUEID", "i"),
    Field("FLAG", "i"),  # the application flag
    Field("QUEUEOFFSET", "q"),  # logical offset in the ConsumeQueue
    Field("PHYSICALOFFSET", "q"),  # offset of this record in the CommitLog
    Field("SYSFLAG", "i"),  # MessageSysFlag bits
    Field("BORNTIMESTAMP", "q"),  # ms
    Field("BORNHOST", "host", BORNHOST_V6_FLAG),
    Field("STORETIMESTAMP", "q"),  # ms
    Field("STOREHOST", "host", STOREHOSTADDRESS_V6_FLAG),
    Field("RECONSUMETIMES", "i"),
    Field("PREPAREDTRANSACTIONOFFSET", "q"),
    Field("BODYLEN", "i"),  # then BODY
)
"""The fixed part of a record, in order, up to and including BODYLEN."""

TOPIC_LEN_CODES: Mapping[int, str] = {MESSAGE_MAGIC_CODE: "b", MESSAGE_MAGIC_CODE_V2: "h"}
"""TOPICLEN's struct code under each message MAGICCODE (then TOPIC, UTF-8)."""
PROPERTIES_LEN_CODE = "h"
"""PROPERTIESLEN's struct code (then PROPERTIES, UTF-8 ``k\\x01v\\x02``)."""

BLANK: tuple[Field, ...] = (Field("TOTALSIZE", "i"), Field("MAGICCODE", "I"))
"""The end-of-file blank record (TOTALSIZE = the rest of the file); a writer keeps room for it."""

BATCH_ITEM: tuple[Field, ...] = tuple(Field(name, code) for name, code in BATCH_ITEM_FIELDS)
"""One item of a SEND_BATCH_MESSAGE body (upstream ``MessageDecoder.encodeMessage``), then BODY,
PROPERTIESLEN (``BATCH_PROPERTIES_LEN_CODE``), PROPERTIES: a wire body, declared with its codec in
:mod:`ferrymq.message` (the client encodes it there) and laid out here for the broker's batch put."""

_NUMPY_TYPES = {"b": "i1", "h": ">i2", "i": ">i4", "I": ">u4", "q": ">i8"}


@dataclass(frozen=True, slots=True)
class Slot:
    """One ``struct`` item of a layout: name, code (``"4s"`` for an address), position, size."""

    name: str
    code: str
    offset: int
    size: int


class Layout:
    """A fixed sequence of big-endian fields, with everything derived from it: positions,
    size, the full ``struct``, and partial structs (:meth:`struct_of`)."""

    __slots__ = ("offset", "size", "slots", "struct")

    def __init__(self, fields: Iterable[Field], sys_flag: int = 0) -> None:
        slots: list[Slot] = []
        at = 0
        for f in fields:
            if f.code == "host":
                width = IPV6_ADDRESS_BYTES if sys_flag & f.v6_flag else IPV4_ADDRESS_BYTES
                items: tuple[tuple[str, str], ...] = (
                    (f.name, f"{width}s"),
                    (f"{f.name}_PORT", "i"),
                )
            else:
                items = ((f.name, f.code),)
            for name, code in items:
                size = struct.calcsize(">" + code)
                slots.append(Slot(name, code, at, size))
                at += size
        self.slots: tuple[Slot, ...] = tuple(slots)
        self.offset: dict[str, int] = {s.name: s.offset for s in slots}
        self.size = at
        self.struct = struct.Struct(self.format())

    def end_of(self, name: str) -> int:
        """Position right after field ``name``."""
        slot = self.slots[self._index(name)]
        return slot.offset + slot.size

    def _index(self, name: str) -> int:
        for i, s in enumerate(self.slots):
            if s.name == name:
                return i
        raise KeyError(f"no field {name!r} in the layout; fields: {[s.name for s in self.slots]}")

    def format(self, keep: Iterable[str] | None = None, raw: Iterable[tuple[str, str]] = ()) -> str:
        """A ``struct`` format over the whole layout: the fields of ``keep`` (all when None)
        unpacked in order, each ``(first, last)`` span of ``raw`` as one bytes item, every other
        field skipped (pad bytes)."""
        kept = None if keep is None else set(keep)
        spans = [(self._index(a), self._index(b)) for a, b in raw]
        parts: list[str] = []
        pad = 0
        i = 0
        while i < len(self.slots):
            span = next((s for s in spans if s[0] == i), None)
            if span is not None:
                width = self.slots[span[1]].offset + self.slots[span[1]].size - self.slots[i].offset
                code, i = f"{width}s", span[1] + 1
            else:
                slot = self.slots[i]
                i += 1
                if kept is not None and slot.name not in kept:
                    pad += slot.size
                    continue
                code = slot.code
            if pad:
                parts.append(f"{pad}x")
                pad = 0
            parts.append(code)
        if pad:
            parts.append(f"{pad}x")
        return ">" + "".join(parts)

    def struct_of(
        self, keep: Iterable[str] | None = None, raw: Iterable[tuple[str, str]] = ()
    ) -> struct.Struct:
        """:meth:`format` compiled (callers build theirs once, at import)."""
        return struct.Struct(self.format(keep, raw))

    def field_struct(self, name: str) -> struct.Struct:
        """Field ``name`` alone, read from the start of a record (no bytes past it needed)."""
        slot = self.slots[self._index(name)]
        return struct.Struct(f">{slot.offset}x{slot.code}" if slot.offset else f">{slot.code}")

    def span(self, first: str, last: str) -> struct.Struct:
        """The fields from ``first`` to ``last`` (inclusive), alone (to pack that part)."""
        a, b = self._index(first), self._index(last)
        return struct.Struct(">" + "".join(s.code for s in self.slots[a : b + 1]))

    def numpy_dtype(self, names: Mapping[str, str]) -> Any:
        """A numpy structured dtype over one head (``itemsize`` = :attr:`size`) holding the
        fields ``names`` maps (field name -> dtype field name), typed by their codes."""
        import numpy as np

        picked = [s for s in self.slots if s.name in names]
        missing = set(names) - {s.name for s in picked}
        if missing:
            raise KeyError(f"no field(s) {sorted(missing)} in the layout")
        return np.dtype(
            {
                "names": [names[s.name] for s in picked],
                "formats": [_NUMPY_TYPES.get(s.code, f"S{s.size}") for s in picked],
                "offsets": [s.offset for s in picked],
                "itemsize": self.size,
            }
        )


# The four head layouts, by the host bits of SYSFLAG (0: both IPv4 ... both IPv6).
_HEADS: dict[int, Layout] = {
    bits: Layout(HEAD, bits)
    for bits in (0, BORNHOST_V6_FLAG, STOREHOSTADDRESS_V6_FLAG, HOST_V6_FLAGS)
}
HEAD_V4 = _HEADS[0]
"""The head with IPv4 born and store hosts (upstream's v1 layout; what ferrymq writes for IPv4)."""
BLANK_LAYOUT = Layout(BLANK)
BATCH_ITEM_LAYOUT = Layout(BATCH_ITEM)


def head_layout(sys_flag: int) -> Layout:
    """The head layout of a record with this SYSFLAG."""
    return _HEADS[sys_flag & HOST_V6_FLAGS]


def host_flags(born_address_len: int, store_address_len: int) -> int:
    """The SYSFLAG host bits for addresses of these lengths (4 or 16 bytes)."""
    return (BORNHOST_V6_FLAG if born_address_len == IPV6_ADDRESS_BYTES else 0) | (
        STOREHOSTADDRESS_V6_FLAG if store_address_len == IPV6_ADDRESS_BYTES else 0
    )


def topic_len_size(magic: int) -> int:
    """Bytes of TOPICLEN under a message MAGICCODE."""
    return struct.calcsize(">" + TOPIC_LEN_CODES[magic])


PROPERTIES_LEN_SIZE = struct.calcsize(">" + PROPERTIES_LEN_CODE)
MAX_TOPIC_BYTES: Mapping[int, int] = {
    magic: (1 << (8 * topic_len_size(magic) - 1)) - 1 for magic in MESSAGE_MAGIC_CODES
}
"""The longest TOPIC (UTF-8 bytes) each MAGICCODE can hold: TOPICLEN is signed."""
MAX_PROPERTIES_BYTES = (1 << (8 * PROPERTIES_LEN_SIZE - 1)) - 1


def min_record_size(sys_flag: int = 0, magic: int = MESSAGE_MAGIC_CODE) -> int:
    """TOTALSIZE of a record with empty BODY, TOPIC and PROPERTIES (upstream ``calMsgLength``
    with zero lengths): 91 for IPv4 hosts and v1."""
    return head_layout(sys_flag).size + topic_len_size(magic) + PROPERTIES_LEN_SIZE


def record_size(
    body_len: int,
    topic_len: int,
    properties_len: int,
    sys_flag: int = 0,
    magic: int = MESSAGE_MAGIC_CODE,
) -> int:
    """TOTALSIZE of a record with these lengths (upstream ``CommitLog.calMsgLength``)."""
    return min_record_size(sys_flag, magic) + body_len + topic_len + properties_len
