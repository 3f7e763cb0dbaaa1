"""A broker metadata file (topics.json, consumerOffset.json, subscriptionGroup.json): written to a
temp name, fsynced and renamed, the previous version kept as ``.bak`` and read when the main file is
missing or unreadable (upstream ConfigManager). ``save`` writes from a worker thread, one write at a
time even when the periodic persist that started one was cancelled (see AtomicFileWriter)."""

from __future__ import annotations

import logging
from pathlib import Path

from ferrymq.store.json_file import AtomicFileWriter, backup_path

log = logging.getLogger(__name__)


class ConfigFile:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._writer = AtomicFileWriter(path, keep_backup=True)

    @property
    def backup(self) -> Path:
        return backup_path(self.path)

    def read(self) -> bytes | None:
        """The main file's bytes, or the backup's when the main one is missing/empty; None if neither."""
        for candidate in (self.path, self.backup):
            try:
                data = candidate.read_bytes()
            except FileNotFoundError:
                continue
            if data.strip():
                if candidate is not self.path:
                    log.warning("%s missing or empty; using backup %s", self.path, candidate)
                return data
        return None

    def read_backup(self) -> bytes | None:
        try:
            return self.backup.read_bytes()
        except FileNotFoundError:
            return None

    async def save(self, data: bytes) -> None:
        await self._writer.write(data)
