"""`kubectl explain` documents every spec field of every CRD: each property in the generated
schemas (spec and its nested objects and list items) has a description."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from ferrymq_operator import crdgen


def undocumented(node: dict[str, Any], path: str) -> Iterator[str]:
    for name, sub in (node.get("properties") or {}).items():
        here = f"{path}.{name}"
        if not str(sub.get("description", "")).strip():
            yield here
        yield from undocumented(sub, here)
    items = node.get("items")
    if isinstance(items, dict):
        yield from undocumented(items, f"{path}[]")
    extra = node.get("additionalProperties")
    if isinstance(extra, dict):
        yield from undocumented(extra, f"{path}.<key>")


@pytest.mark.parametrize("file_name", sorted(crdgen.all_crds()))
def test_every_spec_field_has_a_description(file_name: str) -> None:
    crd = crdgen.all_crds()[file_name]
    for version in crd["spec"]["versions"]:
        root = version["schema"]["openAPIV3Schema"]
        spec = root["properties"]["spec"]
        assert str(spec.get("description", "")).strip(), f"{file_name}: spec has no description"
        missing = list(undocumented(spec, "spec"))
        assert not missing, f"{crd['spec']['names']['kind']}: no description for {missing}"


def test_the_walk_finds_a_missing_description() -> None:
    schema = {"properties": {"a": {"description": "x", "properties": {"b": {"type": "string"}}}}}
    assert list(undocumented(schema, "spec")) == ["spec.a.b"]
