"""Shared helpers for store tests: tiny-file configurations and message builders."""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import polling
import pytest
from ferrymq.message import MessageInner
from ferrymq.store.config import MessageStoreConfig
from ferrymq.store.message_store import MessageStore

STORE_HOST = ("127.0.0.1", 10911)


@contextlib.contextmanager
def tmpfs(path: Path, size_mb: int) -> Iterator[Path]:
    """A small file system of its own at ``path`` (a full disk that fills no real one)."""
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.fail(f"cannot mount a tmpfs (this test needs root, as in CI): {done.stderr}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def small_config(root: Path, **overrides: Any) -> MessageStoreConfig:
    """Tiny files so rolls, expiry and recovery cross many segments quickly."""
    values: dict[str, Any] = {
        "storePathRootDir": str(root),
        "mappedFileSizeCommitLog": 16 * 1024,
        "mappedFileSizeConsumeQueue": 20 * 50,
        "maxHashSlotNum": 64,
        "maxIndexNum": 200,
        "flushIntervalCommitLog": 50,
        "flushIntervalConsumeQueue": 50,
    }
    values.update(overrides)
    return MessageStoreConfig.model_validate(values)


def msg(
    topic: str = "T",
    queue_id: int = 0,
    body: bytes = b"hello",
    props: dict[str, str] | None = None,
    **kwargs: Any,
) -> MessageInner:
    kwargs.setdefault("born_timestamp", int(time.time() * 1000))
    kwargs.setdefault("born_host", ("127.0.0.1", 40000))
    return MessageInner.create(topic, queue_id, body, props or {}, **kwargs)


async def open_store(config: MessageStoreConfig, **kwargs: Any) -> MessageStore:
    store = MessageStore(config, STORE_HOST, **kwargs)
    await store.start()
    return store


async def wait_until(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    """Poll ``predicate`` until true or fail after ``timeout`` seconds (a store settles fast)."""
    await polling.wait_for(predicate, timeout, "the store's condition", every=0.005)


async def wait_dispatched(store: MessageStore, timeout: float = 5.0) -> None:
    await wait_until(lambda: store.dispatch_behind_bytes() == 0, timeout)


def read_queue(store: MessageStore, topic: str, queue_id: int) -> list[tuple[int, bytes]]:
    """Every (queue offset, raw record) of a queue, via get_message."""
    from ferrymq.store.results import GetMessageStatus

    out: list[tuple[int, bytes]] = []
    offset = store.get_min_offset_in_queue(topic, queue_id)
    offset = max(offset, 0)
    while True:
        res = store.get_message("g", topic, queue_id, offset, 32)
        try:
            if res.status is not GetMessageStatus.FOUND:
                if (
                    res.next_begin_offset > offset
                    and res.status is GetMessageStatus.NO_MATCHED_MESSAGE
                ):
                    offset = res.next_begin_offset
                    continue
                return out
            out.extend(zip(res.queue_offsets, (bytes(m) for m in res.messages), strict=True))
            offset = res.next_begin_offset
        finally:
            res.release()
