"""spec.template, spec.rack and the default requests land on broker, NameServer and controller
pods; names the operator owns are refused with the field named."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest
from ferrymq_operator import models, template_models
from ferrymq_operator.builders import broker, controller, namesrv
from ferrymq_operator.builders.names import Owner
from ferrymq_operator.models import InvalidSpec, parse_broker_spec, parse_nameserver_spec

ADDR = "routes-namesrv-0.routes-namesrv-hs.prod.svc.cluster.local:9876"
REF = {"nameServerRef": {"name": "routes"}}

TEMPLATE: dict[str, Any] = {
    "metadata": {
        "labels": {"team": "payments", "app.kubernetes.io/instance": "hijack"},
        "annotations": {"sidecar.istio.io/inject": "false"},
    },
    "env": [{"name": "JAVA_TOOL_OPTIONS", "value": "-Xmx1g"}],
    "serviceAccountName": "broker-iam",
    "affinity": {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["mq"]}]}
                ]
            }
        },
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 10,
                    "podAffinityTerm": {
                        "labelSelector": {"matchLabels": {"app": "db"}},
                        "topologyKey": "kubernetes.io/hostname",
                    },
                }
            ]
        },
    },
    "topologySpreadConstraints": [
        {
            "maxSkew": 2,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": {"app.kubernetes.io/instance": "orders"}},
        }
    ],
    "tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}],
    "volumes": [{"name": "vault", "secret": {"secretName": "vault-token"}}],
    "volumeMounts": [{"name": "vault", "mountPath": "/opt/vault", "readOnly": True}],
    "securityContext": {"runAsUser": 20000, "supplementalGroups": [5]},
    "containerSecurityContext": {"readOnlyRootFilesystem": False},
}


def pod_template(objects: list[dict[str, Any]], name: str) -> dict[str, Any]:
    sts = next(o for o in objects if o["kind"] == "StatefulSet" and o["metadata"]["name"] == name)
    kubernetes_validate.validate(sts, "1.25", strict=True)
    result: dict[str, Any] = sts["spec"]["template"]
    return result


def broker_template(owner: Owner, **spec: Any) -> dict[str, Any]:
    objects = broker.desired(owner, parse_broker_spec({**REF, **spec}), ADDR, "policy/v1")
    return pod_template(objects, "orders-broker-0")


def check_template_applied(tpl: dict[str, Any], instance: str) -> None:
    meta, spec = tpl["metadata"], tpl["spec"]
    main = spec["containers"][0]
    # user labels are added, the operator's selector labels win
    assert meta["labels"]["team"] == "payments"
    assert meta["labels"]["app.kubernetes.io/instance"] == instance
    assert meta["annotations"]["sidecar.istio.io/inject"] == "false"
    assert "ferrymq.io/config-hash" in meta["annotations"]
    assert {"name": "JAVA_TOOL_OPTIONS", "value": "-Xmx1g"} in main["env"]
    assert any(e["name"] == "POD_NAME" for e in main["env"])
    assert spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    anti = spec["affinity"]["podAntiAffinity"]
    # the operator's hostname spread stays next to the user's term
    assert anti["preferredDuringSchedulingIgnoredDuringExecution"][-1]["weight"] == 10
    assert spec["topologySpreadConstraints"][0]["maxSkew"] == 2
    assert {"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    assert {"name": "vault", "secret": {"secretName": "vault-token"}} in spec["volumes"]
    assert {"name": "vault", "mountPath": "/opt/vault", "readOnly": True} in main["volumeMounts"]
    assert spec["securityContext"]["runAsUser"] == 20000
    assert spec["securityContext"]["runAsNonRoot"] is True  # the other defaults stay
    assert spec["securityContext"]["supplementalGroups"] == [5]
    assert main["securityContext"]["readOnlyRootFilesystem"] is False
    assert main["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def test_broker_pod_template_fields_land_on_the_pods(broker_owner: Owner) -> None:
    tpl = broker_template(broker_owner, podAntiAffinity="Preferred", template={"pod": TEMPLATE})
    check_template_applied(tpl, "orders")
    assert tpl["spec"]["serviceAccountName"] == "broker-iam"


def test_nameserver_pod_template_fields_land_on_the_pods(namesrv_owner: Owner) -> None:
    spec = parse_nameserver_spec({"template": {"pod": TEMPLATE}})
    tpl = pod_template(namesrv.desired(namesrv_owner, spec, "policy/v1"), "routes-namesrv")
    check_template_applied(tpl, "routes")


def test_controller_pod_template_keeps_its_own_account(broker_owner: Owner) -> None:
    pod_tpl = {k: v for k, v in TEMPLATE.items() if k != "serviceAccountName"}
    spec = parse_broker_spec(
        {
            **REF,
            "failover": "controller",
            "podAntiAffinity": "Preferred",
            "template": {"controllerPod": pod_tpl},
        }
    )
    tpl = pod_template(controller.desired(broker_owner, spec), "orders-controller")
    check_template_applied(tpl, "orders")
    assert tpl["spec"]["serviceAccountName"] == "orders-controller"
    with pytest.raises(InvalidSpec, match=r"controllerPod\.serviceAccountName"):
        parse_broker_spec({**REF, "template": {"controllerPod": {"serviceAccountName": "x"}}})


def test_broker_template_leaves_the_controller_alone(broker_owner: Owner) -> None:
    spec = parse_broker_spec({**REF, "failover": "controller", "template": {"pod": TEMPLATE}})
    tpl = pod_template(controller.desired(broker_owner, spec), "orders-controller")
    assert "team" not in tpl["metadata"]["labels"]


def test_rack_spreads_a_group_over_zones_and_requires_the_label(broker_owner: Owner) -> None:
    tpl = broker_template(broker_owner, groups=2, rack={})
    spread = tpl["spec"]["topologySpreadConstraints"]
    assert spread == [
        {
            "maxSkew": 1,
            "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "DoNotSchedule",
            # one group only: master and slave of group 0 go to two zones
            "labelSelector": {
                "matchLabels": {
                    "app.kubernetes.io/name": "ferrymq",
                    "app.kubernetes.io/instance": "orders",
                    "app.kubernetes.io/component": "broker",
                    "ferrymq.io/broker-group": "orders-broker-0",
                }
            },
        }
    ]
    node = tpl["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert node["nodeSelectorTerms"] == [
        {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "Exists"}]}
    ]
    # the hostname anti-affinity stays as well
    assert "podAntiAffinity" in tpl["spec"]["affinity"]


def test_rack_is_anded_into_the_users_node_terms(broker_owner: Owner) -> None:
    tpl = broker_template(
        broker_owner,
        rack={"topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway"},
        template={"pod": {"affinity": TEMPLATE["affinity"]}},
    )
    terms = tpl["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert terms == [
        {
            "matchExpressions": [
                {"key": "pool", "operator": "In", "values": ["mq"]},
                {"key": "zone", "operator": "Exists"},
            ]
        }
    ]
    assert tpl["spec"]["topologySpreadConstraints"][0]["whenUnsatisfiable"] == "ScheduleAnyway"


def test_pods_are_not_best_effort_by_default(broker_owner: Owner, namesrv_owner: Owner) -> None:
    tpl = broker_template(broker_owner)
    assert tpl["spec"]["containers"][0]["resources"] == {"requests": models.DEFAULT_BROKER_REQUESTS}
    ns = pod_template(
        namesrv.desired(namesrv_owner, parse_nameserver_spec({}), "policy/v1"), "routes-namesrv"
    )
    assert ns["spec"]["containers"][0]["resources"] == {"requests": models.DEFAULT_NAMESRV_REQUESTS}
    # a user's resources replace the defaults (limits only: Kubernetes takes requests = limits)
    tpl = broker_template(broker_owner, resources={"limits": {"memory": "2Gi"}})
    assert tpl["spec"]["containers"][0]["resources"] == {"limits": {"memory": "2Gi"}}


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ({"env": [{"name": "POD_NAME", "value": "x"}]}, "env[0] POD_NAME is set by the operator"),
        ({"env": [{"value": "x"}]}, "env[0] has no name"),
        ({"volumes": [{"name": "store", "emptyDir": {}}]}, "volumes[0] 'store'"),
        ({"volumeMounts": [{"name": "nope", "mountPath": "/opt/x"}]}, "not in template volumes"),
        (
            {
                "volumes": [{"name": "v", "emptyDir": {}}],
                "volumeMounts": [{"name": "v", "mountPath": "/etc/ferrymq/extra"}],
            },
            "would hide the operator's files",
        ),
    ],
)
def test_template_refuses_the_operators_names(template: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidSpec, match=r"spec\.template\.pod") as error:
        parse_broker_spec({**REF, "template": {"pod": template}})
    assert message in str(error.value)


def test_reserved_names_cover_what_the_builders_use(broker_owner: Owner) -> None:
    """Every env variable and volume the operator puts on a pod, with every feature that adds
    one, is in the reserved lists (so a template can never shadow it)."""
    spec = parse_broker_spec(
        {
            **REF,
            "acl": {},
            "tls": {"mode": "enforcing", "needClientAuth": "require"},
            "listeners": [{"name": "lb", "type": "loadbalancer"}],
            "storage": {"type": "ephemeral"},
        }
    )
    objects = broker.desired(broker_owner, spec, ADDR, "policy/v1") + controller.desired(
        broker_owner, spec.model_copy(update={"failover": "controller"})
    )
    for sts in (o for o in objects if o["kind"] == "StatefulSet"):
        pod_spec = sts["spec"]["template"]["spec"]
        env = {e["name"] for e in pod_spec["containers"][0]["env"]}
        assert env <= template_models.RESERVED_ENV, env - template_models.RESERVED_ENV
        volumes = {v["name"] for v in pod_spec["volumes"]}
        assert volumes <= template_models.RESERVED_VOLUMES, volumes
    hostnet = parse_broker_spec({**REF, "hostNetwork": True})
    sts = next(
        o
        for o in broker.desired(broker_owner, hostnet, ADDR, "policy/v1")
        if o["kind"] == "StatefulSet"
    )
    env = {e["name"] for e in sts["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env <= template_models.RESERVED_ENV
