"""The epoch file of a controller-mode broker (upstream ``EpochFileCache``): which master epoch
wrote which part of the CommitLog, as ``epoch -> start offset`` entries, and the pure decision of
what a replica must truncate before it follows another master.

Epoch ``E`` covers ``[start(E), start(next entry))``; the last entry runs to the CommitLog's end.
Data written before the first entry (a group that ran without a controller) counts as epoch 0.
The file is ``<storePathRootDir>/epochFileCheckpoint`` as JSON, replaced atomically (temp file,
fsync, rename) on every change.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import orjson

from ferrymq.store.json_file import write_bytes_atomic

log = logging.getLogger(__name__)

FILE_NAME = "epochFileCheckpoint"


@dataclass(frozen=True, slots=True)
class EpochEntry:
    epoch: int
    start_offset: int


def _end_of(entries: Sequence[EpochEntry], index: int, max_offset: int) -> int:
    if index + 1 < len(entries):
        return entries[index + 1].start_offset
    return max_offset


def truncate_offset(
    local: Sequence[EpochEntry],
    local_max: int,
    remote: Sequence[EpochEntry],
    remote_max: int,
) -> int:
    """Where a replica's CommitLog must end before it follows the master described by ``remote``.

    Find the last epoch both lists have (epoch numbers are issued once, by the controller, and
    a replica copies its master's entries, so the same number means the same writer); the data
    both hold for it ends at the smaller of its two ends. Everything the replica has beyond that
    was written by a master that lost its epoch and never reached the new master: it is cut.
    When no epoch is shared, only the pre-controller data (epoch 0) is common.
    Returns ``local_max`` when nothing needs cutting.
    """
    local_ = [EpochEntry(0, 0), *local]
    remote_ = [EpochEntry(0, 0), *remote]
    remote_index = {e.epoch: i for i, e in enumerate(remote_)}
    for li in range(len(local_) - 1, -1, -1):
        ri = remote_index.get(local_[li].epoch)
        if ri is None:
            continue
        common_end = min(_end_of(local_, li, local_max), _end_of(remote_, ri, remote_max))
        return min(local_max, common_end)
    return 0  # unreachable: epoch 0 is always shared


def entries_up_to(entries: Sequence[EpochEntry], max_offset: int) -> list[EpochEntry]:
    """The entries a replica holding data up to ``max_offset`` may keep: an epoch starting after
    its end wrote nothing it has (such an entry would claim data it never received)."""
    return [e for e in entries if e.start_offset <= max_offset]


def upstream_entries(entries: Sequence[EpochEntry]) -> list[EpochEntry]:
    """The entries upstream's EpochFileCache would hold for the same history: its appendEntry
    refuses an epoch that does not start past the last entry's start (a master elected before
    the previous epoch wrote anything), so of entries sharing a start offset only the first
    stays. What GET_BROKER_EPOCH_CACHE lists (mqadmin getBrokerEpoch); ferrymq's truncation
    keeps using every entry (an epoch that wrote nothing still tells whose data follows)."""
    kept: list[EpochEntry] = []
    for entry in entries:
        if not kept or entry.start_offset > kept[-1].start_offset:
            kept.append(entry)
    return kept


class EpochFile:
    """The broker's epoch entries, loaded at start and saved on every change (blocking I/O)."""

    def __init__(self, store_root: Path) -> None:
        self.path = store_root / FILE_NAME
        self.entries: list[EpochEntry] = []

    def load(self) -> None:
        if not self.path.exists():
            self.entries = []
            return
        try:
            data = orjson.loads(self.path.read_bytes())
            entries = [EpochEntry(int(e["epoch"]), int(e["startOffset"])) for e in data]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{self.path}: unreadable epoch file: {exc}") from None
        if any(b.epoch <= a.epoch for a, b in itertools.pairwise(entries)):
            raise ValueError(f"{self.path}: epochs are not strictly increasing")
        self.entries = entries

    @property
    def last_epoch(self) -> int:
        return self.entries[-1].epoch if self.entries else 0

    def to_json(self) -> list[dict[str, int]]:
        return [{"epoch": e.epoch, "startOffset": e.start_offset} for e in self.entries]

    def _save(self) -> None:
        write_bytes_atomic(self.path, orjson.dumps(self.to_json()), keep_backup=False)

    def begin_epoch(self, epoch: int, start_offset: int) -> None:
        """This broker became master of ``epoch`` with its CommitLog ending at ``start_offset``."""
        if epoch <= self.last_epoch:
            return  # already recorded (a restart of the same master)
        self.entries = [*entries_up_to(self.entries, start_offset), EpochEntry(epoch, start_offset)]
        self._save()
        log.info("epoch %d starts at CommitLog offset %d", epoch, start_offset)

    def adopt(self, master_entries: Sequence[EpochEntry]) -> None:
        """Copy the master's entries (after truncating to the common point) as a slave."""
        entries = list(master_entries)
        if entries != self.entries:
            self.entries = entries
            self._save()
