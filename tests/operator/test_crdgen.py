"""The generated CRDs: up to date with models.py, structural, and consistent with the models."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import pytest
import yaml
from ferrymq_operator import crdgen, models

ROOT = Path(__file__).resolve().parents[2]


def test_crds_are_not_stale() -> None:
    stale = crdgen.stale_files(ROOT)
    assert not stale, f"regenerate with `python -m ferrymq_operator.crdgen`: {stale}"


def test_check_mode_detects_a_stale_file(tmp_path: Path) -> None:
    assert crdgen.main(["--root", str(tmp_path), "--check"]) == 1
    assert crdgen.main(["--root", str(tmp_path)]) == 0
    assert crdgen.main(["--root", str(tmp_path), "--check"]) == 0
    target = tmp_path / "crds" / "ferrymq.io_brokers.yaml"
    target.write_text(target.read_text().replace("fmqb", "xxx"))
    assert crdgen.main(["--root", str(tmp_path), "--check"]) == 1


def load(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "crds" / name).read_text())
    return loaded


def walk(node: Any) -> list[dict[str, Any]]:
    out = []
    if isinstance(node, dict):
        out.append(node)
        for value in node.values():
            out.extend(walk(value))
    elif isinstance(node, list):
        for value in node:
            out.extend(walk(value))
    return out


@pytest.mark.parametrize("name", ["ferrymq.io_brokers.yaml", "ferrymq.io_nameservers.yaml"])
def test_structural_schema(name: str) -> None:
    crd = load(name)
    version = crd["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    schema = version["schema"]["openAPIV3Schema"]
    for node in walk(schema):
        assert "$ref" not in node and "anyOf" not in node and "title" not in node
        assert node.get("additionalProperties") is not False
        assert node.get("default", 0) is not None
    columns = [c["name"] for c in version["additionalPrinterColumns"]]
    assert columns[0] == "Ready" and columns[-2:] == ["Phase", "Age"]
    assert crd["spec"]["names"]["shortNames"]


def test_broker_printer_columns() -> None:
    version = load("ferrymq.io_brokers.yaml")["spec"]["versions"][0]
    assert [c["name"] for c in version["additionalPrinterColumns"]] == [
        "Ready",
        "Groups",
        "Phase",
        "Age",
    ]


def openapi_validator(name: str) -> jsonschema.Draft7Validator:
    schema = load(name)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return jsonschema.Draft7Validator(schema)


def test_schema_accepts_a_full_broker() -> None:
    validator = openapi_validator("ferrymq.io_brokers.yaml")
    body = {
        "apiVersion": "ferrymq.io/v1alpha1",
        "kind": "Broker",
        "metadata": {"name": "b"},
        "spec": {
            "nameServerRef": {"name": "ns"},
            "groups": 3,
            "replicasPerGroup": 2,
            "brokerRole": "SYNC_MASTER",
            "flushDiskType": "SYNC_FLUSH",
            "config": {"fileReservedTime": "48"},
            "storage": {"storageClassName": "ssd", "size": "50Gi", "deleteClaimOnScaleDown": True},
            "resources": {"requests": {"cpu": "1"}},
            "tolerations": [{"key": "a", "operator": "Exists"}],
        },
    }
    assert not list(validator.iter_errors(body))
    spec = body["spec"]
    assert isinstance(spec, dict)
    models.parse_broker_spec(spec)  # the operator accepts it too


@pytest.mark.parametrize(
    ("spec", "path"),
    [
        ({"nameServerRef": {"name": "ns"}, "groups": 0}, "groups"),
        ({"nameServerRef": {"name": "ns"}, "brokerRole": "SLAVE"}, "brokerRole"),
        ({"nameServerRef": {"name": "ns"}, "storage": {"size": "lots"}}, "size"),
        ({"groups": 2}, "nameServerRef"),
        ({"nameServerRef": {"name": "ns"}, "replicasPerGroup": "two"}, "replicasPerGroup"),
    ],
)
def test_schema_refuses_what_the_model_refuses(spec: dict[str, Any], path: str) -> None:
    validator = openapi_validator("ferrymq.io_brokers.yaml")
    body = {"apiVersion": "ferrymq.io/v1alpha1", "kind": "Broker", "metadata": {}, "spec": spec}
    errors = list(validator.iter_errors(body))
    assert errors, f"schema accepted {spec}"
    assert any(path in "/".join(map(str, e.absolute_path)) or path in e.message for e in errors)
    with pytest.raises(models.InvalidSpec):
        models.parse_broker_spec(spec)


def test_chart_carries_the_same_crds() -> None:
    for name in ("ferrymq.io_brokers.yaml", "ferrymq.io_nameservers.yaml"):
        chart_copy = ROOT / "charts" / "ferrymq-operator" / "crds" / name
        assert chart_copy.read_text() == (ROOT / "crds" / name).read_text()
