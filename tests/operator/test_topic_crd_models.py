"""Topic and ConsumerGroup models and their CRDs: what the schema refuses, what only the operator
can refuse (with a message naming the key), printer columns."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import pytest
import yaml
from ferrymq_operator.models import InvalidSpec
from ferrymq_operator.topics import models as tm

ROOT = Path(__file__).resolve().parents[2]
REF = {"brokerRef": {"name": "orders"}}


def validator(name: str) -> jsonschema.Draft7Validator:
    crd = yaml.safe_load((ROOT / "crds" / name).read_text())
    return jsonschema.Draft7Validator(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"])


def body(kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "ferrymq.io/v1alpha1", "kind": kind, "metadata": {}, "spec": spec}


def test_queue_counts_defaults_and_shorthand() -> None:
    assert tm.parse_topic_spec(REF).queue_counts() == (8, 8)
    assert tm.parse_topic_spec({**REF, "queues": 3}).queue_counts() == (3, 3)
    assert tm.parse_topic_spec({**REF, "readQueueNums": 4}).queue_counts() == (4, 4)
    assert tm.parse_topic_spec({**REF, "readQueueNums": 4, "writeQueueNums": 2}).queue_counts() == (
        4,
        2,
    )


def test_attributes_carry_the_message_type() -> None:
    spec = tm.parse_topic_spec({**REF, "messageType": "FIFO"})
    assert spec.attributes() == {"message.type": "FIFO"}


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ({"queues": 4, "readQueueNums": 4}, ["either queues", "readQueueNums"]),
        ({"readQueueNums": 2, "writeQueueNums": 4}, ["writeQueueNums (4)", "never be read"]),
        ({"config": {"message.type": "FIFO"}}, ["spec.messageType"]),
        ({"config": {"retention": "7d"}}, ["unsupported topic attribute", "retention"]),
    ],
)
def test_operator_refuses_cross_field_problems(spec: dict[str, Any], words: list[str]) -> None:
    with pytest.raises(InvalidSpec) as caught:
        tm.parse_topic_spec({**REF, **spec})
    for word in words:
        assert word in str(caught.value)
    # the schema cannot express these: it lets them through to the operator
    assert not list(validator("ferrymq.io_topics.yaml").iter_errors(body("Topic", {**REF, **spec})))


@pytest.mark.parametrize(
    ("spec", "path"),
    [
        ({"name": "has space"}, "name"),
        ({"name": "x" * 128}, "name"),
        ({"queues": 0}, "queues"),
        ({"writeQueueNums": 1025}, "writeQueueNums"),
        ({"perm": 7}, "perm"),
        ({"messageType": "MIXED"}, "messageType"),
        ({"brokerRef": {"name": "Not_A_Dns_Label"}}, "name"),
    ],
)
def test_schema_refuses_what_the_model_refuses(spec: dict[str, Any], path: str) -> None:
    full = {**REF, **spec}
    errors = list(validator("ferrymq.io_topics.yaml").iter_errors(body("Topic", full)))
    assert errors and any(path in "/".join(map(str, e.absolute_path)) for e in errors)
    with pytest.raises(InvalidSpec):
        tm.parse_topic_spec(full)


def test_schema_accepts_upstream_topic_names_kubernetes_names_cannot_hold() -> None:
    spec = {**REF, "name": "Order_Events|v2%x", "queues": 16, "messageType": "TRANSACTION"}
    assert not list(validator("ferrymq.io_topics.yaml").iter_errors(body("Topic", spec)))
    assert tm.parse_topic_spec(spec).name == "Order_Events|v2%x"


def test_consumer_group_defaults_are_upstreams() -> None:
    spec = tm.parse_group_spec(REF)
    assert (spec.retry_max_times, spec.retry_queue_nums, spec.which_broker_when_consume_slowly) == (
        16,
        1,
        1,
    )
    assert spec.consume_broadcast_enable and spec.consume_from_min_enable
    assert not spec.consume_message_orderly
    errors = list(
        validator("ferrymq.io_consumergroups.yaml").iter_errors(
            body("ConsumerGroup", {**REF, "retryMaxTimes": 5000})
        )
    )
    assert errors
    with pytest.raises(InvalidSpec) as caught:
        tm.parse_group_spec({**REF, "retryMaxTimes": 5000})
    assert "spec.retryMaxTimes" in str(caught.value)


def test_printer_columns() -> None:
    for name, column in (
        ("ferrymq.io_topics.yaml", "Queues"),
        ("ferrymq.io_consumergroups.yaml", "Lag"),
    ):
        crd = yaml.safe_load((ROOT / "crds" / name).read_text())
        version = crd["spec"]["versions"][0]
        columns = [c["name"] for c in version["additionalPrinterColumns"]]
        assert columns == ["Name", "Broker", "Ready", column, "Reason", "Age"]
        assert version["subresources"] == {"status": {}}
        chart_copy = ROOT / "charts" / "ferrymq-operator" / "crds" / name
        assert chart_copy.read_text() == (ROOT / "crds" / name).read_text()
