"""Audit CronJob builder: schedule, commands, claim, API version from discovery."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest
from ferrymq_operator.builders import audit, names
from ferrymq_operator.builders.names import Owner
from ferrymq_operator.images import SPARK_IMAGE
from ferrymq_operator.models import InvalidSpec, parse_broker_spec

ADDR = names.namesrv_addresses("routes", "prod", 2, "cluster.local")


def build(owner: Owner, api: str = "batch/v1", **audit_spec: Any) -> dict[str, dict[str, Any]]:
    spec = parse_broker_spec(
        {"nameServerRef": {"name": "routes"}, "image": "r/ferrymq:1", "audit": audit_spec}
    )
    return {o["kind"]: o for o in audit.desired(owner, spec, ADDR, api)}


def test_no_audit_no_objects(broker_owner: Owner) -> None:
    spec = parse_broker_spec({"nameServerRef": {"name": "routes"}})
    assert audit.desired(broker_owner, spec, ADDR, "batch/v1") == []


def test_cronjob_runs_snapshot_then_reports(broker_owner: Owner) -> None:
    objs = build(broker_owner, api="batch/v1beta1", schedule="*/15 * * * *")
    cron = objs["CronJob"]
    assert cron["apiVersion"] == "batch/v1beta1"
    assert cron["metadata"]["name"] == "orders-audit"
    assert cron["spec"]["schedule"] == "*/15 * * * *"
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    pod = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    # The Spark image, not spec.image: the broker image has no PySpark and no Java.
    assert container["image"] == SPARK_IMAGE != "r/ferrymq:1"
    script = container["command"][2]
    lines = script.splitlines()
    assert lines[0] == "set -eu"
    assert f"ferrymq admin snapshot --namesrv '{ADDR}' --out /audit/snapshots" in lines
    assert lines.index(next(x for x in lines if "admin snapshot" in x)) < lines.index(
        next(x for x in lines if "report backlog" in x)
    )
    assert any("ferrymq report rebalance --snapshots /audit/snapshots" in x for x in lines)
    assert pod["volumes"][0]["persistentVolumeClaim"]["claimName"] == "orders-audit"
    assert pod["securityContext"]["runAsNonRoot"] is True


def test_reports_optional_and_image_override(broker_owner: Owner) -> None:
    cron = build(broker_owner, schedule="@hourly", reports=False, image="r/spark:2", suspend=True)[
        "CronJob"
    ]
    container = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    assert "ferrymq report" not in container["command"][2]
    assert container["image"] == "r/spark:2"
    assert cron["spec"]["suspend"] is True


def test_claim(broker_owner: Owner) -> None:
    pvc = build(broker_owner, schedule="@daily", storage={"size": "20Gi", "storageClassName": "s"})[
        "PersistentVolumeClaim"
    ]
    assert pvc["spec"]["resources"]["requests"]["storage"] == "20Gi"
    assert pvc["spec"]["storageClassName"] == "s"
    # kept when the Broker is deleted, like the store claims: no owner for the garbage collector
    assert "ownerReferences" not in pvc["metadata"]


def test_audit_pods_follow_host_network(broker_owner: Owner) -> None:
    """On a host-network cluster a pod off the node's network has no network at all."""
    spec = parse_broker_spec(
        {"nameServerRef": {"name": "r"}, "hostNetwork": True, "audit": {"schedule": "@daily"}}
    )
    cron = {o["kind"]: o for o in audit.desired(broker_owner, spec, ADDR, "batch/v1")}["CronJob"]
    pod_spec = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert pod_spec["hostNetwork"] is True
    assert pod_spec["dnsPolicy"] == "ClusterFirstWithHostNet"
    plain = build(broker_owner, schedule="@daily")["CronJob"]
    assert "hostNetwork" not in plain["spec"]["jobTemplate"]["spec"]["template"]["spec"]


@pytest.mark.parametrize("schedule", ["every hour", "* * *", "", "@sometimes"])
def test_bad_schedule_refused(schedule: str) -> None:
    with pytest.raises(InvalidSpec, match=r"spec\.audit\.schedule"):
        parse_broker_spec({"nameServerRef": {"name": "r"}, "audit": {"schedule": schedule}})


def test_manifests_pass_kubernetes_schema(broker_owner: Owner) -> None:
    for obj in build(
        broker_owner, schedule="0 3 * * *", resources={"limits": {"memory": "2Gi"}}
    ).values():
        kubernetes_validate.validate(obj, "1.25.0", strict=True)
