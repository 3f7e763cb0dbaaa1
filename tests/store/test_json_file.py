"""Atomic JSON metadata files: temp + fsync + rename, .bak fallback, clear errors."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
from ferrymq.store import json_file
from ferrymq.store.json_file import (
    AtomicFileWriter,
    JsonFileError,
    read_json,
    write_json,
    write_json_async,
)


def test_write_read_and_backup(tmp_path: Path) -> None:
    path = tmp_path / "config" / "topics.json"
    assert read_json(path, default={"empty": True}) == {"empty": True}
    write_json(
        path, {"topicConfigTable": {"T": {"readQueueNums": 4}}, "dataVersion": {"counter": 1}}
    )
    write_json(path, {"topicConfigTable": {}, "dataVersion": {"counter": 2}, 7: "non-str key"})
    assert read_json(path)["dataVersion"]["counter"] == 2
    assert read_json(path)["7"] == "non-str key"
    bak = path.with_name("topics.json.bak")
    assert read_json(bak)["dataVersion"]["counter"] == 1
    assert not path.with_name("topics.json.tmp").exists()


def test_torn_main_file_falls_back_to_backup(tmp_path: Path) -> None:
    path = tmp_path / "consumerOffset.json"
    write_json(path, {"offsetTable": {"T@g": {"0": 5}}})
    write_json(path, {"offsetTable": {"T@g": {"0": 9}}})
    path.write_bytes(b'{"offsetTable": {"T@g": {"0"')  # a torn write
    assert read_json(path) == {"offsetTable": {"T@g": {"0": 5}}}
    path.unlink()
    assert read_json(path) == {"offsetTable": {"T@g": {"0": 5}}}


def test_both_unreadable_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "subscriptionGroup.json"
    path.write_bytes(b"not json")
    path.with_name("subscriptionGroup.json.bak").write_bytes(b"")
    with pytest.raises(JsonFileError, match=r"subscriptionGroup\.json: not JSON"):
        read_json(path)


async def test_async_write(tmp_path: Path) -> None:
    path = tmp_path / "delayOffset.json"
    await write_json_async(path, {"offsetTable": {"1": 3}})
    assert read_json(path) == {"offsetTable": {"1": 3}}


async def test_writer_waits_for_a_write_whose_caller_was_cancelled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A flusher cancelled mid-write, then the shutdown persist: the second write waits for the
    first thread, so the last content asked for is what stays (before, both threads shared
    <name>.tmp and the older content could land last)."""
    started, release = threading.Event(), threading.Event()
    real_write = json_file.write_bytes_atomic

    def held_write(path: Path, payload: bytes, *, keep_backup: bool = True) -> None:
        if payload == b"first":  # hold the first write in its thread until the test says so
            started.set()
            release.wait(30)
        real_write(path, payload, keep_backup=keep_backup)

    monkeypatch.setattr(json_file, "write_bytes_atomic", held_write)
    path = tmp_path / "delayOffset.json"
    writer = AtomicFileWriter(path)
    first = asyncio.create_task(writer.write(b"first"))
    assert await asyncio.to_thread(started.wait, 30)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    second = asyncio.create_task(writer.write(b"second"))
    for _ in range(20):
        await asyncio.sleep(0.005)
    assert not second.done() and not path.exists()  # still waiting for the first thread
    release.set()
    await second
    assert path.read_bytes() == b"second"
    assert path.with_name(path.name + ".bak").read_bytes() == b"first"
    assert not path.with_name(path.name + ".tmp").exists()


async def test_writer_reports_a_failed_write_to_its_caller(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_bytes(b"")
    writer = AtomicFileWriter(blocker / "x.json")
    with pytest.raises(OSError):
        await writer.write(b"{}")
    writer.path = tmp_path / "x.json"  # the writer stays usable after a failure
    await writer.write(b"{}")
    assert (tmp_path / "x.json").read_bytes() == b"{}"
