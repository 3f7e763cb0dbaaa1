"""Shared helpers for the HA tests: real CommitLogs in tmp_path with tiny files, polling waits."""

from __future__ import annotations

import functools
from pathlib import Path

import polling
from ferrymq.message import MessageConst, MessageInner
from ferrymq.store.commit_log import CommitLog

HOST = ("127.0.0.1", 10911)


def new_commit_log(path: Path, file_size: int) -> CommitLog:
    path.mkdir(parents=True, exist_ok=True)
    log = CommitLog(path, file_size, HOST, 4 * 1024 * 1024)
    log.mapped_file_queue.load()
    return log


def message(i: int, size: int, topic: str = "HaTopic", queue_id: int = 0) -> MessageInner:
    body = (f"m{i}:".encode() + bytes([i % 251]) * size)[: max(size, 1)]
    return MessageInner.create(
        topic,
        queue_id,
        body,
        {MessageConst.PROPERTY_KEYS: f"k{i}", MessageConst.PROPERTY_TAGS: "t"},
    )


# HA scenarios keep the 10 ms step they were written with (slaves catch up within ms)
wait_until = functools.partial(polling.wait_for, every=0.01)


def file_bytes(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(path.iterdir()) if p.name.isdigit()}
