"""broker.conf loading: javaproperties syntax, env overlay, errors naming key and reason."""

from __future__ import annotations

from pathlib import Path

import pytest
from ferrymq.properties import ConfigError, load_config, load_properties
from ferrymq.store.config import FlushDiskType, MessageStoreConfig


def test_java_properties_syntax(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "# comment\n"
        "storePathRootDir = /data/store\n"
        "mappedFileSizeCommitLog:1073741824\n"
        "deleteWhen=04;\\\n  16\n"  # a continuation line
        "flushDiskType=SYNC_FLUSH\n"
        "brokerClusterName=DefaultCluster\n"
    )
    assert load_properties(conf)["deleteWhen"] == "04;16"
    loaded = load_config(MessageStoreConfig, conf, env={})
    assert loaded.model.flush_disk_type is FlushDiskType.SYNC_FLUSH
    assert loaded.model.delete_hours == {4, 16}
    assert loaded.model.store_path_root_dir == Path("/data/store")
    # Unknown keys are collected (RocketMQ ignores them), never fatal.
    assert any(k.startswith("brokerClusterName") for k in loaded.unknown_keys)


def test_environment_overrides_file(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("fileReservedTime=72\n")
    env = {"FERRYMQ_fileReservedTime": "48", "FERRYMQ_diskMaxUsedSpaceRatio": "80"}
    loaded = load_config(MessageStoreConfig, conf, env=env)
    assert loaded.model.file_reserved_time == 48
    assert loaded.model.disk_max_used_space_ratio == 80
    assert loaded.origins["fileReservedTime"] == "environment FERRYMQ_fileReservedTime"


def test_bad_values_name_key_value_and_source(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("mappedFileSizeCommitLog=1g\nflushDiskType=SOMETIMES\n")
    with pytest.raises(ConfigError) as err:
        load_config(MessageStoreConfig, conf, env={"FERRYMQ_deleteWhen": "25"})
    text = str(err.value)
    assert "mappedFileSizeCommitLog='1g'" in text and "integer" in text
    assert "flushDiskType='SOMETIMES'" in text and "ASYNC_FLUSH" in text
    assert "deleteWhen='25'" in text and "FERRYMQ_deleteWhen" in text
    assert len(err.value.problems) == 3


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such configuration file"):
        load_config(MessageStoreConfig, tmp_path / "nope.conf", env={})
