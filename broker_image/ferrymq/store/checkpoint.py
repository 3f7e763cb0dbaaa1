"""The 4 KiB checkpoint file (upstream ``StoreCheckpoint``), as a named struct.

Layout (big-endian, rest of the page zero)::

    physicMsgTimestamp   i64  store time of the last CommitLog record known on disk
    logicsMsgTimestamp   i64  same for the ConsumeQueues
    indexMsgTimestamp    i64  same for the index files
    masterFlushedOffset  i64  (upstream field, kept for layout compatibility)
    confirmPhyOffset     i64  the confirm offset (controller mode): dispatch stops there at
                              the next start until the HA layer moves it

A page shorter than the struct (a file from before a field existed) loads the fields it holds;
the others read 0. Every page this code wrote is 4 KiB, so a file from before the confirm offset
was saved reads confirmPhyOffset 0: nothing past what the queues already hold is dispatched until
the broker learns its role (safe, never more than was confirmed).

Setters only change memory; :meth:`StoreCheckpoint.flush` writes the page and fsyncs (blocking:
run it in a thread) and raises on failure rather than swallowing it.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

CHECKPOINT = struct.Struct(
    ">"
    "q"  # physicMsgTimestamp
    "q"  # logicsMsgTimestamp
    "q"  # indexMsgTimestamp
    "q"  # masterFlushedOffset
    "q"  # confirmPhyOffset
)
CHECKPOINT_FILE_SIZE = 4096
# Upstream subtracts 3 s from the checkpoint to be safe against clock granularity.
RECOVERY_MARGIN_MS = 3000


class CheckpointError(OSError):
    """The checkpoint could not be read or written."""


@dataclass(slots=True)
class CheckpointValues:
    physic_msg_timestamp: int = 0
    logics_msg_timestamp: int = 0
    index_msg_timestamp: int = 0
    master_flushed_offset: int = 0
    confirm_phy_offset: int = 0


class StoreCheckpoint:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.values = CheckpointValues()
        if path.exists():
            try:
                data = path.read_bytes()
            except OSError as exc:
                raise CheckpointError(f"{path}: cannot read: {exc.strerror}") from exc
            fields = min(len(data), CHECKPOINT.size) // 8
            if fields:
                self.values = CheckpointValues(*struct.unpack_from(f">{fields}q", data, 0))

    @property
    def physic_msg_timestamp(self) -> int:
        return self.values.physic_msg_timestamp

    @physic_msg_timestamp.setter
    def physic_msg_timestamp(self, value: int) -> None:
        self.values.physic_msg_timestamp = value

    @property
    def logics_msg_timestamp(self) -> int:
        return self.values.logics_msg_timestamp

    @logics_msg_timestamp.setter
    def logics_msg_timestamp(self, value: int) -> None:
        self.values.logics_msg_timestamp = value

    @property
    def index_msg_timestamp(self) -> int:
        return self.values.index_msg_timestamp

    @index_msg_timestamp.setter
    def index_msg_timestamp(self, value: int) -> None:
        self.values.index_msg_timestamp = value

    @property
    def confirm_phy_offset(self) -> int:
        return self.values.confirm_phy_offset

    @confirm_phy_offset.setter
    def confirm_phy_offset(self, value: int) -> None:
        self.values.confirm_phy_offset = value

    def min_timestamp(self, include_index: bool = False) -> int:
        """The time before which everything is known durable, minus the safety margin."""
        stamps = [self.values.physic_msg_timestamp, self.values.logics_msg_timestamp]
        if include_index:
            stamps.append(self.values.index_msg_timestamp)
        return max(0, min(stamps) - RECOVERY_MARGIN_MS)

    def encode(self) -> bytes:
        v = self.values
        page = bytearray(CHECKPOINT_FILE_SIZE)
        CHECKPOINT.pack_into(
            page,
            0,
            v.physic_msg_timestamp,
            v.logics_msg_timestamp,
            v.index_msg_timestamp,
            v.master_flushed_offset,
            v.confirm_phy_offset,
        )
        return bytes(page)

    def flush(self) -> None:
        """Write the page in place and fsync. Blocking; raises CheckpointError."""
        page = self.encode()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                # One page, one pwrite: a torn write can only mix old and new timestamps, each
                # of which was true when written, which recovery tolerates.
                if os.pwrite(fd, page, 0) != len(page):
                    raise CheckpointError(f"{self.path}: short write")
                os.fsync(fd)
            finally:
                os.close(fd)
        except CheckpointError:
            raise
        except OSError as exc:
            raise CheckpointError(f"{self.path}: cannot write: {exc.strerror}") from exc
