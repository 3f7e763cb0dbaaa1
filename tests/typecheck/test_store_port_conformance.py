"""The broker-to-store protocols are checked by mypy, and the check bites.

``ferrymq.broker.store_port`` ends with two functions mypy reads (the store returned as
``MessageStorePort``, the send processor's view as ``MessagePuts``); the project's ``mypy`` run
keeps them honest. These tests show the check fails when it should: a copy of the implementing
module with one method removed and another returning the wrong type is rejected by mypy strict,
naming both; the unchanged copy passes. mypy runs with the project's configuration and cache
(``scripts/test.sh`` runs ``mypy`` first, so the cache is warm and each run takes seconds).
"""

from __future__ import annotations

import ast
from pathlib import Path
from types import ModuleType

import ferrymq.broker.semantics as semantics
import ferrymq.store.message_store as message_store
import pytest
from mypy import api as mypy_api

ROOT = Path(__file__).resolve().parents[2]

# module, class, its protocol, a method to remove, a method to give the return type ``str``
CASES = {
    "send view": (
        semantics,
        "SendSemanticsStore",
        "MessagePuts",
        "put_messages",
        "put_message_nowait",
    ),
    "store": (
        message_store,
        "MessageStore",
        "MessageStorePort",
        "runtime_info",
        "get_max_offset_in_queue",
    ),
}


def _copy(
    tmp_path: Path,
    module: ModuleType,
    cls: str,
    protocol: str,
    drop: str,
    mistype: str,
    *,
    mutate: bool,
) -> Path:
    """A module holding a copy of ``module``'s class ``cls`` (its imports, and every other name
    of ``module`` imported from it), with ``drop`` removed and ``mistype`` returning ``str`` when
    ``mutate``; it ends by returning the class as its protocol, as ``store_port`` does."""
    tree = ast.parse(Path(str(module.__file__)).read_text(encoding="utf-8"))
    imports: list[ast.stmt] = []
    names: list[str] = []
    found: ast.ClassDef | None = None
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom) or (
            isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
        ):
            imports.append(node)
        elif isinstance(node, ast.ClassDef) and node.name == cls:
            found = node
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.append(node.name)
        elif isinstance(node, ast.Assign):
            names += [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.append(node.target.id)
    assert found is not None, f"no class {cls} in {module.__name__}"
    if mutate:
        methods = (ast.FunctionDef, ast.AsyncFunctionDef)
        before = len(found.body)
        found.body = [n for n in found.body if not (isinstance(n, methods) and n.name == drop)]
        assert len(found.body) == before - 1, f"{cls}.{drop} not found"
        target = next(n for n in found.body if isinstance(n, methods) and n.name == mistype)
        target.returns = ast.Name("str")
        target.body = [ast.Return(ast.Constant("0"))]
    own = [name for name in names if not name.startswith("__")]
    source = "\n".join(
        [
            *(ast.unparse(node) for node in imports),
            f"from {module.__name__} import {', '.join(own)}",
            f"from ferrymq.broker.store_port import {protocol}",
            ast.unparse(found),
            f"def _conforms(impl: {cls}) -> {protocol}:\n    return impl\n",
        ]
    )
    out = tmp_path / f"{'mutant' if mutate else 'copy'}_{module.__name__.rsplit('.', 1)[1]}.py"
    out.write_text(source, encoding="utf-8")
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


@pytest.mark.parametrize("case", sorted(CASES))
def test_implementation_as_it_is_satisfies_its_protocol(tmp_path: Path, case: str) -> None:
    output, status = _mypy(_copy(tmp_path, *CASES[case], mutate=False))
    assert status == 0, output


@pytest.mark.parametrize("case", sorted(CASES))
def test_mypy_names_a_missing_or_mistyped_method(tmp_path: Path, case: str) -> None:
    _module, cls, protocol, drop, mistype = CASES[case]
    output, status = _mypy(_copy(tmp_path, *CASES[case], mutate=True))
    assert status == 1, output
    assert f'"{cls}" is missing following "{protocol}" protocol member' in output, output
    assert f"note:     {drop}" in output, output
    assert f"def {mistype}(self" in output and ") -> str" in output, output
