"""KVConfigManager: the NameServer's namespace -> key -> value table (PUT/GET/DELETE_KV_CONFIG),
persisted to kvConfig.json (temp file, fsync, rename) so ORDER_TOPIC_CONFIG survives restarts."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import orjson

log = logging.getLogger(__name__)

ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"


class KVConfigManager:
    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.table: dict[str, dict[str, str]] = {}

    def load(self) -> None:
        if self.path is None or not self.path.exists():
            return
        try:
            data = orjson.loads(self.path.read_bytes())
            table = data.get("configTable", {}) if isinstance(data, dict) else {}
            self.table = {
                str(ns): {str(k): str(v) for k, v in kv.items()}
                for ns, kv in table.items()
                if isinstance(kv, dict)
            }
        except (OSError, orjson.JSONDecodeError, AttributeError) as exc:
            log.error("kv config %s unreadable, starting empty: %s", self.path, exc)

    def persist(self) -> None:
        """Blocking file write; call it off the event loop (asyncio.to_thread)."""
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        data = orjson.dumps({"configTable": self.table}, option=orjson.OPT_INDENT_2)
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)

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
