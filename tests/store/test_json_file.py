"""Atomic JSON metadata files: temp + fsync + rename, .bak fallback, clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from ferrymq.store.json_file import JsonFileError, read_json, write_json, write_json_async


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
