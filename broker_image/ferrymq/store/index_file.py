"""One hash-index file (upstream ``index/IndexFile`` + ``IndexHeader``).

Layout::

    IndexHeader (40 bytes):  beginTimestamp i64 | endTimestamp i64 | beginPhyOffset i64
                             | endPhyOffset i64 | hashSlotCount i32 | indexCount i32
    hashSlotNum slots x 4:   number of the newest entry whose key hashes to the slot (0 = empty)
    indexNum entries x 20:   keyHash i32 | phyOffset i64 | timeDiff i32 (s since beginTimestamp)
                             | prevIndex i32 (older entry of the same slot, 0 = none)

Entry 0 is never used (``indexCount`` starts at 1) so that 0 can mean "empty". Keys are hashed
with Java ``String.hashCode`` made non-negative, as upstream.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ferrymq.message import java_string_hash
from ferrymq.store.mapped_file import MappedFile
from ferrymq.store.record_layout import Field, Layout

INDEX_HEADER = struct.Struct(
    ">"
    "q"  # beginTimestamp
    "q"  # endTimestamp
    "q"  # beginPhyOffset
    "q"  # endPhyOffset
    "i"  # hashSlotCount
    "i"  # indexCount
)
INDEX_HEADER_SIZE = INDEX_HEADER.size
HASH_SLOT = struct.Struct(">i")
HASH_SLOT_SIZE = HASH_SLOT.size
INDEX_ENTRY_LAYOUT = Layout(
    (
        Field("KEYHASH", "i"),
        Field("PHYOFFSET", "q"),
        Field("TIMEDIFF", "i"),  # seconds since beginTimestamp
        Field("PREVINDEX", "i"),
    )
)
INDEX_ENTRY = INDEX_ENTRY_LAYOUT.struct
INDEX_SIZE = INDEX_ENTRY.size
INVALID_INDEX = 0

assert INDEX_HEADER_SIZE == 40 and INDEX_SIZE == 20

# INDEX_ENTRY as a numpy record (big-endian, unpadded): a round's entries are written at once
ENTRY_DTYPE = INDEX_ENTRY_LAYOUT.numpy_dtype(
    {"KEYHASH": "hash", "PHYOFFSET": "phy", "TIMEDIFF": "diff", "PREVINDEX": "prev"}
)
# below this many keys, put_key per key is cheaper than numpy's per-call overhead
VECTOR_MIN_KEYS = 8


def index_key_hash(key: str) -> int:
    """Upstream ``indexKeyHashMethod``: ``abs(key.hashCode())``, with MIN_VALUE mapped to 0."""
    return index_hash_of_java_hash(java_string_hash(key))


def index_hash_of_java_hash(java_hash: int) -> int:
    """``index_key_hash`` from an already computed ``hashCode()`` (batched hashing)."""
    h = abs(java_hash)
    return 0 if h > 0x7FFFFFFF else h


def index_file_size(hash_slot_num: int, index_num: int) -> int:
    return INDEX_HEADER_SIZE + hash_slot_num * HASH_SLOT_SIZE + index_num * INDEX_SIZE


class IndexFile:
    def __init__(self, path: Path, hash_slot_num: int, index_num: int) -> None:
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        # Header and hash slots are written anywhere at once: reserved up front. Entries fill
        # from the front: reserved in steps as they are written (put_key/put_keys).
        self._entries_at = INDEX_HEADER_SIZE + hash_slot_num * HASH_SLOT_SIZE
        self.mapped_file = MappedFile(
            path, index_file_size(hash_slot_num, index_num), reserve=self._entries_at
        )
        self._buf = self.mapped_file.buffer
        header = [int(v) for v in INDEX_HEADER.unpack_from(self._buf, 0)]
        self.begin_timestamp: int = header[0]
        self.end_timestamp: int = header[1]
        self.begin_phy_offset: int = header[2]
        self.end_phy_offset: int = header[3]
        self.hash_slot_count: int = header[4]
        self.index_count: int = header[5]
        if self.index_count <= 0:
            self.index_count = 1  # a new file: entry 0 is the sentinel
        self.mapped_file.set_positions(self.mapped_file.file_size)
        self.mapped_file.flushed_position = 0

    @property
    def path(self) -> Path:
        return self.mapped_file.path

    def is_write_full(self) -> bool:
        return self.index_count >= self.index_num

    def _write_header(self) -> None:
        INDEX_HEADER.pack_into(
            self._buf,
            0,
            self.begin_timestamp,
            self.end_timestamp,
            self.begin_phy_offset,
            self.end_phy_offset,
            self.hash_slot_count,
            self.index_count,
        )

    def put_key(
        self, key: str, phy_offset: int, store_timestamp: int, key_hash: int | None = None
    ) -> bool:
        """Add one entry; False when the file is full (the caller starts a new file).
        ``key_hash``: ``index_key_hash(key)`` when the caller already has it."""
        if self.index_count >= self.index_num:
            return False
        if key_hash is None:
            key_hash = index_key_hash(key)
        slot_pos = key_hash % self.hash_slot_num
        abs_slot = INDEX_HEADER_SIZE + slot_pos * HASH_SLOT_SIZE
        (slot_value,) = HASH_SLOT.unpack_from(self._buf, abs_slot)
        if slot_value <= INVALID_INDEX or slot_value > self.index_count:
            slot_value = INVALID_INDEX
        if self.begin_timestamp <= 0 or self.index_count <= 1:
            time_diff = 0
        else:
            time_diff = (store_timestamp - self.begin_timestamp) // 1000
            time_diff = min(max(time_diff, 0), 0x7FFFFFFF)
        abs_index = (
            INDEX_HEADER_SIZE + self.hash_slot_num * HASH_SLOT_SIZE + self.index_count * INDEX_SIZE
        )
        self.mapped_file.ensure_reserved(abs_index + INDEX_SIZE)
        INDEX_ENTRY.pack_into(self._buf, abs_index, key_hash, phy_offset, time_diff, slot_value)
        HASH_SLOT.pack_into(self._buf, abs_slot, self.index_count)
        if self.index_count <= 1:
            self.begin_phy_offset = phy_offset
            self.begin_timestamp = store_timestamp
        self.hash_slot_count += 1
        self.index_count += 1
        self.end_phy_offset = phy_offset
        self.end_timestamp = store_timestamp
        self._write_header()
        self.mapped_file.store_timestamp = store_timestamp
        return True

    def put_keys(
        self,
        key_hashes: np.ndarray,
        phy_offsets: Sequence[int] | np.ndarray,
        store_timestamps: Sequence[int] | np.ndarray,
    ) -> int:
        """``put_key`` for many keys at once (``index_key_hash`` values, in entry order);
        returns how many fit (fewer than given when the file fills: the caller rolls over).

        Same bytes as one ``put_key`` per key: each entry's prevIndex is the newest earlier
        entry of its slot (within these keys, else the slot's current value) and each slot ends
        up naming its newest entry.
        """
        count = self.index_count
        n = min(len(key_hashes), self.index_num - count)
        if n <= 0:
            return 0
        # before the slots change: a full disk leaves this file as it was
        self.mapped_file.ensure_reserved(self._entries_at + (count + n) * INDEX_SIZE)
        hashes = key_hashes[:n]
        slot_num = self.hash_slot_num
        slots = hashes % slot_num
        numbers = np.arange(count, count + n, dtype=np.int64)
        slot_table = np.frombuffer(self._buf, ">i4", slot_num, INDEX_HEADER_SIZE)
        try:
            prev = slot_table[slots].astype(np.int64)
            prev[(prev <= INVALID_INDEX) | (prev > count)] = INVALID_INDEX
            # keys sharing a slot chain to each other: sort by slot (stable keeps entry order)
            order = np.argsort(slots, kind="stable")
            by_slot = slots[order]
            repeat = by_slot[1:] == by_slot[:-1]
            chained = prev[order]
            chained[1:][repeat] = numbers[order[:-1]][repeat]
            prev[order] = chained
            newest = np.append(~repeat, True)
            slot_table[by_slot[newest]] = numbers[order[newest]]
        finally:
            del slot_table  # the map cannot close while a numpy view exports its buffer
        stamps = np.asarray(store_timestamps[:n], dtype=np.int64)
        begin = self.begin_timestamp if count > 1 else int(stamps[0])
        if begin <= 0:
            diffs = np.zeros(n, dtype=np.int64)
        else:
            diffs = np.clip((stamps - begin) // 1000, 0, 0x7FFFFFFF)
        if count <= 1:
            diffs[0] = 0
        entries = np.empty(n, ENTRY_DTYPE)
        entries["hash"] = hashes
        entries["phy"] = phy_offsets[:n]
        entries["diff"] = diffs
        entries["prev"] = prev
        at = INDEX_HEADER_SIZE + slot_num * HASH_SLOT_SIZE + count * INDEX_SIZE
        self._buf[at : at + n * INDEX_SIZE] = entries.tobytes()
        if count <= 1:
            self.begin_phy_offset = int(phy_offsets[0])
            self.begin_timestamp = begin
        self.hash_slot_count += n
        self.index_count += n
        self.end_phy_offset = int(phy_offsets[n - 1])
        self.end_timestamp = int(stamps[n - 1])
        self._write_header()
        self.mapped_file.store_timestamp = self.end_timestamp
        return n

    def is_time_matched(self, begin: int, end: int) -> bool:
        return (
            begin <= self.begin_timestamp <= end
            or begin <= self.end_timestamp <= end
            or (self.begin_timestamp <= begin and end <= self.end_timestamp)
        )

    def select_phy_offsets(self, key: str, max_num: int, begin: int, end: int) -> list[int]:
        """Offsets of entries whose key hash matches and whose time is in [begin, end], newest
        first. Hash collisions are possible: callers compare the stored keys."""
        result: list[int] = []
        if not self.mapped_file.hold():
            return result
        try:
            key_hash = index_key_hash(key)
            slot_pos = key_hash % self.hash_slot_num
            (slot_value,) = HASH_SLOT.unpack_from(
                self._buf, INDEX_HEADER_SIZE + slot_pos * HASH_SLOT_SIZE
            )
            if (
                slot_value <= INVALID_INDEX
                or slot_value > self.index_count
                or self.index_count <= 1
            ):
                return result
            current = slot_value
            entries_base = INDEX_HEADER_SIZE + self.hash_slot_num * HASH_SLOT_SIZE
            while len(result) < max_num:
                hash_read, phy, time_diff, prev = INDEX_ENTRY.unpack_from(
                    self._buf, entries_base + current * INDEX_SIZE
                )
                if time_diff < 0:
                    break
                time_read = self.begin_timestamp + time_diff * 1000
                # Entries keep second precision; widen by a second so the end bound is inclusive.
                if hash_read == key_hash and begin - 999 <= time_read <= end:
                    result.append(phy)
                if (
                    prev <= INVALID_INDEX
                    or prev > self.index_count
                    or prev == current
                    or time_read < begin - 999
                ):
                    break
                current = prev
            return result
        finally:
            self.mapped_file.release()

    def flush(self, data: bool = True) -> None:
        """Blocking: run in a thread. ``data=False`` syncs the header's page only (see
        :meth:`IndexService.flush`)."""
        mf = self.mapped_file
        if mf.hold():
            try:
                self._write_header()
                if data:
                    mf.flushed_position = 0  # force: the file is always "full" for the flush rule
                    mf.flush(0)
                else:
                    mf.sync_range(0, INDEX_HEADER_SIZE)
            finally:
                mf.release()

    def destroy(self, interval_forcibly_ms: int = 0) -> bool:
        ok = self.mapped_file.destroy(interval_forcibly_ms)
        if not ok:
            ok = self.mapped_file.destroy(0)
        return ok

    def close(self) -> None:
        self.mapped_file.close()
