"""spec.failover controller: the controller's objects, the brokers' controller-mode keys and the
status read from the controller's state (pure builders)."""

from __future__ import annotations

from typing import Any

import javaproperties
import kubernetes_validate
import orjson
import pytest
from ferrymq.controller.config import ControllerConfig
from ferrymq.controller.state import GroupState, Replica
from ferrymq_operator.builders import broker, controller
from ferrymq_operator.builders.names import Owner
from ferrymq_operator.models import BROKER_RESERVED_KEYS, InvalidSpec, parse_broker_spec

ADDR = "routes-namesrv-0.routes-namesrv-hs.prod.svc.cluster.local:9876"
REF = {"nameServerRef": {"name": "routes"}}


def objects(owner: Owner, **spec: Any) -> dict[tuple[str, str], dict[str, Any]]:
    parsed = parse_broker_spec({**REF, **spec})
    objs = controller.desired(owner, parsed) + broker.desired(owner, parsed, ADDR, "policy/v1")
    return {(o["kind"], o["metadata"]["name"]): o for o in objs}


def conf(objs: dict[tuple[str, str], dict[str, Any]], group: int, ordinal: int) -> dict[str, str]:
    cm = objs[("ConfigMap", f"orders-broker-{group}-config")]
    parsed: dict[str, str] = javaproperties.loads(cm["data"][f"broker-{ordinal}.conf"])
    return parsed


def test_default_is_no_controller_and_fixed_roles(broker_owner: Owner) -> None:
    objs = objects(broker_owner, replicasPerGroup=2)
    assert not [k for k in objs if "controller" in k[1]]
    assert conf(objs, 0, 0)["brokerRole"] == "ASYNC_MASTER"
    assert conf(objs, 0, 1)["brokerRole"] == "SLAVE"
    assert "enableControllerMode" not in conf(objs, 0, 0)


