"""HA settings from broker.conf: defaults, upstream keys, clear errors (library and CLI)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from ferrymq.broker.broker_conf import load_broker_conf
from ferrymq.ha.config import (
    HAConfig,
    HAConfigError,
    HASettings,
    Role,
    ha_config_for,
)
from ferrymq.properties import ConfigError


def test_upstream_keys_and_defaults(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "brokerName=a\nhaListenPort=20912\nhaSendHeartbeatInterval=1000\n"
        "haHousekeepingInterval=4000\nhaTransferBatchSize=65536\nhaMasterAddress=10.0.0.1:10912\n"
    )
    settings = load_broker_conf(conf, env={}).ha
    cfg = ha_config_for(settings, role=Role.SLAVE, sync_flush_timeout_ms=5000, listen_host="")
    assert cfg.listen_port == 20912 and cfg.listen_host == "0.0.0.0"
    assert cfg.heartbeat_interval_s == 1.0 and cfg.housekeeping_interval_s == 4.0
    assert cfg.transfer_batch_size == 65536 and cfg.master_ha_address == "10.0.0.1:10912"
    defaults = HASettings()
    assert defaults.ha_transfer_batch_size == 32 * 1024
    assert defaults.ha_max_gap_not_in_sync == 256 * 1024 * 1024
    # unset haListenPort: listenPort + 1 as upstream BrokerStartup; listenPort 0 stays 0
    assert defaults.with_default_port(10911).ha_listen_port == 10912
    assert defaults.with_default_port(0).ha_listen_port == 0


def test_environment_overrides(tmp_path: Path) -> None:
    settings = load_broker_conf(None, env={"FERRYMQ_haListenPort": "30912"}).ha
    assert settings.ha_listen_port == 30912


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("haListenPort=70000\n", "haListenPort"),
        ("haSendHeartbeatInterval=9000\nhaHousekeepingInterval=5000\n", "haHousekeepingInterval"),
        ("haMasterAddress=nohostport\n", "haMasterAddress"),
        ("haTransferBatchSize=0\n", "haTransferBatchSize"),
    ],
)
def test_bad_values_name_the_key(tmp_path: Path, text: str, key: str) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(text)
    with pytest.raises(ConfigError, match=key):
        load_broker_conf(conf, env={})


def test_runtime_config_checks() -> None:
    with pytest.raises(HAConfigError, match="haHousekeepingInterval"):
        HAConfig(heartbeat_interval_s=5, housekeeping_interval_s=5)


def test_broker_cli_refuses_bad_ha_setting(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(
        f"brokerName=a\nlistenPort=0\nstorePathRootDir={tmp_path / 'store'}\nhaListenPort=-1\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "ferrymq.cli.main", "broker", "-c", str(conf)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "haListenPort" in proc.stderr
