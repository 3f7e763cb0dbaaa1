"""Broadcasting consume progress in a local file (upstream ``LocalFileOffsetStore``).

In broadcasting mode every consumer of the group reads every message, so progress belongs to the
consumer, not the broker. The cache rules live in :class:`ferrymq.client.offset_store.OffsetStore`
and the file format in its :class:`LocalFileBackend` (temp file, fsync, rename); this module picks the
directory as upstream does: ``$FERRYMQ_OFFSETS_DIR``, else the Java client's
``rocketmq.client.localOffsetStoreDir`` default ``~/.rocketmq_offsets``, then
``<clientId>/<group>/offsets.json`` below it.
"""

from __future__ import annotations

import os
from pathlib import Path

from ferrymq.client.offset_store import LocalFileBackend, OffsetStore

__all__ = ["OFFSETS_DIR_ENV", "default_offsets_dir", "local_file_offset_store"]

OFFSETS_DIR_ENV = "FERRYMQ_OFFSETS_DIR"


def default_offsets_dir() -> Path:
    configured = os.environ.get(OFFSETS_DIR_ENV)
    if configured:
        return Path(configured)
    return Path.home() / ".rocketmq_offsets"


def local_file_offset_store(
    client_id: str, group: str, directory: Path | None = None
) -> OffsetStore:
    """An OffsetStore persisting to ``<directory>/<clientId>/<group>/offsets.json``."""
    if not group:
        raise ValueError("a broadcasting consumer needs a consumer group name")
    return OffsetStore(LocalFileBackend(directory or default_offsets_dir(), client_id, group))
