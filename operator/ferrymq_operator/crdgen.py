"""Generate the CustomResourceDefinitions in ``crds/`` (and the chart's copy) from ``models.py``.

``python -m ferrymq_operator.crdgen`` rewrites the files; ``--check`` exits 1 when they are stale
(tests/operator/test_crdgen.py does the same check, so a model change without regeneration fails).

The pydantic JSON schema is turned into a Kubernetes *structural* schema: ``$ref`` inlined,
``Optional`` unwrapped (absent instead of null), titles and ``additionalProperties: false`` dropped
(unknown fields are pruned by the API server instead).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from ferrymq_operator import console_models, models
from ferrymq_operator.topics import models as topic_models

REPO_ROOT = Path(__file__).resolve().parents[2]
OUTPUT_DIRS = (Path("crds"), Path("charts/ferrymq-operator/crds"))

_KEEP = {
    "type",
    "description",
    "properties",
    "required",
    "items",
    "additionalProperties",
    "enum",
    "default",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "format",
}


def structural(schema: Mapping[str, Any], defs: Mapping[str, Any]) -> dict[str, Any]:
    """Convert one pydantic JSON-schema node into a structural OpenAPI v3 node."""
    if "$ref" in schema:
        target = defs[schema["$ref"].rsplit("/", 1)[-1]]
        merged = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
        return structural(merged, defs)
    if "anyOf" in schema:
        variants = [v for v in schema["anyOf"] if v.get("type") != "null"]
        if len(variants) != 1:
            raise ValueError(f"cannot express a union of {len(variants)} types in a CRD: {schema}")
        rest = {k: v for k, v in schema.items() if k not in ("anyOf", "default")}
        if schema.get("default") is not None:
            rest["default"] = schema["default"]
        return structural({**variants[0], **rest}, defs)
    if "allOf" in schema and len(schema["allOf"]) == 1:
        rest = {k: v for k, v in schema.items() if k != "allOf"}
        return structural({**schema["allOf"][0], **rest}, defs)

    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key not in _KEEP:
            continue
        if key == "properties":
            out[key] = {name: structural(sub, defs) for name, sub in value.items()}
        elif key == "items":
            out[key] = structural(value, defs)
        elif key == "additionalProperties":
            if isinstance(value, dict):
                out[key] = structural(value, defs)
        elif key == "default" and value is None:
            continue
        elif key == "required":
            out[key] = sorted(value)
        else:
            out[key] = value
    if "properties" in out or ("additionalProperties" in out and "type" not in out):
        out.setdefault("type", "object")
    if (
        out.get("type") == "object"
        and "properties" not in out
        and "additionalProperties" not in out
    ):
        # A free-form object: keep what the user wrote instead of pruning it.
        out["x-kubernetes-preserve-unknown-fields"] = True
    return out


def model_schema(model: type[BaseModel]) -> dict[str, Any]:
    raw = model.model_json_schema(by_alias=True, mode="validation")
    return structural(raw, raw.get("$defs", {}))


def without_defaults(node: Any) -> Any:
    """Drop every ``default`` (the status is written whole by the operator; the API server must
    not invent values there, and 1.20 rejects an empty-string default as null)."""
    if isinstance(node, dict):
        return {k: without_defaults(v) for k, v in node.items() if k != "default"}
    if isinstance(node, list):
        return [without_defaults(v) for v in node]
    return node


def crd(
    kind: str,
    plural: str,
    short_names: list[str],
    spec_model: type[BaseModel],
    status_model: type[BaseModel],
    columns: list[dict[str, Any]],
    description: str,
) -> dict[str, Any]:
    spec_schema = model_schema(spec_model)
    spec_schema["default"] = {}  # so the API server fills nested defaults even for `spec: {}`
    if spec_schema.get("required"):
        del spec_schema["default"]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{plural}.{models.GROUP}",
            "labels": {"app.kubernetes.io/name": "ferrymq", "app.kubernetes.io/part-of": "ferrymq"},
        },
        "spec": {
            "group": models.GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": short_names,
                "categories": ["ferrymq"],
            },
            "versions": [
                {
                    "name": models.VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": columns,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": description,
                            "required": ["spec"],
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": spec_schema,
                                "status": without_defaults(model_schema(status_model)),
                            },
                        }
                    },
                }
            ],
        },
    }


def _column(name: str, path: str, kind: str = "string", description: str = "") -> dict[str, Any]:
    col = {"name": name, "type": kind, "jsonPath": path}
    if description:
        col["description"] = description
    return col


def all_crds() -> dict[str, dict[str, Any]]:
    """File name -> CRD object."""
    ready = _column("Ready", ".status.ready", description="Ready pods / desired pods")
    phase = _column("Phase", ".status.phase")
    age = _column("Age", ".metadata.creationTimestamp", "date")
    return {
        f"{models.GROUP}_nameservers.yaml": crd(
            "NameServer",
            "nameservers",
            ["fmqns", "fmqnamesrv"],
            models.NameServerSpec,
            models.NameServerStatus,
            [ready, _column("Replicas", ".spec.replicas", "integer"), phase, age],
            "A ferrymq NameServer ensemble (route registry), run as a StatefulSet.",
        ),
        f"{models.GROUP}_brokers.yaml": crd(
            "Broker",
            "brokers",
            ["fmqb", "fmqbroker"],
            models.BrokerSpec,
            models.BrokerStatus,
            [
                ready,
                _column("Groups", ".spec.groups", "integer", "Broker groups (masters)"),
                phase,
                age,
            ],
            "A ferrymq broker cluster: groups of one master and its slaves, one StatefulSet each.",
        ),
        **topic_crds(age),
        f"{models.GROUP}_consoles.yaml": crd(
            "Console",
            "consoles",
            ["fmqc", "fmqconsole"],
            console_models.ConsoleSpec,
            console_models.ConsoleStatus,
            [
                _column("Broker", ".spec.brokerRef.name"),
                ready,
                _column("URL", ".status.url"),
                phase,
                age,
            ],
            "rocketmq-dashboard for a Broker: Deployment, Service and NetworkPolicy.",
        ),
    }


def topic_crds(age: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Topic and ConsumerGroup (ferrymq_operator.topics)."""
    ready = _column("Ready", '.status.conditions[?(@.type=="Ready")].status')
    reason = _column("Reason", '.status.conditions[?(@.type=="Ready")].reason')
    broker = _column("Broker", ".spec.brokerRef.name")
    name = _column("Name", ".status.name", description="RocketMQ name")
    return {
        f"{models.GROUP}_topics.yaml": crd(
            "Topic",
            "topics",
            ["fmqt", "fmqtopic"],
            topic_models.TopicSpec,
            topic_models.TopicStatus,
            [
                name,
                broker,
                ready,
                _column("Queues", ".status.queues", description="read/write queues per group"),
                reason,
                age,
            ],
            "A ferrymq topic on every broker group of a Broker (the resource is the source of truth).",
        ),
        f"{models.GROUP}_consumergroups.yaml": crd(
            "ConsumerGroup",
            "consumergroups",
            ["fmqcg", "fmqgroup"],
            topic_models.ConsumerGroupSpec,
            topic_models.ConsumerGroupStatus,
            [
                name,
                broker,
                ready,
                _column("Lag", ".status.lag", "integer", "Unconsumed messages"),
                reason,
                age,
            ],
            "A ferrymq consumer group (upstream SubscriptionGroupConfig) on every broker group.",
        ),
    }


