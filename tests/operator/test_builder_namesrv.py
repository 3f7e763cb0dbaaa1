"""NameServer builder: every spec field lands where it should; manifests are valid objects."""

from __future__ import annotations

from typing import Any

import javaproperties
import kubernetes_validate
from ferrymq_operator.builders import names, namesrv, pod
from ferrymq_operator.builders.names import Owner
from ferrymq_operator.models import parse_nameserver_spec


def build(
    owner: Owner, pdb: str = "policy/v1", **spec: Any
) -> dict[tuple[str, str], dict[str, Any]]:
    objects = namesrv.desired(owner, parse_nameserver_spec(spec), pdb)
    return {(o["kind"], o["metadata"]["name"]): o for o in objects}


def test_children(namesrv_owner: Owner) -> None:
    assert sorted(build(namesrv_owner)) == sorted(
        [
            ("ConfigMap", "routes-namesrv-config"),
            ("Service", "routes-namesrv-hs"),
            ("Service", "routes-namesrv"),
            ("StatefulSet", "routes-namesrv"),
            ("PodDisruptionBudget", "routes-namesrv"),
        ]
    )


def test_replicas_and_image(namesrv_owner: Owner) -> None:
    sts = build(namesrv_owner, replicas=3, image="r/ferrymq:9")[("StatefulSet", "routes-namesrv")]
    assert sts["spec"]["replicas"] == 3
    c = sts["spec"]["template"]["spec"]["containers"][0]
    assert c["image"] == "r/ferrymq:9"
    assert c["args"] == ["namesrv", "-c", "/etc/ferrymq/namesrv.conf"]
    assert c["ports"] == [
        {"name": "namesrv", "containerPort": 9876, "protocol": "TCP"},
        # /metrics on by default (upstream's metricsPromExporterPort)
        {"name": "metrics", "containerPort": 5557, "protocol": "TCP"},
    ]
    for probe in ("readinessProbe", "livenessProbe"):
        command = c[probe]["exec"]["command"]
        assert command[:2] == ["/bin/sh", "-c"]
        assert f'find "{pod.PROBE_DIR}/serving-9876" -newermt' in command[2]


def test_config_file(namesrv_owner: Owner) -> None:
    cm = build(namesrv_owner, config={"scanNotActiveBrokerInterval": "5000"})[
        ("ConfigMap", "routes-namesrv-config")
    ]
    assert javaproperties.loads(cm["data"]["namesrv.conf"]) == {
        "listenPort": "9876",
        "metricsPort": "5557",
        "scanNotActiveBrokerInterval": "5000",
    }


def test_services(namesrv_owner: Owner) -> None:
    objs = build(namesrv_owner)
    headless = objs[("Service", "routes-namesrv-hs")]
    client = objs[("Service", "routes-namesrv")]
    sts = objs[("StatefulSet", "routes-namesrv")]
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["spec"]["publishNotReadyAddresses"] is True
    assert sts["spec"]["serviceName"] == "routes-namesrv-hs"
    assert client["spec"]["type"] == "ClusterIP"
    labels = sts["spec"]["template"]["metadata"]["labels"]
    for svc in (headless, client):
        assert svc["spec"]["selector"].items() <= labels.items()
        assert svc["spec"]["ports"][0]["port"] == 9876


def test_anti_affinity_default_preferred_and_required(namesrv_owner: Owner) -> None:
    preferred = build(namesrv_owner)[("StatefulSet", "routes-namesrv")]
    assert (
        "preferredDuringSchedulingIgnoredDuringExecution"
        in (preferred["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"])
    )
    required = build(namesrv_owner, podAntiAffinity="Required")[("StatefulSet", "routes-namesrv")]
    assert (
        "requiredDuringSchedulingIgnoredDuringExecution"
        in (required["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"])
    )


def test_pdb_version_from_discovery(namesrv_owner: Owner) -> None:
    pdb = build(namesrv_owner, pdb="policy/v1beta1")[("PodDisruptionBudget", "routes-namesrv")]
    assert pdb["apiVersion"] == "policy/v1beta1"
    assert pdb["spec"]["maxUnavailable"] == 1


def test_security_context(namesrv_owner: Owner) -> None:
    pod = build(namesrv_owner)[("StatefulSet", "routes-namesrv")]["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True


def test_owned_by_nameserver(namesrv_owner: Owner) -> None:
    for obj in build(namesrv_owner).values():
        assert obj["metadata"]["ownerReferences"][0]["kind"] == "NameServer"
        assert obj["metadata"]["labels"][names.LABEL_COMPONENT] == "namesrv"


def test_manifests_pass_kubernetes_schema(namesrv_owner: Owner) -> None:
    objs = build(
        namesrv_owner, replicas=3, resources={"limits": {"memory": "1Gi"}}, nodeSelector={"a": "b"}
    )
    for obj in objs.values():
        kubernetes_validate.validate(obj, "1.25.0", strict=True)
