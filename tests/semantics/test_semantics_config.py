"""Semantics settings from broker.conf / FERRYMQ_* environment, with errors naming the key."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from ferrymq.broker.broker_conf import load_broker_conf
from ferrymq.broker.semantics import transaction_config
from ferrymq.broker.semantics_config import SemanticsConfig
from ferrymq.properties import ConfigError


def test_upstream_keys_from_file_and_environment(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerName=b\ntransactionCheckInterval=5000\ntransactionCheckMax=4\n")
    cfg = load_broker_conf(conf, env={"FERRYMQ_transactionTimeOut": "1500"}).semantics
    assert cfg == SemanticsConfig(
        transaction_check_interval=5000, transaction_check_max=4, transaction_time_out=1500
    )
    tx = transaction_config(cfg)
    assert (tx.check_interval_s, tx.transaction_timeout_ms, tx.transaction_check_max) == (
        5.0,
        1500,
        4,
    )
    assert load_broker_conf(None, env={}).semantics == SemanticsConfig()


def test_bad_value_names_the_key(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("transactionCheckMax=0\n")
    with pytest.raises(ConfigError, match="transactionCheckMax"):
        load_broker_conf(conf, env={})


def test_broker_cli_refuses_a_bad_semantics_value_with_exit_2(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(f"storePathRootDir={tmp_path / 'store'}\ntransactionCheckInterval=soon\n")
    proc = subprocess.run(
        [sys.executable, "-m", "ferrymq.cli.main", "broker", "-c", str(conf)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert "transactionCheckInterval" in proc.stderr
