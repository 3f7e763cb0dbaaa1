"""What replication needs from a CommitLog, and nothing more.

``master.py`` reads through :class:`ReplicationSource`, ``slave.py`` writes through
:class:`ReplicationSink`; :mod:`ferrymq.ha.store_adapter` implements both over the broker's
``MessageStore``. Keeping the seam this narrow lets the replication logic be read without the store.
"""

from __future__ import annotations

from typing import Protocol


class ReplicationSource(Protocol):
    """The master's CommitLog, as the HA writer sees it."""

    @property
    def file_size(self) -> int:
        """``mappedFileSizeCommitLog``: a new slave starts at a multiple of it."""
        ...

    def max_offset(self) -> int:
        """End of the written CommitLog data (upstream ``CommitLog#getMaxOffset``)."""
        ...

    def min_offset(self) -> int:
        """Start of the oldest CommitLog file still on disk."""
        ...

    def read(self, offset: int, max_bytes: int) -> bytes | None:
        """Up to ``max_bytes`` written bytes from ``offset``, never crossing a file end.

        None when nothing is written at ``offset`` yet (or it has expired).
        """
        ...

    def is_record_boundary(self, offset: int) -> bool:
        """True when a record (or the blank end-of-file record) starts at ``offset``."""
        ...


class ReplicationSink(Protocol):
    """The slave's CommitLog, as the HA client sees it."""

    def max_offset(self) -> int:
        """End of the local CommitLog data: what the slave reports to its master."""
        ...

    def append(self, offset: int, data: bytes) -> bool:
        """Append raw master bytes at exactly ``offset`` (= ``max_offset()`` or an empty store).

        The store dispatches them to its ConsumeQueues and index itself. False when refused.
        """
        ...


class ReplicationPort(ReplicationSource, ReplicationSink, Protocol):
    """A CommitLog usable at either end (the broker's store is; its role picks the end)."""
