"""The set of index files: build from dispatch, query by key, expire (upstream ``IndexService``).

Files are named by creation time ``yyyyMMddHHmmssSSS`` as upstream (a later file always gets a
larger name). Keys indexed per message: ``topic#UNIQ_KEY`` and ``topic#<key>`` for each of KEYS.
Building is idempotent: a record at or below the last file's ``endPhyOffset`` is skipped, so
recovery can re-dispatch.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from ferrymq.message import MessageSysFlag, java_string_hash
from ferrymq.store.index_file import VECTOR_MIN_KEYS, IndexFile

log = logging.getLogger(__name__)


def build_key(topic: str, key: str) -> str:
    return f"{topic}#{key}"


class IndexRequest(Protocol):
    """What indexing reads of a dispatched record (``dispatch.DispatchRequest`` has it)."""

    @property
    def topic(self) -> str: ...
    @property
    def keys(self) -> list[str]: ...
    @property
    def uniq_key(self) -> str | None: ...
    @property
    def commit_log_offset(self) -> int: ...
    @property
    def store_timestamp(self) -> int: ...
    @property
    def sys_flag(self) -> int: ...


# Below this many keys of one length, numpy's per-call overhead outweighs the per-key loop.
_VECTOR_MIN_KEYS = 8
_VECTOR_MAX_LEN = 1024  # sum of len * 127 * (2**32 - 1) stays below 2**63


def _hashes_of_one_length(joined: str, n: int, powers: dict[int, np.ndarray]) -> np.ndarray:
    """``java_string_hash`` (signed) of each ``n``-character slice of the ASCII ``joined``."""
    units = np.frombuffer(joined.encode("ascii"), dtype=np.uint8).reshape(-1, n)
    return _hashes_of_rows(units, powers)


def _hashes_of_rows(units: np.ndarray, powers: dict[int, np.ndarray], head: int = 0) -> np.ndarray:
    """``java_string_hash`` (signed) of each row of ASCII bytes (``rows x n``), after a prefix
    whose own hash ``head`` is given: ``sum(c_i * 31**(n-1-i) mod 2**32)`` is exact in int64
    before the final mod, so one matrix product hashes them all, and the prefix adds
    ``head * 31**n``. ``powers`` caches the weight vector per length (the caller owns it)."""
    n = units.shape[1]
    weights = powers.get(n)
    if weights is None:
        weights = np.array([pow(31, n - 1 - k, 1 << 32) for k in range(n)], dtype=np.int64)
        powers[n] = weights
    shift = (head & 0xFFFFFFFF) * pow(31, n, 1 << 32) & 0xFFFFFFFF
    hashes = (units.astype(np.int64) @ weights + shift) & 0xFFFFFFFF
    signed: np.ndarray = np.where(hashes >= 0x80000000, hashes - 0x100000000, hashes)
    return signed


def java_string_hashes(texts: Sequence[str], powers: dict[int, np.ndarray]) -> list[int]:
    """``java_string_hash`` of each text; ASCII texts of one length hashed together
    (:func:`_hashes_of_one_length`)."""
    out = [0] * len(texts)
    by_length: dict[int, list[int]] = {}
    for i, text in enumerate(texts):
        if text.isascii() and len(text) <= _VECTOR_MAX_LEN:
            by_length.setdefault(len(text), []).append(i)
        else:
            out[i] = java_string_hash(text)
    for n, members in by_length.items():
        if len(members) < _VECTOR_MIN_KEYS or n == 0:
            for i in members:
                out[i] = java_string_hash(texts[i])
            continue
        hashes = _hashes_of_one_length("".join([texts[i] for i in members]), n, powers)
        for i, h in zip(members, hashes.tolist(), strict=True):
            out[i] = h
    return out


def index_key_hashes(texts: Sequence[str], powers: dict[int, np.ndarray]) -> np.ndarray:
    """``index_key_hash`` of each text as an int64 array. The usual round (keys of one length,
    ASCII: ``topic#UNIQ_KEY``) is one matrix product with no per-key Python step."""
    joined = "".join(texts)
    n = len(texts[0]) if texts else 0
    if 0 < n <= _VECTOR_MAX_LEN and len(set(map(len, texts))) == 1 and joined.isascii():
        java = _hashes_of_one_length(joined, n, powers)
    else:
        java = np.asarray(java_string_hashes(texts, powers), dtype=np.int64)
    return _index_hashes(java)


def prefixed_key_hashes(
    prefix: str, values: np.ndarray, powers: dict[int, np.ndarray]
) -> np.ndarray:
    """``index_key_hashes`` of ``prefix + value`` for each row of ``values`` (``rows x n``
    ASCII bytes, the reput's columnar UNIQ_KEYs) without building the strings."""
    if values.shape[1] <= _VECTOR_MAX_LEN and prefix.isascii():
        return _index_hashes(_hashes_of_rows(values, powers, java_string_hash(prefix)))
    texts = [prefix + row.tobytes().decode("ascii") for row in values]
    return index_key_hashes(texts, powers)


def _index_hashes(java: np.ndarray) -> np.ndarray:
    """``index_hash_of_java_hash`` of each signed Java hash."""
    hashes: np.ndarray = np.abs(java)
    hashes[hashes > 0x7FFFFFFF] = 0  # abs(MIN_VALUE) -> 0
    return hashes


def _name_for(now_ms: int) -> str:
    stamp = dt.datetime.fromtimestamp(now_ms / 1000, tz=dt.UTC)
    return stamp.strftime("%Y%m%d%H%M%S") + f"{now_ms % 1000:03d}"


class IndexService:
    def __init__(self, root: Path, hash_slot_num: int, index_num: int) -> None:
        self.root = root
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self.files: list[IndexFile] = []
        self._end_phy_offset: int | None = None  # cache; None = recompute from the files
        self._hash_powers: dict[int, np.ndarray] = {}
        # First record of index files dropped at load: dispatch must index again from there.
        self._rebuild_from: int | None = None

    def load(self, last_exit_ok: bool, index_checkpoint_ms: int) -> None:
        """Map the files; after a crash, drop those holding entries newer than the checkpoint
        (IX11): dispatch rebuilds them."""
        if not self.root.is_dir():
            return
        for path in sorted(p for p in self.root.iterdir() if p.is_file() and p.name.isdigit()):
            try:
                f = IndexFile(path, self.hash_slot_num, self.index_num)
            except OSError as exc:
                log.error("index file %s cannot be loaded (%s); it is dropped", path, exc)
                path.unlink(missing_ok=True)
                continue
            if not last_exit_ok and f.end_timestamp > index_checkpoint_ms:
                log.info(
                    "index file %s is newer than the checkpoint; rebuilt by dispatch", path.name
                )
                if f.index_count > 1:
                    begin = f.begin_phy_offset
                    self._rebuild_from = (
                        begin if self._rebuild_from is None else min(self._rebuild_from, begin)
                    )
                f.destroy()
                continue
            self.files.append(f)
        self._end_phy_offset = None

    def drop_beyond(self, phy_offset: int) -> None:
        """Drop files with entries at or beyond a recovered CommitLog end (cut tail)."""
        while self.files and self.files[-1].end_phy_offset >= phy_offset > 0:
            self.files.pop().destroy()
        if phy_offset <= 0:
            self.destroy_all()
        self._end_phy_offset = None

    @property
    def end_phy_offset(self) -> int:
        """CommitLog offset of the last record indexed (-1 when there is no index)."""
        if self._end_phy_offset is None:
            self._end_phy_offset = -1
            for f in reversed(self.files):
                if f.index_count > 1:
                    self._end_phy_offset = f.end_phy_offset
                    break
        return self._end_phy_offset

    def resume_offset(self) -> int:
        """A record offset from which dispatch rebuilds what the index lacks (-1: everything)."""
        end = self.end_phy_offset
        if self._rebuild_from is not None and (end < 0 or self._rebuild_from < end):
            return self._rebuild_from
        return end

    def _writable_file(self, now_ms: int) -> IndexFile:
        last = self.files[-1] if self.files else None
        if last is not None and not last.is_write_full():
            return last
        self.root.mkdir(parents=True, exist_ok=True)
        name = _name_for(now_ms)
        if last is not None and name <= last.path.name:
            name = str(int(last.path.name) + 1)
        f = IndexFile(self.root / name, self.hash_slot_num, self.index_num)
        if last is not None:
            # Carry the position so an empty new file still knows where indexing had got to.
            f.end_phy_offset = last.end_phy_offset
            f.end_timestamp = last.end_timestamp
        self.files.append(f)
        return f

    def build_index(
        self,
        topic: str,
        keys: list[str],
        uniq_key: str | None,
        commit_log_offset: int,
        store_timestamp: int,
        sys_flag: int,
    ) -> None:
        if commit_log_offset <= self.end_phy_offset:
            return
        if (
            MessageSysFlag.get_transaction_value(sys_flag)
            == MessageSysFlag.TRANSACTION_ROLLBACK_TYPE
        ):
            return
        all_keys = ([uniq_key] if uniq_key else []) + keys
        for key in all_keys:
            full = f"{topic}#{key}"
            f = self._writable_file(store_timestamp)
            if not f.put_key(full, commit_log_offset, store_timestamp):
                f = self._writable_file(store_timestamp)
                f.put_key(full, commit_log_offset, store_timestamp)
        if all_keys:
            self._end_phy_offset = commit_log_offset

    def build_index_many(self, requests: Sequence[IndexRequest]) -> None:
        """``build_index`` for the records of one dispatch round (CommitLog order): the keys'
        hashes are computed together, then the entries written in order (a file's share of
        them in one ``IndexFile.put_keys`` when there are enough)."""
        end = self.end_phy_offset
        rollback = MessageSysFlag.TRANSACTION_ROLLBACK_TYPE
        keys: list[str] = []
        offsets: list[int] = []
        stamps: list[int] = []
        for r in requests:
            offset = r.commit_log_offset
            # offsets grow through the round: one comparison with the start suffices
            if offset <= end or (r.sys_flag & rollback) == rollback:
                continue
            topic, uniq, ts = r.topic, r.uniq_key, r.store_timestamp
            if uniq:
                keys.append(f"{topic}#{uniq}")
                offsets.append(offset)
                stamps.append(ts)
            for key in r.keys:
                keys.append(f"{topic}#{key}")
                offsets.append(offset)
                stamps.append(ts)
        if not keys:
            return
        if len(keys) < VECTOR_MIN_KEYS:
            # a few keys (a single send's round): hashed one by one inside put_key
            f = self._writable_file(stamps[0])
            for full, offset, ts in zip(keys, offsets, stamps, strict=True):
                if not f.put_key(full, offset, ts):
                    f = self._writable_file(ts)
                    f.put_key(full, offset, ts)
        else:
            self._put_hashed(index_key_hashes(keys, self._hash_powers), offsets, stamps)
        self._end_phy_offset = offsets[-1]

    def build_index_columns(
        self,
        topic: str,
        uniq_keys: np.ndarray,
        offsets: np.ndarray,
        stamps: np.ndarray,
        sys_flags: np.ndarray,
    ) -> None:
        """``build_index_many`` for a columnar run of records with UNIQ_KEYs and no KEYS
        (``dispatch_columns.DispatchColumns``: ``uniq_keys`` is ``rows x length`` bytes)."""
        rollback = MessageSysFlag.TRANSACTION_ROLLBACK_TYPE
        keep = (offsets > self.end_phy_offset) & ((sys_flags & rollback) != rollback)
        if not keep.all():
            uniq_keys, offsets, stamps = uniq_keys[keep], offsets[keep], stamps[keep]
        if not len(offsets):
            return
        self._put_hashed(
            prefixed_key_hashes(f"{topic}#", uniq_keys, self._hash_powers), offsets, stamps
        )
        self._end_phy_offset = int(offsets[-1])

    def _put_hashed(
        self,
        hashes: np.ndarray,
        offsets: Sequence[int] | np.ndarray,
        stamps: Sequence[int] | np.ndarray,
    ) -> None:
        """Index entries in order, rolling over to a new file when one fills."""
        start = 0
        while start < len(hashes):
            f = self._writable_file(int(stamps[start]))
            start += f.put_keys(hashes[start:], offsets[start:], stamps[start:])

    def query_offsets(
        self, topic: str, key: str, max_num: int, begin: int, end: int
    ) -> tuple[list[int], int, int]:
        """``(phy offsets newest first, last update timestamp, last update phy offset)``."""
        offsets: list[int] = []
        last_ts = 0
        last_phy = 0
        full = build_key(topic, key)
        for i, f in enumerate(reversed(self.files)):
            if i == 0:
                last_ts = f.end_timestamp
                last_phy = f.end_phy_offset
            if f.is_time_matched(begin, end):
                for phy in f.select_phy_offsets(full, max_num - len(offsets), begin, end):
                    if phy not in offsets:
                        offsets.append(phy)
            if f.begin_timestamp < begin or len(offsets) >= max_num:
                break
        return offsets, last_ts, last_phy

    def delete_expired(self, commit_log_min_offset: int) -> int:
        """Delete files (never the last) whose entries all point before the CommitLog start."""
        deleted = 0
        while len(self.files) > 1 and self.files[0].end_phy_offset < commit_log_min_offset:
            if not self.files[0].destroy(3000):
                break
            self.files.pop(0)
            deleted += 1
            self._end_phy_offset = None
        return deleted

    def flush(self, data: bool = True) -> int:
        """Flush every file; returns the end timestamp now on disk. Blocking: run in a thread.

        ``data=False`` (the periodic rounds between checkpoints) syncs only each header: after a
        crash a file whose header is newer than the checkpoint is dropped and rebuilt (``load``),
        so only the header must stay current on disk; syncing the entries too wrote ~2k random
        hash-slot pages a second at 2k msg/s, whose writeback stalled appends (latency tail)."""
        files = list(self.files)
        ts = files[-1].end_timestamp if files else 0
        for f in files:
            f.flush(data)
        return ts

    def destroy_all(self) -> None:
        for f in self.files:
            f.destroy()
        self.files = []
        self._end_phy_offset = None

    def shutdown(self) -> None:
        for f in self.files:
            f.close()
