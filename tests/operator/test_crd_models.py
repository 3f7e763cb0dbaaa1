"""Spec parsing: defaults, schema-level refusals and the cross-field rules the operator enforces."""

from __future__ import annotations

from decimal import Decimal

import pytest
from ferrymq_operator import models
from ferrymq_operator.models import InvalidSpec, parse_broker_spec, parse_nameserver_spec

REF = {"nameServerRef": {"name": "routes"}}


def test_broker_defaults() -> None:
    spec = parse_broker_spec(REF)
    assert spec.groups == 1
    assert spec.replicas_per_group == 2
    assert spec.broker_role == "ASYNC_MASTER"
    assert spec.flush_disk_type == "ASYNC_FLUSH"
    assert spec.storage.size == "10Gi"
    assert spec.storage.delete_claim_on_scale_down is False
    assert spec.pod_anti_affinity == "Required"
    assert spec.image == models.DEFAULT_IMAGE


def test_nameserver_defaults() -> None:
    spec = parse_nameserver_spec({})
    assert spec.replicas == 2
    assert spec.pod_anti_affinity == "Preferred"


def test_camel_case_keys_round_trip() -> None:
    spec = parse_broker_spec(
        {**REF, "replicasPerGroup": 3, "storage": {"storageClassName": "fast", "size": "1Ti"}}
    )
    dumped = spec.model_dump(by_alias=True)
    assert dumped["replicasPerGroup"] == 3
    assert dumped["storage"]["storageClassName"] == "fast"


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({}, "spec.nameServerRef: Field required"),
        ({**REF, "groups": 0}, "spec.groups: Input should be greater than or equal to 1"),
        ({**REF, "replicasPerGroup": 9}, "spec.replicasPerGroup"),
        (
            {**REF, "brokerRole": "SLAVE"},
            "spec.brokerRole: Input should be 'SYNC_MASTER' or 'ASYNC_MASTER'",
        ),
        ({**REF, "flushDiskType": "sync"}, "spec.flushDiskType"),
        (
            {**REF, "storage": {"size": "ten gigs"}},
            "spec.storage.size: String should match pattern",
        ),
        ({**REF, "storage": {"size": "0"}}, "spec.storage.size: size must be larger than 0"),
        ({**REF, "unknownField": 1}, "spec.unknownField: Extra inputs are not permitted"),
        (
            {"nameServerRef": {"name": "Bad_Name"}},
            "spec.nameServerRef.name: String should match pattern",
        ),
        (
            {**REF, "config": {"bad key": "1"}},
            "spec.config: config key 'bad key' is not a properties key",
        ),
        ({**REF, "tolerations": [{"effect": "Sometimes"}]}, "spec.tolerations.[0].effect"),
        ({**REF, "imagePullPolicy": "Maybe"}, "spec.imagePullPolicy"),
    ],
)
def test_broker_field_errors_name_the_key(spec: dict[str, object], expected: str) -> None:
    with pytest.raises(InvalidSpec) as info:
        parse_broker_spec(spec)
    assert expected in str(info.value)


def test_sync_master_needs_a_slave() -> None:
    with pytest.raises(InvalidSpec) as info:
        parse_broker_spec({**REF, "brokerRole": "SYNC_MASTER", "replicasPerGroup": 1})
    message = str(info.value)
    assert "replicasPerGroup" in message and "ASYNC_MASTER" in message
    assert parse_broker_spec({**REF, "brokerRole": "SYNC_MASTER", "replicasPerGroup": 2})


@pytest.mark.parametrize("key", sorted(models.BROKER_RESERVED_KEYS))
def test_operator_owned_broker_keys_refused(key: str) -> None:
    with pytest.raises(InvalidSpec) as info:
        parse_broker_spec({**REF, "config": {key: "x"}})
    assert key in str(info.value)
    assert "remove it from spec.config" in str(info.value)


def test_nameserver_port_is_reserved() -> None:
    with pytest.raises(InvalidSpec, match="listenPort"):
        parse_nameserver_spec({"config": {"listenPort": "9999"}})


def test_requests_above_limits_refused() -> None:
    with pytest.raises(InvalidSpec) as info:
        parse_broker_spec(
            {**REF, "resources": {"requests": {"memory": "8Gi"}, "limits": {"memory": "4Gi"}}}
        )
    assert "requests.memory (8Gi) is larger than limits.memory (4Gi)" in str(info.value)


def test_requests_equal_limits_accepted() -> None:
    spec = parse_broker_spec(
        {**REF, "resources": {"requests": {"cpu": "1000m"}, "limits": {"cpu": "1"}}}
    )
    assert spec.resources.limits == {"cpu": "1"}


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("500m", Decimal("0.5")),
        ("2", Decimal(2)),
        ("1Ki", Decimal(1024)),
        ("1.5G", Decimal(1_500_000_000)),
    ],
)
def test_parse_quantity(text: str, value: Decimal) -> None:
    assert models.parse_quantity(text) == value


def test_parse_quantity_rejects_garbage() -> None:
    with pytest.raises(ValueError, match="not a Kubernetes quantity"):
        models.parse_quantity("12Xi")


def test_several_errors_reported_together() -> None:
    with pytest.raises(InvalidSpec) as info:
        parse_broker_spec({**REF, "groups": -1, "flushDiskType": "NOPE"})
    assert "spec.groups" in str(info.value) and "spec.flushDiskType" in str(info.value)
