"""Entry-point argument handling (no cluster)."""

from __future__ import annotations

import pytest
from ferrymq_operator.__main__ import parse_args, watched_namespaces
from ferrymq_operator.settings import OperatorSettings


def test_cli_namespaces_win_over_env() -> None:
    assert watched_namespaces(["a", "b", "a"], "x,y") == ["a", "b"]
    assert watched_namespaces([], " x, ,y ") == ["x", "y"]
    assert watched_namespaces([], "") == []


def test_parse_args_defaults() -> None:
    args = parse_args([])
    assert args.namespace == []
    assert args.liveness.endswith("/healthz")
    assert parse_args(["-n", "a", "--namespace", "b"]).namespace == ["a", "b"]


def test_settings_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FERRYMQ_OPERATOR_CLUSTER_DOMAIN", "corp.example")
    monkeypatch.setenv("FERRYMQ_OPERATOR_RESYNC_SECONDS", "5")
    settings = OperatorSettings()
    assert settings.cluster_domain == "corp.example"
    assert settings.resync_seconds == 5.0


def test_bad_settings_name_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FERRYMQ_OPERATOR_RESYNC_SECONDS", "-1")
    with pytest.raises(ValueError, match="resync_seconds"):
        OperatorSettings()