def test_controller_objects_and_broker_keys(broker_owner: Owner) -> None:
    objs = objects(
        broker_owner, failover="controller", groups=2, replicasPerGroup=3, brokerRole="SYNC_MASTER"
    )
    for kind in ("ServiceAccount", "Role", "RoleBinding", "Service", "StatefulSet"):
        assert (kind, "orders-controller") in objs, kind
    sts = objs[("StatefulSet", "orders-controller")]
    assert sts["spec"]["replicas"] == 2
    assert sts["spec"]["serviceName"] == "orders-controller"
    pod = sts["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "orders-controller"
    assert pod["containers"][0]["args"] == ["controller", "-c", "/etc/ferrymq/controller.conf"]
    assert objs[("Service", "orders-controller")]["spec"]["clusterIP"] == "None"
    addrs = ";".join(f"orders-controller-{i}.orders-controller.prod.svc:9878" for i in range(2))
    for group in range(2):
        for ordinal in range(3):
            c = conf(objs, group, ordinal)
            assert c["enableControllerMode"] == "true"
            assert c["controllerAddr"] == addrs
            # replica ids start at 1; every replica may become master, so all carry the mode
            assert c["brokerId"] == str(ordinal + 1)
            assert c["brokerRole"] == "SYNC_MASTER"


def test_controller_mode_acks_by_the_sync_state_set_unless_the_user_says_otherwise(
    broker_owner: Owner,
) -> None:
    objs = objects(broker_owner, failover="controller", replicasPerGroup=2)
    assert {conf(objs, 0, o)["allAckInSyncStateSet"] for o in range(2)} == {"true"}
    objs = objects(
        broker_owner,
        failover="controller",
        replicasPerGroup=2,
        config={"allAckInSyncStateSet": "false"},
    )
    assert conf(objs, 0, 0)["allAckInSyncStateSet"] == "false"
    assert "allAckInSyncStateSet" not in conf(objects(broker_owner, replicasPerGroup=2), 0, 0)


def test_controller_conf_is_what_the_controller_reads(broker_owner: Owner) -> None:
    objs = objects(broker_owner, failover="controller")
    text = objs[("ConfigMap", "orders-controller-config")]["data"]["controller.conf"]
    cfg = ControllerConfig.model_validate(javaproperties.loads(text))
    assert cfg.controller_store_type == "kubernetes"
    assert cfg.controller_namespace == "prod"
    assert cfg.controller_state_config_map == "orders-controller-state"
    assert cfg.controller_lease_name == "orders-controller"
    assert cfg.listen_port == 9878


def test_role_grants_only_its_lease_and_state(broker_owner: Owner) -> None:
    role = objects(broker_owner, failover="controller")[("Role", "orders-controller")]
    named = {
        (r["resources"][0], v, n)
        for r in role["rules"]
        for v in r["verbs"]
        for n in r.get("resourceNames", ["*"])
    }
    assert ("leases", "update", "orders-controller") in named
    assert ("configmaps", "update", "orders-controller-state") in named
    assert ("configmaps", "update", "*") not in named
    assert ("leases", "delete", "orders-controller") not in named


def test_manifests_are_valid(broker_owner: Owner) -> None:
    for obj in objects(broker_owner, failover="controller").values():
        kubernetes_validate.validate(obj, "1.25.0", strict=True)


@pytest.mark.parametrize("key", ["enableControllerMode", "controllerAddr"])
def test_controller_keys_are_reserved(key: str) -> None:
    assert key in BROKER_RESERVED_KEYS
    with pytest.raises(InvalidSpec, match=key):
        parse_broker_spec({**REF, "failover": "controller", "config": {key: "x"}})


def test_unknown_failover_mode_is_refused() -> None:
    with pytest.raises(InvalidSpec, match="failover"):
        parse_broker_spec({**REF, "failover": "raft"})


def test_group_masters_from_the_controllers_state() -> None:
    g = GroupState("orders", "orders-broker-0")
    g.replicas = {1: Replica(1, "10.0.0.1:10911"), 2: Replica(2, "10.0.0.2:10911")}
    g.master_id, g.master_epoch, g.sync_state_set = 2, 3, {1, 2}
    masterless = GroupState("orders", "orders-broker-1", master_epoch=4)
    data = {
        "controller.json": orjson.dumps({"groups": [masterless.to_json(), g.to_json()]}).decode()
    }
    assert controller.group_masters(data) == [
        {
            "brokerName": "orders-broker-0",
            "masterBrokerId": 2,
            "masterAddress": "10.0.0.2:10911",
            "masterEpoch": 3,
            "syncStateSet": [1, 2],
        },
        {
            "brokerName": "orders-broker-1",
            "masterBrokerId": None,
            "masterAddress": "",
            "masterEpoch": 4,
            "syncStateSet": [],
        },
    ]
    assert controller.group_masters(None) == []
    assert controller.group_masters({"controller.json": "{torn"}) == []


def test_on_the_host_network_each_controller_pod_has_its_own_port(broker_owner: Owner) -> None:
    objs = objects(
        broker_owner, failover="controller", hostNetwork=True, listenPort=20911, replicasPerGroup=2
    )
    pod_spec = objs[("StatefulSet", "orders-controller")]["spec"]["template"]["spec"]
    assert pod_spec["hostNetwork"] is True
    assert pod_spec["dnsPolicy"] == "ClusterFirstWithHostNet"
    (c,) = pod_spec["containers"]
    assert "ports" not in c  # a declared port would be one host port for both pods
    script = c["command"][2]
    assert 'export FERRYMQ_listenPort="$((20906 + ${POD_NAME##*-}))"' in script
    assert script.endswith("exec ferrymq controller -c /etc/ferrymq/controller.conf")
    # the liveness probe follows the pod's own port (the controller's serving marker)
    assert "serving-$((20906 + ${POD_NAME##*-}))" in c["livenessProbe"]["exec"]["command"][2]
    addrs = "orders-controller-0.orders-controller.prod.svc:20906;" + (
        "orders-controller-1.orders-controller.prod.svc:20907"
    )
    for group in range(1):
        for ordinal in range(2):
            assert conf(objs, group, ordinal)["controllerAddr"] == addrs
    assert (
        controller.addresses(
            broker_owner,
            parse_broker_spec(
                {**REF, "failover": "controller", "hostNetwork": True, "listenPort": 20911}
            ),
        )
        == addrs
    )
    # below every broker pod's ports (controller mode: brokerId = ordinal + 1)
    lowest_broker = min(int(conf(objs, 0, o)["listenPort"]) for o in range(2)) - 2
    assert controller.port_range(
        parse_broker_spec(
            {**REF, "failover": "controller", "hostNetwork": True, "listenPort": 20911}
        )
    ) == (20906, 20907)
    assert lowest_broker > 20907


def test_the_controller_liveness_probe_names_its_declared_port(broker_owner: Owner) -> None:
    """On a pod network the probe is a TCP check of the controller port, by the port's name: the API
    takes a string port only as the name of a declared port ("9878" was refused on kind: "must
    contain at least one letter", and no controller-mode Broker came up there)."""
    objs = objects(broker_owner, failover="controller", replicasPerGroup=2)
    container = objs[("StatefulSet", "orders-controller")]["spec"]["template"]["spec"][
        "containers"
    ][0]
    port = container["livenessProbe"]["tcpSocket"]["port"]
    declared = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert declared.get(port) == 9878, (port, declared)
