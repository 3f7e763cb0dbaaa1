"""Broker spec.proxy -> rmq-proxy.json ConfigMap, Deployment, Service, PodDisruptionBudget (pure
builders), the status entry, and the spec refusals."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
from ferrymq.proxy.config import ProxyMode, load_proxy_config
from ferrymq_operator.builders import proxy
from ferrymq_operator.builders.names import Owner
from ferrymq_operator.models import DEFAULT_IMAGE, InvalidSpec, parse_broker_spec

OWNER = Owner("ferrymq.io/v1alpha1", "Broker", "orders", "prod", "uid-broker-1")
ADDR = "routes-namesrv-0.routes-namesrv-hs.prod.svc.cluster.local:9876;routes-namesrv-1.x:9876"
BASE: dict[str, Any] = {"nameServerRef": {"name": "routes"}}


def build(**proxy_spec: Any) -> dict[str, dict[str, Any]]:
    spec = parse_broker_spec({**BASE, "proxy": proxy_spec})
    objects = proxy.desired(OWNER, spec, ADDR, "policy/v1")
    for obj in objects:
        kubernetes_validate.validate(obj, "1.25", strict=True)
        assert obj["metadata"]["ownerReferences"][0]["uid"] == OWNER.uid
    return {o["kind"]: o for o in objects}


def test_no_proxy_without_spec_proxy() -> None:
    assert proxy.desired(OWNER, parse_broker_spec(BASE), ADDR, "policy/v1") == []


def test_config_is_read_by_the_proxy_with_the_clusters_name_and_nameservers(
    tmp_path: Path,
) -> None:
    objs = build(config={"maxMessageSize": "8388608"})
    assert set(objs) == {"ConfigMap", "Deployment", "Service"}
    conf = tmp_path / "rmq-proxy.json"
    conf.write_text(objs["ConfigMap"]["data"]["rmq-proxy.json"])
    # read as `ferrymq proxy -pc` reads it: every key known, the values the operator meant
    config, unknown = load_proxy_config(conf, env={})
    assert unknown == []
    assert config.rocket_mq_cluster_name == "orders"
    assert config.namesrv_addrs() == [
        "routes-namesrv-0.routes-namesrv-hs.prod.svc.cluster.local:9876",
        "routes-namesrv-1.x:9876",
    ]
    assert config.grpc_server_port == 8081
    assert config.proxy_mode is ProxyMode.CLUSTER
    assert config.max_message_size == 8388608


def test_cluster_name_follows_spec_cluster_name() -> None:
    spec = parse_broker_spec({**BASE, "clusterName": "Blue", "proxy": {}})
    data = proxy.configmap(OWNER, spec, spec.proxy, ADDR)["data"]  # type: ignore[arg-type]
    assert json.loads(data["rmq-proxy.json"])["rocketMQClusterName"] == "Blue"


def test_deployment_runs_the_cluster_mode_proxy_with_tcp_probes_on_grpc() -> None:
    objs = build(grpcPort=9081, replicas=1)
    deploy = objs["Deployment"]
    assert deploy["metadata"]["name"] == "orders-proxy"
    assert deploy["spec"]["replicas"] == 1
    pod_spec = deploy["spec"]["template"]["spec"]
    main = pod_spec["containers"][0]
    assert main["args"] == ["proxy", "-pc", "/etc/ferrymq-proxy/rmq-proxy.json", "-pm", "cluster"]
    assert main["image"] == DEFAULT_IMAGE  # the Broker's image
    assert main["ports"] == [{"name": "grpc", "containerPort": 9081, "protocol": "TCP"}]
    assert main["readinessProbe"]["tcpSocket"] == {"port": "grpc"}
    assert main["livenessProbe"]["tcpSocket"] == {"port": "grpc"}
    assert {"name": "config", "configMap": {"name": "orders-proxy"}} in pod_spec["volumes"]
    assert main["resources"] == {"requests": {"cpu": "100m", "memory": "128Mi"}}
    svc = objs["Service"]
    assert svc["spec"]["type"] == "ClusterIP"
    assert svc["spec"]["ports"][0]["port"] == 9081
    assert svc["spec"]["selector"] == deploy["spec"]["selector"]["matchLabels"]
    # the proxy pods are not selected by the brokers' Services (their own component label)
    assert svc["spec"]["selector"]["app.kubernetes.io/component"] == "proxy"


def test_image_defaults_to_the_brokers_and_can_be_overridden() -> None:
    spec = parse_broker_spec({**BASE, "image": "reg.example/ferrymq:1", "proxy": {}})
    deploy = proxy.desired(OWNER, spec, ADDR, "policy/v1")[2]
    assert deploy["spec"]["template"]["spec"]["containers"][0]["image"] == "reg.example/ferrymq:1"
    deploy = build(image="reg.example/other:2")["Deployment"]
    assert deploy["spec"]["template"]["spec"]["containers"][0]["image"] == "reg.example/other:2"


def test_a_config_change_rolls_the_pods() -> None:
    one = build()["Deployment"]["spec"]["template"]["metadata"]["annotations"]
    two = build(config={"maxMessageSize": "1"})["Deployment"]["spec"]["template"]["metadata"]
    assert one != two["annotations"]


def test_pdb_only_with_more_than_one_replica() -> None:
    assert "PodDisruptionBudget" not in build(replicas=1)
    pdb = build(replicas=3)["PodDisruptionBudget"]
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] == "proxy"


def test_nodeport_and_loadbalancer_listeners_set_the_service_type() -> None:
    svc = build(listeners=[{"name": "ext", "type": "nodeport", "nodePortBase": 31081}])["Service"]
    assert svc["spec"]["type"] == "NodePort"
    assert svc["spec"]["ports"][0]["nodePort"] == 31081
    lb = build(
        listeners=[
            {
                "name": "lb",
                "type": "loadbalancer",
                "annotations": {"service.beta.kubernetes.io/aws-load-balancer-type": "nlb"},
                "loadBalancerSourceRanges": ["203.0.113.0/24"],
            }
        ]
    )["Service"]
    assert lb["spec"]["type"] == "LoadBalancer"
    assert lb["spec"]["loadBalancerSourceRanges"] == ["203.0.113.0/24"]
    assert "nlb" in lb["metadata"]["annotations"].values()


def test_template_labels_reach_the_pods() -> None:
    deploy = build(template={"metadata": {"labels": {"team": "payments"}}})["Deployment"]
    assert deploy["spec"]["template"]["metadata"]["labels"]["team"] == "payments"


def test_status_reports_endpoint_and_readiness() -> None:
    spec = parse_broker_spec({**BASE, "proxy": {"replicas": 2}})
    assert spec.proxy is not None
    entry, ready, message = proxy.status(OWNER, spec.proxy, "cluster.local", None, None)
    assert entry["endpoint"] == "orders-proxy.prod.svc.cluster.local:8081"
    assert not ready and "does not exist" in message
    deploy = {
        "metadata": {"generation": 2},
        "status": {"observedGeneration": 2, "readyReplicas": 1},
    }
    entry, ready, message = proxy.status(OWNER, spec.proxy, "cluster.local", deploy, None)
    assert (entry["readyReplicas"], ready, message) == (1, False, "1/2 proxy pods ready")
    deploy["status"]["readyReplicas"] = 2
    assert proxy.status(OWNER, spec.proxy, "cluster.local", deploy, None)[1] is True
    deploy["metadata"]["generation"] = 3  # a new spec the Deployment controller has not seen
    assert proxy.status(OWNER, spec.proxy, "cluster.local", deploy, None)[1] is False


def test_loadbalancer_status_waits_for_an_address() -> None:
    spec = parse_broker_spec(
        {**BASE, "proxy": {"listeners": [{"name": "lb", "type": "loadbalancer"}]}}
    )
    assert spec.proxy is not None
    entry = proxy.status(OWNER, spec.proxy, "cluster.local", None, {"status": {}})[0]
    assert "externalEndpoint" not in entry
    svc = {"status": {"loadBalancer": {"ingress": [{"ip": "198.51.100.7"}]}}}
    entry = proxy.status(OWNER, spec.proxy, "cluster.local", None, svc)[0]
    assert entry["externalEndpoint"] == "198.51.100.7:8081"


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ({"proxy": {"config": {"namesrvAddr": "x:9876"}}}, "spec.proxy: config sets namesrvAddr"),
        ({"proxy": {"replicas": 0}}, "spec.proxy.replicas"),
        ({"proxy": {"grpcPort": 70000}}, "spec.proxy.grpcPort"),
        (
            {
                "proxy": {
                    "listeners": [
                        {"name": "a", "type": "nodeport"},
                        {"name": "b", "type": "loadbalancer"},
                    ]
                }
            },
            "only one listener",
        ),
        ({"proxy": {}, "acl": {}}, "remove spec.proxy or spec.acl"),
        ({"proxy": {}, "tls": {"mode": "enforcing"}}, "use tls.mode permissive"),
    ],
)
def test_bad_proxy_specs_are_refused_with_what_to_change(extra: dict[str, Any], words: str) -> None:
    with pytest.raises(InvalidSpec, match=words.replace(".", r"\.")):
        parse_broker_spec({**BASE, **extra})


def test_tls_permissive_is_accepted() -> None:
    assert parse_broker_spec({**BASE, "proxy": {}, "tls": {"mode": "permissive"}}).proxy is not None


def test_an_unready_proxy_keeps_the_broker_from_ready() -> None:
    """The Broker's Ready waits for the proxy (its Ready when every StatefulSet pod is ready and
    the proxy too); ProxyReady says why."""
    from ferrymq_operator.models import BrokerStatus
    from ferrymq_operator.reconcile import ProxyObservation, record_proxy
    from ferrymq_operator.status import StatusBuilder
    from test_status_conditions import settled

    pods = settled("orders-0")

    def conditions(observed: ProxyObservation) -> dict[str, tuple[str, str, str]]:
        builder = StatusBuilder(BrokerStatus, BrokerStatus(), 1, "2026-11-28T00:00:00Z")
        builder.observe([pods], None, pending=observed.pending)
        record_proxy(builder, observed)
        return {c.type: (c.status, c.reason, c.message) for c in builder.conditions()}

    entry = {"endpoint": "orders-proxy.prod.svc.cluster.local:8081", "replicas": 2}
    unready = conditions(ProxyObservation(entry, False, "1/2 proxy pods ready"))
    assert unready["Ready"] == ("False", "Pending", "proxy: 1/2 proxy pods ready")
    assert unready["ProxyReady"] == ("False", "ProxyPodsNotReady", "1/2 proxy pods ready")
    assert unready["Progressing"][0] == "True"
    ready = conditions(ProxyObservation(entry, True, "2/2 proxy pods ready"))
    assert ready["Ready"][:2] == ("True", "AllPodsReady")
    assert ready["ProxyReady"][:2] == ("True", "ProxyPodsReady")
