"""Static checks of broker_image/Dockerfile and operator/Dockerfile (no Docker engine needed).

Building the images needs a Docker engine and a base image; see the K8S-ENV report for the manual build
check. These tests hold the files to hadolint-style rules and to what the chart and operator expect.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from images.dockerfile_lint import (
    Finding,
    check,
    dockerignore_patterns,
    exposed_ports,
    final_instruction,
    is_ignored,
    parse,
    stages,
)

ROOT = Path(__file__).resolve().parents[2]
BROKER = ROOT / "broker_image" / "Dockerfile"
OPERATOR = ROOT / "operator" / "Dockerfile"


@pytest.mark.parametrize("dockerfile", [BROKER, OPERATOR], ids=["broker", "operator"])
def test_dockerfile_passes_the_checks(dockerfile: Path) -> None:
    findings = check(dockerfile, ROOT)
    assert findings == [], "\n".join(map(str, findings))


@pytest.mark.parametrize("dockerfile", [BROKER, OPERATOR], ids=["broker", "operator"])
def test_base_image_is_overridable_and_build_stage_is_separate(dockerfile: Path) -> None:
    instructions = parse(dockerfile.read_text())
    assert instructions[0].keyword == "ARG" and instructions[0].args.startswith("BASE_IMAGE=")
    all_stages = stages(instructions)
    assert len(all_stages) == 2
    assert all(s.base == "${BASE_IMAGE}" for s in all_stages)
    assert all_stages[0].resolved_base == "python:3.11-slim-bookworm"
    # Only the installed environment reaches the runtime stage, not the sources or pip caches.
    copies = [i.args for i in all_stages[1].instructions if i.keyword == "COPY"]
    assert copies == ["--from=build /opt/ferrymq /opt/ferrymq"]


def test_broker_image_runs_the_ferrymq_cli_on_the_rocketmq_ports() -> None:
    entry = final_instruction(BROKER, "ENTRYPOINT")
    assert entry is not None and entry.exec_form() == ["ferrymq"]
    assert exposed_ports(BROKER) == {9876, 10911, 10912}
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["ferrymq"] == "ferrymq.cli.main:main"


def operator_entrypoint() -> list[str]:
    entry = final_instruction(OPERATOR, "ENTRYPOINT")
    assert entry is not None
    argv = entry.exec_form()
    assert argv is not None
    return argv


def test_operator_image_runs_the_operator_entrypoint() -> None:
    """``python -m ferrymq_operator`` (kopf standalone on the handlers, with leader election and
    /metrics), taking the chart's scope and liveness arguments."""
    argv = operator_entrypoint()
    assert argv == ["python", "-m", "ferrymq_operator"]
    cmd = final_instruction(OPERATOR, "CMD")
    assert cmd is not None
    assert cmd.exec_form() == ["--all-namespaces", "--liveness=http://0.0.0.0:8080/healthz"]
    assert 8080 in exposed_ports(OPERATOR)
    assert importlib.util.find_spec("ferrymq_operator.handlers") is not None
    # The entrypoint with its default args is a command the operator accepts.
    out = subprocess.run(
        [sys.executable, *argv[1:], "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    for option in ("--all-namespaces", "--liveness", "--namespace", "--leader-election"):
        assert option in out.stdout


@pytest.mark.parametrize("dockerfile", [BROKER, OPERATOR], ids=["broker", "operator"])
def test_runtime_user_is_a_fixed_non_root_uid(dockerfile: Path) -> None:
    user = final_instruction(dockerfile, "USER")
    assert user is not None
    uid, _, gid = user.args.partition(":")
    # Numeric, so Kubernetes' runAsNonRoot can verify it without reading /etc/passwd.
    assert uid.isdigit() and int(uid) >= 1000
    assert gid.isdigit() and int(gid) >= 1000


def test_dockerignore_keeps_the_context_small_but_not_the_sources() -> None:
    patterns = dockerignore_patterns((ROOT / ".dockerignore").read_text())
    for kept in ("pyproject.toml", "README.md", "broker_image/ferrymq/cli/main.py"):
        assert not is_ignored(kept, patterns), kept
    for dropped in (
        ".venv/bin/python",
        ".git/HEAD",
        "tests/k8s/conftest.py",
        "a/b/__pycache__/c.pyc",
    ):
        assert is_ignored(dropped, patterns), dropped


BAD = """\
# syntax=docker/dockerfile:1
FROM python:latest AS build
ADD . /src
RUN pip install /src && apt-get install -y curl
RUN useradd --uid 10001 app
FROM debian
COPY missing.txt /x
CMD python -m thing
"""


def test_checks_catch_a_bad_dockerfile(tmp_path: Path) -> None:
    (tmp_path / "Dockerfile").write_text(BAD)
    (tmp_path / ".dockerignore").write_text("secret\n")
    rules = {f.rule for f in check(tmp_path / "Dockerfile", tmp_path)}
    assert rules == {
        "DL3007",  # latest
        "DL3006",  # untagged debian
        "DL3020",  # ADD of a folder
        "DL3042",  # pip cache
        "DL3015",  # recommends
        "DL3009",  # apt lists
        "DL3046",  # useradd high uid without -l
        "COPY-SRC",  # missing.txt
        "DL3002",  # no USER
        "DL3025",  # shell-form CMD
    }


def test_checks_catch_root_user_and_ignored_sources(tmp_path: Path) -> None:
    (tmp_path / "Dockerfile").write_text(
        'FROM debian:bookworm-slim\nCOPY secret/key /k\nUSER 0\nENTRYPOINT ["x"]\n'
    )
    (tmp_path / "secret").mkdir()
    (tmp_path / "secret" / "key").write_text("k")
    (tmp_path / ".dockerignore").write_text("secret\n")
    findings = check(tmp_path / "Dockerfile", tmp_path)
    assert [(f.rule, f.line) for f in findings] == [("COPY-IGNORED", 2), ("DL3002", 3)]
    assert isinstance(findings[0], Finding)


def test_parser_joins_continuations_and_honours_the_escape_directive() -> None:
    text = "# escape=`\nFROM alpine:3.20\nRUN echo a `\n    # a comment inside\n    && echo b\n"
    ins = parse(text)
    assert [(i.keyword, i.line) for i in ins] == [("FROM", 2), ("RUN", 3)]
    assert ins[1].args == "echo a && echo b"
    with pytest.raises(ValueError, match="continuation"):
        parse("FROM alpine:3.20\nRUN echo \\\n")
