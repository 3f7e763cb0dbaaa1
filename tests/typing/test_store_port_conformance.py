"""The broker-to-store port is checked by mypy, and the check bites.

``ferrymq.broker.store_port`` ends with two functions mypy reads (the store and the send
processor's view returned as ``MessageStorePort``); the project's ``mypy`` run keeps them honest.
These tests show the check fails when it should: a copy of ``semantics.py`` whose
``SendSemanticsStore`` lacks ``runtime_info`` and returns the wrong type from
``get_max_offset_in_queue`` is rejected by mypy strict, naming both; the unchanged copy passes.
mypy runs with the project's configuration and cache (``scripts/test.sh`` runs ``mypy`` first, so
the cache is warm and each run takes seconds).
"""

from __future__ import annotations

import ast
from pathlib import Path

import ferrymq.broker.semantics as semantics
from mypy import api as mypy_api

ROOT = Path(__file__).resolve().parents[2]

CHECK = """

def _send_view_is_a_port(view: SendSemanticsStore) -> MessageStorePort:
    return view
"""


def _copy_of_semantics(tmp_path: Path, *, mutate: bool) -> Path:
    tree = ast.parse(Path(semantics.__file__).read_text(encoding="utf-8"))
    if mutate:
        view = next(
            n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "SendSemanticsStore"
        )
        view.body = [
            n
            for n in view.body
            if not (isinstance(n, ast.FunctionDef) and n.name == "runtime_info")
        ]
        for node in view.body:
            if isinstance(node, ast.FunctionDef) and node.name == "get_max_offset_in_queue":
                node.returns = ast.Name("str")
                node.body = [ast.Return(ast.Constant("0"))]
    out = tmp_path / ("mutant_semantics.py" if mutate else "copy_semantics.py")
    out.write_text(ast.unparse(tree) + CHECK, encoding="utf-8")
    return out


def _mypy(target: Path) -> tuple[str, int]:
    stdout, stderr, status = mypy_api.run(
        [
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--cache-dir",
            str(ROOT / ".mypy_cache"),
            "--no-error-summary",
            str(target),
        ]
    )
    return stdout + stderr, status


def test_send_view_as_it_is_satisfies_the_port(tmp_path: Path) -> None:
    output, status = _mypy(_copy_of_semantics(tmp_path, mutate=False))
    assert status == 0, output


def test_mypy_names_a_missing_or_mistyped_port_method(tmp_path: Path) -> None:
    output, status = _mypy(_copy_of_semantics(tmp_path, mutate=True))
    assert status == 1, output
    assert '"SendSemanticsStore"' in output and "MessageStorePort" in output, output
    assert "runtime_info" in output, output
    assert "get_max_offset_in_queue" in output, output
