"""Entry-point argument handling and start-up settings (no cluster)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from ferrymq_operator.__main__ import parse_args, watched_namespaces
from ferrymq_operator.settings import OperatorSettings, SettingsError, load


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


def test_load_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FERRYMQ_OPERATOR_ADMIN_TIMEOUT_SECONDS", "soon")
    with pytest.raises(SettingsError, match=r"FERRYMQ_OPERATOR_ADMIN_TIMEOUT_SECONDS.*'soon'"):
        load()


def _env(**bad: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FERRYMQ_OPERATOR_")}
    return {**env, "KUBECONFIG": "/nonexistent/kubeconfig", **bad}


def test_import_reads_no_environment() -> None:
    """Importing the handlers (as kopf does with -m) succeeds whatever the environment holds."""
    env = _env(FERRYMQ_OPERATOR_RESYNC_SECONDS="-1", FERRYMQ_OPERATOR_CLUSTER_DOMAIN="Bad_Domain")
    code = "import ferrymq_operator.handlers, ferrymq_operator.topics.handlers; print('imported')"
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "imported"


def test_startup_stops_on_a_bad_setting() -> None:
    """The operator process exits at start-up naming the variable, before it talks to any API."""
    env = _env(FERRYMQ_OPERATOR_RESYNC_SECONDS="-1")
    done = subprocess.run(
        [sys.executable, "-m", "ferrymq_operator", "--liveness", "", "--namespace", "x"],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode != 0
    assert "bad operator settings: FERRYMQ_OPERATOR_RESYNC_SECONDS" in (done.stdout + done.stderr)
