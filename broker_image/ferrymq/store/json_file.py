"""Atomic JSON metadata files (upstream ``ConfigManager.persist`` / ``MixAll.string2File``).

The broker's ``topics.json``, ``consumerOffset.json``, ``subscriptionGroup.json`` and
``delayOffset.json`` managers use this, and :func:`write_bytes_atomic` is the one atomic-write
helper of the project (broker.conf updates, ``ConfigFile``). A write never leaves a half-written file behind:

1. the new content goes to a temp file unique to this write (``<name>.<random>.tmp``), fsynced;
2. the current file, if any, is renamed to ``<name>.bak``;
3. the temp file is renamed to ``<name>`` and the directory is fsynced.

Writes of one path are serialised in the process (a lock per path), so two writers never
interleave their renames.

Loading reads ``<name>``; when it is missing or does not parse, ``<name>.bak`` is used instead
(and a warning logged), as upstream ``ConfigManager.load`` falls back to ``loadBak``.
Writing blocks: call :func:`write_json_async` from the event loop, or keep an
:class:`AtomicFileWriter` for a file that a periodic task and a shutdown both write.
"""

from __future__ import annotations

import asyncio
import logging
import os
import tempfile
import threading
from pathlib import Path
from typing import Any

import orjson

log = logging.getLogger(__name__)


class JsonFileError(OSError):
    """Neither the file nor its backup could be read as JSON."""


def fsync_dir(path: Path | str, *, missing_ok: bool = False) -> None:
    """Make a rename or create in directory ``path`` durable (``missing_ok``: a directory that
    cannot be opened is let pass, for callers to which the fsync is only a best effort)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        if missing_ok:
            return
        raise
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def backup_path(path: Path) -> Path:
    """Where the previous version of ``path`` is kept (``<name>.bak``)."""
    return path.with_name(path.name + ".bak")


def write_json(path: Path, data: Any) -> None:
    """Serialise ``data`` (orjson, indented, non-str keys allowed) and replace ``path`` atomically."""
    payload = orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS)
    write_bytes_atomic(path, payload)


_path_locks: dict[str, threading.Lock] = {}
_path_locks_guard = threading.Lock()


def _lock_for(path: Path) -> threading.Lock:
    key = os.path.abspath(path)
    with _path_locks_guard:
        return _path_locks.setdefault(key, threading.Lock())


def write_bytes_atomic(path: Path, payload: bytes, *, keep_backup: bool = True) -> None:
    """Replace ``path`` with ``payload`` so a crash leaves either the old or the new content.

    ``keep_backup`` renames the previous version to ``<name>.bak`` first (metadata files load it
    when the main one is torn); an existing file's permission bits carry over to the new one.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with _lock_for(path):
        try:
            mode = os.stat(path).st_mode & 0o7777
        except FileNotFoundError:
            mode = 0o644
        fd, tmp_name = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
        tmp = Path(tmp_name)
        try:
            try:
                os.fchmod(fd, mode)  # mkstemp creates 0600
                view = memoryview(payload)
                while view:
                    written = os.write(fd, view)
                    view = view[written:]
                os.fsync(fd)
            finally:
                os.close(fd)
            if keep_backup and path.exists():
                # Keep the previous good version: a later torn disk write still leaves one to load.
                os.replace(path, backup_path(path))
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)  # a full disk must not also collect temp files
            raise
        fsync_dir(path.parent)


async def write_json_async(path: Path, data: Any) -> None:
    """:func:`write_json` in a worker thread (serialisation included)."""
    await asyncio.to_thread(write_json, path, data)


class AtomicFileWriter:
    """Replaces one file from worker threads, one write at a time (fsync stays off the loop).

    Cancelling the task that awaits a write cannot stop its thread (a periodic flusher stopped at
    shutdown, right before the final persist). The next write waits for that thread, so two
    threads never race on one file and the last write asked for is the one left on disk.
    """

    def __init__(self, path: Path, *, keep_backup: bool = True) -> None:
        self.path = path
        self.keep_backup = keep_backup
        self._last: asyncio.Future[None] | None = None

    async def write(self, payload: bytes) -> None:
        # a loop, not an if: several writers may wake together and one of them goes first
        while self._last is not None and not self._last.done():
            await asyncio.wait((self._last,))
        write = asyncio.ensure_future(
            asyncio.to_thread(write_bytes_atomic, self.path, payload, keep_backup=self.keep_backup)
        )
        self._last = write
        try:
            await asyncio.shield(write)
        except asyncio.CancelledError:
            write.add_done_callback(self._report_abandoned)
            raise

    def _report_abandoned(self, write: asyncio.Future[None]) -> None:
        if not write.cancelled() and (exc := write.exception()) is not None:
            log.error("writing %s failed after its caller was cancelled: %s", self.path, exc)


def read_json(path: Path, default: Any = None) -> Any:
    """The content of ``path``, else of ``path.bak``, else ``default`` when neither exists.

    Raises JsonFileError when a file exists but neither it nor the backup parses.
    """
    bak = backup_path(path)
    errors: list[str] = []
    for candidate in (path, bak):
        try:
            raw = candidate.read_bytes()
        except FileNotFoundError:
            continue
        except OSError as exc:
            errors.append(f"{candidate}: {exc.strerror}")
            continue
        if not raw.strip():
            errors.append(f"{candidate}: empty")
            continue
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            errors.append(f"{candidate}: not JSON ({exc})")
            continue
        if candidate is bak:
            log.warning(
                "%s unreadable (%s); loaded the backup %s", path, "; ".join(errors), bak.name
            )
        return value
    if errors:
        raise JsonFileError("; ".join(errors))
    return default
