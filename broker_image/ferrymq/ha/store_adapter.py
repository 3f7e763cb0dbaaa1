"""The replication port (:mod:`ferrymq.ha.store_port`) over the store's ``CommitLog``.

The master reads copies of at most one transfer batch (32 KiB): copying releases the file at once,
so a slow slave never pins a CommitLog file that retention wants to delete. A slave appends through
``MessageStore.append_to_commit_log`` (:meth:`CommitLogReplication.for_store`), which also points the
store's dispatcher (reput) at the new bytes so ConsumeQueues and the index follow.
"""

from __future__ import annotations

from collections.abc import Callable

from ferrymq.store import record as rec
from ferrymq.store.commit_log import CommitLog
from ferrymq.store.message_store import MessageStore

_HEAD = rec.BLANK_HEAD  # TOTALSIZE, MAGICCODE (the first two fields of every record)


class CommitLogReplication:
    """Both ends of the port: a master reads through it, a slave appends through it."""

    def __init__(
        self,
        commit_log: CommitLog,
        *,
        append: Callable[[int, bytes], bool] | None = None,
    ) -> None:
        self._commit_log = commit_log
        self._append = append or commit_log.append_data

    @classmethod
    def for_store(cls, store: MessageStore) -> CommitLogReplication:
        """Over a whole store: slave appends go through the store so dispatch follows them."""
        return cls(store.commit_log, append=store.append_to_commit_log)

    @property
    def file_size(self) -> int:
        return self._commit_log.mapped_file_size

    def max_offset(self) -> int:
        return self._commit_log.max_offset

    def min_offset(self) -> int:
        return max(self._commit_log.min_offset, 0)

    def read(self, offset: int, max_bytes: int) -> bytes | None:
        sel = self._commit_log.get_data(offset)
        if sel is None:
            return None
        try:
            # get_data(0) falls back to the first file: never send bytes under the wrong offset.
            if sel.start_offset != offset or sel.size == 0:
                return None
            return bytes(sel.buffer[:max_bytes])
        finally:
            sel.release()

    def is_record_boundary(self, offset: int) -> bool:
        if offset % self.file_size == 0:
            return True
        sel = self._commit_log.get_message(offset, _HEAD.size)
        if sel is None:
            return False
        try:
            total, magic = (int(v) for v in _HEAD.unpack_from(sel.buffer, 0))
        finally:
            sel.release()
        if magic == rec.BLANK_MAGIC_CODE:
            return total > 0
        return magic in rec.MESSAGE_MAGIC_CODES and total >= rec.MIN_RECORD_SIZE

    def append(self, offset: int, data: bytes) -> bool:
        return self._append(offset, data)
