"""spec.failover controller against a real kube-apiserver: the operator deploys the controller
(StatefulSet, Service, ServiceAccount, Role, RoleBinding), writes controller-mode broker confs, and
a real ControllerServer running with the controller's own ServiceAccount token (so only the Role
the operator made) keeps its state in the API; the Broker's status shows each group's master.

No kubelet runs here, so the controller runs in-process with the pod's configuration and token.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import javaproperties
import pytest
from ferrymq.controller.config import ControllerConfig
from ferrymq.controller.k8s_store import ConfigMapStateStore, LeaseElector
from ferrymq.controller.protocol import ControllerRequestCode as Req
from ferrymq.controller.server import ControllerServer
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import ResponseCode
from ferrymq.remoting.command import RemotingCommand
from kopf.testing import KopfRunner
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from k8s.control_plane import KubeApi, write_kubeconfig
from k8s.operator_env import Cluster, ferrymq_crds, operator, wait_for

__all__ = ["ferrymq_crds", "operator"]


@pytest.fixture
def cluster(kube_api: KubeApi, k8s_namespace: str) -> Iterator[Cluster]:
    with kube_api.api_client() as api_client:
        yield Cluster(api_client, k8s_namespace)


def _sa_token(core: k8s.CoreV1Api, namespace: str, account: str) -> str | None:
    sa = core.read_namespaced_service_account(account, namespace)
    for ref in sa.secrets or []:
        if ref.name is None:
            continue
        secret = core.read_namespaced_secret(ref.name, namespace)
        if secret.data and "token" in secret.data:
            return base64.b64decode(secret.data["token"]).decode()
    return None


def _allowed(
    api_client: k8s.ApiClient, namespace: str, verb: str, resource: str, name: str
) -> bool:
    group = "coordination.k8s.io" if resource == "leases" else ""
    review = k8s.V1SubjectAccessReview(
        spec=k8s.V1SubjectAccessReviewSpec(
            user=f"system:serviceaccount:{namespace}:orders-controller",
            resource_attributes=k8s.V1ResourceAttributes(
                namespace=namespace, verb=verb, group=group, resource=resource, name=name
            ),
        )
    )
    answer = k8s.AuthorizationV1Api(api_client).create_subject_access_review(review)
    return bool(answer.status.allowed)


def _object(cluster: Cluster, api_version: str, kind: str, name: str) -> Any:
    try:
        return cluster.dynamic.resources.get(api_version=api_version, kind=kind).get(
            name=name, namespace=cluster.ns
        )
    except Exception:
        return None


async def test_controller_deployed_and_groups_master_in_status(
    cluster: Cluster, operator: KopfRunner, kube_api: KubeApi, tmp_path: Path
) -> None:
    cluster.create("nameservers", "routes", {"replicas": 1})
    cluster.create(
        "brokers",
        "orders",
        {
            "nameServerRef": {"name": "routes"},
            "groups": 1,
            "replicasPerGroup": 2,
            "brokerRole": "SYNC_MASTER",
            "failover": "controller",
            "storage": {"size": "1Gi"},
        },
    )
    sts = wait_for(
        "the controller StatefulSet", functools.partial(cluster.statefulset, "orders-controller")
    )
    assert sts.spec.replicas == 2
    assert sts.spec.template.spec.service_account_name == "orders-controller"
    for api_version, kind in (
        ("v1", "ServiceAccount"),
        ("v1", "Service"),
        ("rbac.authorization.k8s.io/v1", "Role"),
        ("rbac.authorization.k8s.io/v1", "RoleBinding"),
    ):
        wait_for(
            f"{kind} orders-controller",
            lambda a=api_version, k=kind: _object(cluster, a, k, "orders-controller"),
        )
    cm = wait_for("broker confs", lambda: cluster.configmap("orders-broker-0-config"))
    confs = [javaproperties.loads(cm.data[f"broker-{i}.conf"]) for i in range(2)]
    for i, conf in enumerate(confs):
        assert conf["enableControllerMode"] == "true"
        assert conf["brokerId"] == str(i + 1)
        assert conf["controllerAddr"].split(";") == [
            f"orders-controller-{p}.orders-controller.{cluster.ns}.svc:9878" for p in range(2)
        ]
    ctl_cm = wait_for("controller.conf", lambda: cluster.configmap("orders-controller-config"))
    ctl_conf = javaproperties.loads(ctl_cm.data["controller.conf"])

    # the Role lets the controller touch its Lease and state object, nothing else
    ns = cluster.ns
    assert _allowed(cluster.api_client, ns, "update", "leases", "orders-controller")
    assert _allowed(cluster.api_client, ns, "update", "configmaps", "orders-controller-state")
    assert not _allowed(cluster.api_client, ns, "update", "configmaps", "orders-broker-0-config")
    assert not _allowed(cluster.api_client, ns, "delete", "leases", "orders-controller")

    # the controller, with the pod's controller.conf and the ServiceAccount's own token
    core = k8s.CoreV1Api(cluster.api_client)
    token = wait_for("the controller's token", lambda: _sa_token(core, ns, "orders-controller"))
    kubeconfig = tmp_path / "controller.kubeconfig"
    write_kubeconfig(kubeconfig, kube_api.server, kube_api.ca_file, token)
    sa_client = k8s_config.new_client_from_config(config_file=str(kubeconfig))
    cfg = ControllerConfig.model_validate(
        {**ctl_conf, "listenPort": "0", "bindAddress": "127.0.0.1"}
    )
    server = ControllerServer(
        cfg,
        store=ConfigMapStateStore(
            sa_client, cfg.controller_namespace, cfg.controller_state_config_map
        ),
        leadership=LeaseElector(
            sa_client,
            cfg.controller_namespace,
            cfg.controller_lease_name,
            "orders-controller-0",
            lease_duration_s=cfg.controller_lease_duration_seconds,
            retry_period_s=0.5,
        ),
    )
    remoting = RemotingClient(name="test")
    try:
        await server.start()
        assert server.leadership is not None
        deadline = time.monotonic() + 30
        while not server.leadership.is_leader():
            assert time.monotonic() < deadline, "the controller never took its Lease"
            await asyncio.sleep(0.1)
        request = RemotingCommand.request(
            Req.CONTROLLER_REGISTER_BROKER,
            {
                "clusterName": "orders",
                "brokerName": "orders-broker-0",
                # replica 2 (pod ordinal 1) registers first, so it is the master
                "brokerId": 2,
                "brokerAddr": "127.0.0.1:10921",
                "epoch": 0,
            },
        )
        answer = await remoting.invoke(f"127.0.0.1:{server.port}", request, 10.0)
        assert answer.code == ResponseCode.SUCCESS, answer.remark

        def masters() -> list[dict[str, Any]] | None:
            body = cluster.get("brokers", "orders") or {}
            found = (body.get("status") or {}).get("groupMasters")
            return found or None

        got = await asyncio.to_thread(wait_for, "status.groupMasters", masters)
        assert got == [
            {
                "brokerName": "orders-broker-0",
                "masterBrokerId": 2,
                "masterAddress": "127.0.0.1:10921",
                "masterEpoch": 1,
                "syncStateSet": [2],
            }
        ]
        # replica 1 (pod ordinal 0) never registered: outside the SyncStateSet, on the resource
        out = await asyncio.to_thread(
            cluster.wait_condition,
            "brokers",
            "orders",
            "ReplicasInSync",
            "False",
            "ReplicaOutOfSyncStateSet",
        )
        assert out["message"].endswith("orders-broker-0: brokerId 1"), out
        # readiness follows the elected master (ordinal 1), not ordinal 0
        pods = ["orders-broker-0-0", "orders-broker-0-1"]
        await asyncio.to_thread(cluster.wait_pods_and_mark_ready, pods)
        await asyncio.to_thread(cluster.wait_condition, "brokers", "orders", "Ready", "True")
        cluster.mark_ready("orders-broker-0-0", ready=False)
        await asyncio.to_thread(
            cluster.wait_condition, "brokers", "orders", "Degraded", "True", "PodsUnavailable"
        )
        cluster.mark_ready("orders-broker-0-0")
        cluster.mark_ready("orders-broker-0-1", ready=False)
        degraded = await asyncio.to_thread(
            cluster.wait_condition, "brokers", "orders", "Degraded", "True", "MasterUnavailable"
        )
        assert "orders-broker-0" in degraded["message"]
    finally:
        await remoting.close()
        await server.stop()
        sa_client.close()
