"""KVConfigManager: the NameServer's namespace -> key -> value table (PUT/GET/DELETE_KV_CONFIG),
persisted to kvConfig.json so ORDER_TOPIC_CONFIG survives restarts.

Saves go through one writer at a time (write_bytes_atomic: a unique temp file, fsync, rename, the
directory fsynced, the previous version kept as ``.bak``). Each save serialises the table as it is
when its write starts, so saves asked for while another is on disk are folded into the next one,
and a caller learns its change is durable (or why not) before its request is answered.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import orjson

from ferrymq.store.json_file import JsonFileError, read_json, write_bytes_atomic

log = logging.getLogger(__name__)

ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"


class KVConfigManager:
    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.table: dict[str, dict[str, str]] = {}
        self._version = 0  # bumped by every save() (callers change the table, then save)
        self._saved = 0  # the version the file on disk holds
        self._lock = asyncio.Lock()
        self._saves: set[asyncio.Future[None]] = set()

    def load(self) -> None:
        if self.path is None:
            return
        try:
            data = read_json(self.path, default={})
        except JsonFileError as exc:
            log.error("kv config %s unreadable, starting empty: %s", self.path, exc)
            return
        table = data.get("configTable", {}) if isinstance(data, dict) else {}
        if not isinstance(table, dict):
            log.error("kv config %s has no configTable object, starting empty", self.path)
            return
        self.table = {
            str(ns): {str(k): str(v) for k, v in kv.items()}
            for ns, kv in table.items()
            if isinstance(kv, dict)
        }

    def encode(self) -> bytes:
        return orjson.dumps({"configTable": self.table}, option=orjson.OPT_INDENT_2)

    def persist(self) -> None:
        """Blocking write of the table as it is now (start-up tools; the server uses save())."""
        if self.path is not None:
            write_bytes_atomic(self.path, self.encode())

    async def save(self) -> None:
        """Make the table as it is now durable; raises OSError when the write fails.

        The write runs in a task of its own: a caller cancelled meanwhile (its connection
        closed) neither stops it nor lets the next write start before it ends.
        """
        if self.path is None:
            return
        self._version += 1
        task = asyncio.ensure_future(self._save_through(self._version))
        self._saves.add(task)
        task.add_done_callback(self._saves.discard)
        await asyncio.shield(task)

    async def _save_through(self, version: int) -> None:
        assert self.path is not None
        async with self._lock:
            if self._saved >= version:
                return  # a later write already carried this change
            current = self._version
            data = self.encode()  # on the loop: a consistent snapshot
            try:
                await asyncio.to_thread(write_bytes_atomic, self.path, data)
            except OSError as exc:
                log.error("kv config persist to %s failed: %s", self.path, exc)
                raise
            self._saved = current

    async def flush(self) -> None:
        """Wait for every save in progress (shutdown)."""
        if self._saves:
            await asyncio.gather(*list(self._saves), return_exceptions=True)

    def put(self, namespace: str, key: str, value: str) -> None:
        self.table.setdefault(namespace, {})[key] = value

    def get(self, namespace: str, key: str) -> str | None:
        return self.table.get(namespace, {}).get(key)

    def delete(self, namespace: str, key: str) -> bool:
        kv = self.table.get(namespace)
        if kv is None or key not in kv:
            return False
        del kv[key]
        if not kv:
            del self.table[namespace]
        return True

    def namespace(self, namespace: str) -> dict[str, str]:
        return dict(self.table.get(namespace, {}))
