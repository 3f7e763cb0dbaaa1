"""A broker metadata file (topics.json, consumerOffset.json, subscriptionGroup.json): written to a
temp name, fsynced and renamed, the previous version kept as ``.bak`` and read when the main file is
missing or unreadable (upstream ConfigManager). Blocking: call ``write`` through ``asyncio.to_thread``."""

from __future__ import annotations

import logging
from pathlib import Path

from ferrymq.store.json_file import backup_path, write_bytes_atomic

log = logging.getLogger(__name__)


class ConfigFile:
    def __init__(self, path: Path) -> None:
        self.path = path

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

    def write(self, data: bytes) -> None:
        write_bytes_atomic(self.path, data, keep_backup=True)
