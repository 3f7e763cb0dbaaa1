"""namesrv.conf loading: upstream names, environment overlay, errors naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest
from ferrymq.namesrv.config import load_namesrv_config
from ferrymq.properties import ConfigError


def test_defaults_file_and_env(tmp_path: Path) -> None:
    assert load_namesrv_config(None, env={}).listen_port == 9876
    conf = tmp_path / "namesrv.conf"
    conf.write_text("listenPort=9877\nrocketmqHome=/opt/rmq\nunknownKey=x\n")
    cfg = load_namesrv_config(conf, env={})
    assert cfg.listen_port == 9877 and str(cfg.rocketmq_home) == "/opt/rmq"
    assert load_namesrv_config(conf, env={"FERRYMQ_listenPort": "9999"}).listen_port == 9999
    assert load_namesrv_config(conf, env={}, overrides={"listenPort": "0"}).listen_port == 0
    assert cfg.scan_not_active_broker_interval == 10_000
    assert cfg.broker_channel_expired_time == 120_000


def test_bad_value_names_key(tmp_path: Path) -> None:
    conf = tmp_path / "namesrv.conf"
    conf.write_text("listenPort=70000\n")
    with pytest.raises(ConfigError, match="listenPort"):
        load_namesrv_config(conf, env={})
