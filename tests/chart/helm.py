"""Running helm and kubectl from the provisioned cache, and reading what they render."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "ferrymq-operator"
RELEASE = "ferrymq"
TIMEOUT_S = 180.0


class ToolError(AssertionError):
    """A helm/kubectl call failed; the message has the command line and its stderr."""


@dataclass(frozen=True)
class Result:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str


def run(
    argv: Sequence[str | Path],
    *,
    env: Mapping[str, str] | None = None,
    stdin: str | None = None,
    check: bool = True,
    timeout: float = TIMEOUT_S,
) -> Result:
    args = [str(a) for a in argv]
    proc = subprocess.run(
        args,
        input=stdin,
        env=dict(env) if env is not None else None,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    result = Result(args, proc.returncode, proc.stdout, proc.stderr)
    if check and proc.returncode != 0:
        raise ToolError(f"{' '.join(args)} exited {proc.returncode}:\n{proc.stderr}\n{proc.stdout}")
    return result


def set_args(values: Mapping[str, str]) -> list[str]:
    out: list[str] = []
    for key, value in values.items():
        out += ["--set", f"{key}={value}"]
    return out


def template(
    helm: Path,
    *extra: str,
    values: Mapping[str, str] | None = None,
    namespace: str = "ferrymq-system",
    env: Mapping[str, str] | None = None,
    check: bool = True,
) -> Result:
    return run(
        [
            helm,
            "template",
            RELEASE,
            CHART,
            "--namespace",
            namespace,
            *set_args(values or {}),
            *extra,
        ],
        env=env,
        check=check,
    )


def documents(text: str) -> list[dict[str, Any]]:
    """The non-empty YAML documents of a rendered stream."""
    return [d for d in yaml.safe_load_all(text) if d]


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d.get("kind") == kind]


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = by_kind(docs, kind)
    assert len(found) == 1, f"expected one {kind}, rendered {len(found)}"
    return found[0]
