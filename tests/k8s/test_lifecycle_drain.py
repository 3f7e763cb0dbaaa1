"""Drained scale-in against the real kube-apiserver 1.20 and a real ferrymq broker on 127.0.0.1.

The broker group being removed (``orders-broker-1``) exists twice: as Kubernetes objects built by
the operator's builders (StatefulSet, ConfigMap, PDB; the StatefulSet controller makes its pod
and claim) and as a real broker process with the same brokerName. ``lifecycle.drain_groups`` stops
writes, reads the lag of every consumer group, keeps the group while messages are left (a dead
consumer group blocks and is named), then deletes the objects once drained, claims included with
``deleteClaimOnScaleDown``.

Stand-in: ``LocalDrainAdmin`` maps the pod's cluster DNS address to the local broker's port (there
is no cluster DNS here); every admin call still goes over the remoting protocol to the broker.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Iterator
from pathlib import Path

import pytest
from ferrymq.broker.local_cluster import LocalCluster
from ferrymq.client.admin import AdminClient
from ferrymq.client.allocate import MessageQueue
from ferrymq.client.errors import NoRouteError
from ferrymq.client.producer import Producer
from ferrymq.message import Message
from ferrymq_operator import drain, k8s, lifecycle, models
from ferrymq_operator.builders import broker as broker_builder
from ferrymq_operator.builders import names
from ferrymq_operator.builders.names import Owner

from k8s.control_plane import KubeApi
from k8s.operator_env import Cluster, ferrymq_crds, wait_for

__all__ = ["ferrymq_crds"]

BROKER = "orders-broker-1"
TOPIC = "drain-k8s"
DOMAIN = "cluster.local"


class LocalDrainAdmin:
    """Stand-in for cluster DNS around the real RemotingDrainAdmin."""

    def __init__(self, table: dict[str, str]) -> None:
        self.table = table
        self.real = drain.RemotingDrainAdmin(timeout_seconds=5)

    async def stop_writes(self, namesrv_addr: str, broker_name: str, broker_addr: str) -> None:
        await self.real.stop_writes(namesrv_addr, broker_name, self.table[broker_addr])

    async def lags(self, namesrv_addr: str, broker_addr: str) -> drain.Backlog:
        return await self.real.lags(namesrv_addr, self.table[broker_addr])

    async def resume_writes(self, namesrv_addr: str, broker_name: str, broker_addr: str) -> None:
        await self.real.resume_writes(namesrv_addr, broker_name, self.table[broker_addr])


@pytest.fixture(scope="module")
def real_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(
        tmp_path_factory.mktemp("drain-k8s"),
        groups=1,
        namesrv_port=0,
        broker_port=0,
        cluster_name="orders",
        mapped_file_size_commit_log=1024 * 1024,
        extra_conf={"brokerName": BROKER},
    ) as running:
        yield running


@pytest.fixture
def cluster(kube_api: KubeApi, k8s_namespace: str) -> Iterator[Cluster]:
    with kube_api.api_client() as api_client:
        yield Cluster(api_client, k8s_namespace)


def claims(cluster: Cluster) -> list[str]:
    items = cluster.core.list_namespaced_persistent_volume_claim(cluster.ns).items
    return sorted(str(c.metadata.name) for c in items if c.metadata is not None)


async def test_group_is_removed_only_once_drained(
    cluster: Cluster,
    kube_api: KubeApi,
    ferrymq_crds: list[str],
    real_broker: LocalCluster,
    tmp_path: Path,
) -> None:
    # The Broker CR owns the objects (so the garbage collector leaves them alone); no operator runs.
    body = cluster.create(
        "brokers",
        "orders",
        {"nameServerRef": {"name": "routes"}, "groups": 1, "replicasPerGroup": 1},
    )
    owner = Owner(models.API_VERSION, "Broker", "orders", cluster.ns, body["metadata"]["uid"])
    spec = models.parse_broker_spec({"nameServerRef": {"name": "routes"}, "replicasPerGroup": 1})
    kube = await k8s.Kube.connect(str(kube_api.kubeconfig_path), "ferrymq-test")
    try:
        versions = await kube.discover()
        for obj in broker_builder.group_objects(owner, spec, "ns:9876", 1, versions.pdb):
            await kube.apply(obj)
        wait_for("the group's claim from the StatefulSet controller", lambda: claims(cluster))
        assert claims(cluster) == ["store-orders-broker-1-0"]

        # Messages on the group: a consumer group committed 0 and went away.
        broker_addr = real_broker.broker_addrs[0]
        namesrv = real_broker.namesrv_addr
        async with AdminClient(namesrv) as admin:
            await admin.create_topic(
                TOPIC, broker_addr=broker_addr, read_queue_nums=1, write_queue_nums=1
            )
            await admin.instance.broker.update_consumer_offset(
                broker_addr, "reports", MessageQueue(TOPIC, BROKER, 0), 0
            )
            # Until the broker's registration carries the topic to the NameServer, a producer
            # would route by TBW102 (4 queues) and pick queues this 1-queue topic refuses.
            deadline = asyncio.get_running_loop().time() + 30
            while True:
                try:
                    if (await admin.topic_route(TOPIC)).queue_datas:
                        break
                except NoRouteError:
                    pass
                assert asyncio.get_running_loop().time() < deadline, "no route for the topic"
                await asyncio.sleep(0.1)
        producer = Producer("drain-k8s", namesrv)
        await producer.start()
        try:
            for i in range(10):
                await producer.send(Message(TOPIC, f"m{i}".encode()))
        finally:
            await producer.shutdown()

        pod_addr = names.broker_pod_address("orders", cluster.ns, 1, 0, DOMAIN)
        admin_standin = LocalDrainAdmin({pod_addr: broker_addr})
        drain_once = functools.partial(
            lifecycle.drain_groups,
            kube,
            owner,
            [1],
            admin=admin_standin,
            namesrv_addr=namesrv,
            domain=DOMAIN,
            delete_claims=True,
        )

        events: list[tuple[str, str, str]] = []
        drains = await drain_once(previous=[], events=events, now="2026-11-22T02:00:00Z")
        assert [d["reason"] for d in drains] == ["DrainBlocked"]
        assert "reports (10 left)" in drains[0]["message"]
        assert [e[1] for e in events] == ["DrainStarted", "DrainBlocked"]
        assert cluster.statefulset(BROKER) is not None
        assert claims(cluster) == ["store-orders-broker-1-0"]
        # writes are off for the group at the broker and the NameServer
        async with AdminClient(namesrv) as admin:
            route = await admin.topic_route(TOPIC)
            assert all(qd.perm & 2 == 0 for qd in route.queue_datas)

        # a second pass with the same state posts no new event and keeps the start time
        previous = [models.DrainStatus.model_validate(d) for d in drains]
        events = []
        drains = await drain_once(previous=previous, events=events, now="2026-11-22T02:01:00Z")
        assert events == [] and drains[0]["since"] == "2026-11-22T02:00:00Z"

        # the consumers catch up (here: the admin moves the group's offset to the end)
        async with AdminClient(namesrv) as admin:
            mq = MessageQueue(TOPIC, BROKER, 0)
            top = await admin.instance.broker.get_max_offset(broker_addr, mq)
            await admin.instance.broker.update_consumer_offset(broker_addr, "reports", mq, top)
        previous = [models.DrainStatus.model_validate(d) for d in drains]
        events = []
        drains = await drain_once(previous=previous, events=events, now="2026-11-22T02:02:00Z")
        assert drains == []
        reasons = [e[1] for e in events]
        assert "GroupRemoved" in reasons and "Drained" in reasons
        wait_for("the StatefulSet gone", lambda: cluster.statefulset(BROKER) is None or None)
        assert cluster.configmap(f"{BROKER}-config") is None
        assert cluster.pdb(BROKER) is None
        # the claim goes once its pod is gone (opted in with deleteClaimOnScaleDown)
        assert "ClaimDeleted" in reasons
        wait_for("the claim deleted", lambda: claims(cluster) == [] or None)
    finally:
        kube.close()
