"""Console -> rocketmq-dashboard Deployment, Service, NetworkPolicy (pure builders)."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest
from ferrymq_operator.builders import console
from ferrymq_operator.builders.names import Owner
from ferrymq_operator.console_models import parse_console_spec
from ferrymq_operator.models import InvalidSpec

OWNER = Owner("ferrymq.io/v1alpha1", "Console", "ops", "prod", "uid-console-1")
ADDR = "routes-namesrv-0.routes-namesrv-hs.prod.svc.cluster.local:9876;routes-namesrv-1.x:9876"
BASE = {"brokerRef": {"name": "orders"}, "image": "registry.example/rocketmq-dashboard:2.0.1"}


def build(**spec: Any) -> dict[str, dict[str, Any]]:
    objects = console.desired(OWNER, parse_console_spec({**BASE, **spec}), ADDR)
    for obj in objects:
        kubernetes_validate.validate(obj, "1.25", strict=True)
    return {o["kind"]: o for o in objects}


def test_dashboard_points_at_the_brokers_nameservers() -> None:
    objs = build()
    assert set(objs) == {"Deployment", "Service", "NetworkPolicy"}
    deploy = objs["Deployment"]
    assert deploy["metadata"]["name"] == "ops-console"
    assert deploy["metadata"]["ownerReferences"][0]["kind"] == "Console"
    main = deploy["spec"]["template"]["spec"]["containers"][0]
    assert main["image"] == BASE["image"]
    opts = next(e["value"] for e in main["env"] if e["name"] == "JAVA_OPTS")
    assert f"-Drocketmq.namesrv.addr={ADDR}" in opts
    assert "-Drocketmq.config.loginRequired=false" in opts
    assert "-Dserver.port=8082" in opts
    assert main["ports"] == [{"name": "http", "containerPort": 8082, "protocol": "TCP"}]
    assert main["resources"] == {"requests": {"cpu": "100m", "memory": "384Mi"}}
    assert deploy["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True
    svc = objs["Service"]
    assert svc["spec"]["type"] == "ClusterIP"
    assert svc["spec"]["ports"][0]["port"] == 8082
    assert svc["spec"]["selector"] == deploy["spec"]["selector"]["matchLabels"]


def test_auth_mounts_the_users_file_and_requires_login() -> None:
    deploy = build(auth={"secretName": "console-users"})["Deployment"]
    pod_spec = deploy["spec"]["template"]["spec"]
    main = pod_spec["containers"][0]
    assert "-Drocketmq.config.loginRequired=true" in main["env"][0]["value"]
    assert {"name": "users", "secret": {"secretName": "console-users"}} in pod_spec["volumes"]
    assert {
        "name": "users",
        "mountPath": "/tmp/rocketmq-console/data/users.properties",
        "subPath": "users.properties",
    } in main["volumeMounts"]


def test_network_policy_admits_the_given_peers_on_the_console_port() -> None:
    policy = build()["NetworkPolicy"]
    assert policy["spec"]["ingress"] == [
        {"from": [{"podSelector": {}}], "ports": [{"protocol": "TCP", "port": 8082}]}
    ]
    peers = [{"namespaceSelector": {"matchLabels": {"name": "ingress"}}}]
    custom = build(networkPolicy={"from": peers}, port=9000)["NetworkPolicy"]
    assert custom["spec"]["ingress"][0] == {
        "from": peers,
        "ports": [{"protocol": "TCP", "port": 9000}],
    }
    assert "NetworkPolicy" not in build(networkPolicy={"enabled": False})


def test_template_and_service_type() -> None:
    objs = build(
        serviceType="LoadBalancer",
        template={"metadata": {"annotations": {"a": "b"}}, "serviceAccountName": "dash"},
    )
    assert objs["Service"]["spec"]["type"] == "LoadBalancer"
    tpl = objs["Deployment"]["spec"]["template"]
    assert tpl["metadata"]["annotations"] == {"a": "b"}
    assert tpl["spec"]["serviceAccountName"] == "dash"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"brokerRef": {"name": "orders"}}, "spec.image: Field required"),
        ({**BASE, "serviceType": "Ingress"}, "spec.serviceType"),
        ({**BASE, "auth": {}}, "spec.auth.secretName"),
    ],
)
def test_bad_specs_name_the_field(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidSpec, match=message):
        parse_console_spec(spec)
