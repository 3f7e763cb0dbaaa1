"""ferrymq's table of upstream configuration keys and defaults (ferrymq/upstream_config) is
what the Apache RocketMQ 5.4.0 jars define (ConfigDefaults.java run against them)."""

from __future__ import annotations

from pathlib import Path

from ferrymq.upstream_config import BROKER_DEFAULTS, NAMESRV_DEFAULTS

from .config_defaults import upstream_tables


def test_committed_tables_match_the_jars(tmp_path: Path) -> None:
    tables = upstream_tables(tmp_path)
    assert tables["broker"] == dict(BROKER_DEFAULTS), (
        "regenerate: python -m interop.mqadmin.config_defaults"
    )
    assert tables["namesrv"] == dict(NAMESRV_DEFAULTS)
