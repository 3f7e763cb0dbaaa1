"""examples/: every document is a valid object, every ferrymq resource parses with the operator's
models and builds (the server-side dry run against a real API server is
tests/chart/test_examples_cluster.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from ferrymq_operator import console_models, models
from ferrymq_operator.builders import broker, console, namesrv, proxy
from ferrymq_operator.builders.names import Owner
from ferrymq_operator.topics import models as topic_models

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
FILES = sorted(EXAMPLES.glob("*.yaml"))
ADDR = "n-namesrv-0.n-namesrv-hs.ns.svc.cluster.local:9876"
REQUIRED = {
    "minimal.yaml",
    "production.yaml",
    "controller-mode.yaml",
    "tls-acl.yaml",
    "topic.yaml",
    "consumergroup.yaml",
    "console.yaml",
    "proxy.yaml",
}


def documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def owner(doc: dict[str, Any]) -> Owner:
    return Owner(doc["apiVersion"], doc["kind"], doc["metadata"]["name"], "ns", "uid")


def test_the_promised_examples_exist() -> None:
    assert {p.name for p in FILES} >= REQUIRED


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_every_example_parses_and_builds(path: Path) -> None:
    for doc in documents(path):
        kind, spec = doc["kind"], doc.get("spec") or {}
        if not doc["apiVersion"].startswith("ferrymq.io/"):
            kubernetes_validate.validate(doc, "1.25", strict=True)
        elif kind == "NameServer":
            namesrv.desired(owner(doc), models.parse_nameserver_spec(spec), "policy/v1")
        elif kind == "Broker":
            parsed = models.parse_broker_spec(spec)
            broker.desired(owner(doc), parsed, ADDR, "policy/v1")
            for obj in proxy.desired(owner(doc), parsed, ADDR, "policy/v1"):
                kubernetes_validate.validate(obj, "1.25", strict=True)
        elif kind == "Console":
            console.desired(owner(doc), console_models.parse_console_spec(spec), ADDR)
        elif kind == "Topic":
            topic_models.parse_topic_spec(spec)
        elif kind == "ConsumerGroup":
            topic_models.parse_group_spec(spec)
        else:
            pytest.fail(f"{path.name}: no check for kind {kind}")