def render(obj: dict[str, Any]) -> str:
    header = "# Generated by `python -m ferrymq_operator.crdgen` from models.py. Do not edit.\n"
    return header + yaml.safe_dump(obj, sort_keys=False, width=100)


def stale_files(root: Path) -> list[Path]:
    """Files under ``root`` that differ from what the models generate (or are missing)."""
    stale = []
    for out_dir in OUTPUT_DIRS:
        for file_name, obj in all_crds().items():
            path = root / out_dir / file_name
            if not path.exists() or path.read_text() != render(obj):
                stale.append(path)
    return stale


def write(root: Path) -> list[Path]:
    written = []
    for out_dir in OUTPUT_DIRS:
        (root / out_dir).mkdir(parents=True, exist_ok=True)
        for file_name, obj in all_crds().items():
            path = root / out_dir / file_name
            path.write_text(render(obj))
            written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ferrymq_operator.crdgen", description=__doc__)
    parser.add_argument("--root", type=Path, default=REPO_ROOT, help="repository root")
    parser.add_argument("--check", action="store_true", help="exit 1 if the files are stale")
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_files(args.root)
        for path in stale:
            print(f"stale: {path} (run python -m ferrymq_operator.crdgen)", file=sys.stderr)
        return 1 if stale else 0
    for path in write(args.root):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
