"""storage.size growth decisions and ephemeral storage (pure)."""

from __future__ import annotations

from ferrymq_operator import storage
from ferrymq_operator.builders import broker
from ferrymq_operator.builders.names import Owner
from ferrymq_operator.models import parse_broker_spec
from ferrymq_operator.storage import Claim

REF = {"nameServerRef": {"name": "routes"}}
ADDR = "routes-namesrv-0.routes-namesrv-hs.prod.svc.cluster.local:9876"
TEMPLATES = {"b-broker-0": "1Gi", "b-broker-1": "1Gi"}
CLAIMS = [Claim(f"store-b-broker-{g}-{i}", "1Gi", "ssd") for g in range(2) for i in range(2)]


def test_same_size_changes_nothing() -> None:
    plan = storage.plan("1Gi", TEMPLATES, CLAIMS, {"ssd": False})
    assert plan == storage.StoragePlan("1Gi")


def test_growth_expands_every_claim_and_recreates_every_statefulset() -> None:
    plan = storage.plan("2Gi", TEMPLATES, CLAIMS, {"ssd": True})
    assert plan.refused is None
    assert plan.template_size == "2Gi"
    assert plan.expand == sorted(c.name for c in CLAIMS)
    assert plan.recreate == ["b-broker-0", "b-broker-1"]


def test_equal_quantities_in_other_units_are_equal() -> None:
    plan = storage.plan("1024Mi", TEMPLATES, CLAIMS, {})
    assert plan == storage.StoragePlan("1024Mi")


def test_a_class_without_expansion_refuses_and_changes_nothing() -> None:
    claims = [*CLAIMS[:3], Claim("store-b-broker-1-1", "1Gi", "slow")]
    plan = storage.plan("2Gi", TEMPLATES, claims, {"ssd": True, "slow": False})
    assert plan.expand == [] and plan.recreate == []
    assert plan.template_size == "1Gi"
    assert plan.refused is not None
    reason, message = plan.refused
    assert reason == "StorageResizeUnsupported"
    assert "StorageClass slow does not allow volume expansion" in message
    assert "set the size back to 1Gi" in message


def test_a_claim_without_a_known_class_is_not_expanded() -> None:
    plan = storage.plan("2Gi", TEMPLATES, [Claim("c", "1Gi", None)], {})
    assert plan.refused is not None and "<none>" in plan.refused[1]


def test_shrinking_is_refused() -> None:
    plan = storage.plan("512Mi", TEMPLATES, CLAIMS, {"ssd": True})
    assert plan.refused is not None
    assert plan.refused[0] == "StorageShrinkUnsupported"
    assert plan.template_size == "1Gi"


def test_claims_already_grown_are_not_patched_again() -> None:
    claims = [Claim("a", "2Gi", "ssd"), Claim("b", "1Gi", "ssd")]
    plan = storage.plan("2Gi", {"b-broker-0": "1Gi"}, claims, {"ssd": True})
    assert plan.expand == ["b"] and plan.recreate == ["b-broker-0"]


def test_template_size_reads_the_claim_template(broker_owner: Owner) -> None:
    spec = parse_broker_spec({**REF, "storage": {"size": "3Gi"}})
    sts = next(
        o
        for o in broker.desired(broker_owner, spec, ADDR, "policy/v1")
        if o["kind"] == "StatefulSet"
    )
    assert storage.template_size(sts) == "3Gi"
    pvc = {
        "metadata": {"name": "x"},
        "spec": {"resources": {"requests": {"storage": "3Gi"}}, "storageClassName": "ssd"},
    }
    assert storage.claim_of(pvc) == Claim("x", "3Gi", "ssd")


def test_ephemeral_storage_is_an_emptydir(broker_owner: Owner) -> None:
    spec = parse_broker_spec({**REF, "storage": {"type": "ephemeral", "size": "2Gi"}})
    sts = next(
        o
        for o in broker.desired(broker_owner, spec, ADDR, "policy/v1")
        if o["kind"] == "StatefulSet"
    )
    assert "volumeClaimTemplates" not in sts["spec"]
    assert storage.template_size(sts) is None
    volumes = sts["spec"]["template"]["spec"]["volumes"]
    assert {"name": "store", "emptyDir": {"sizeLimit": "2Gi"}} in volumes
    mounts = sts["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
    assert {"name": "store", "mountPath": "/home/ferrymq/store"} in mounts
