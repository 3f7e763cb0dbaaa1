"""Topic and ConsumerGroup resources against the real kube-apiserver 1.20 and real ferrymq brokers.

The operator runs in-process (``kopf.operator`` in a thread, every ferrymq handler registered) and
talks to three real broker processes and a NameServer on 127.0.0.1 over the remoting protocol.

Stand-in: there is no cluster DNS here, so the operator is given ``LocalAddresses`` (through the
memo key ``topic_addresses``, the hook for an operator outside the cluster network): group ``g`` of
the Broker ``orders`` is local broker ``g``, a group without a local broker is a closed port. The
Broker resource has no NameServer resource, so the operator runs none of its pods (there is no
kubelet either); only its ``spec.groups`` matters to Topics and ConsumerGroups.
"""

from __future__ import annotations

import asyncio
import importlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import kopf
import pytest
from ferrymq.broker.local_cluster import LocalCluster
from ferrymq.client.admin import AdminClient
from ferrymq.client.allocate import MessageQueue
from ferrymq.client.errors import NoRouteError
from ferrymq.client.producer import Producer
from ferrymq.message import Message
from ferrymq.remoting.bodies import SubscriptionGroupConfig
from kubernetes import client as k8s

from k8s.control_plane import KubeApi
from k8s.operator_env import GROUP, VERSION, Cluster, ferrymq_crds, wait_for

__all__ = ["ferrymq_crds"]

CLOSED_PORT = "127.0.0.1:9"  # nothing listens on the discard port: an unreachable master


@dataclass(frozen=True)
class LocalAddresses:
    """Stand-in for cluster DNS: Broker group g -> local broker g."""

    brokers: tuple[str, ...]
    namesrv_addr: str

    def broker(self, broker: str, namespace: str, group: int) -> str:
        return self.brokers[group] if group < len(self.brokers) else CLOSED_PORT

    def namesrv(self, broker_body: Any) -> str | None:
        return self.namesrv_addr


@pytest.fixture(scope="module")
def brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(
        tmp_path_factory.mktemp("topic-resources"),
        groups=3,
        namesrv_port=0,
        broker_port=0,
        cluster_name="orders",
        mapped_file_size_commit_log=1024 * 1024,
    ) as running:
        yield running


@pytest.fixture(scope="module")
def topic_operator(
    kube_api: KubeApi, ferrymq_crds: list[str], brokers: LocalCluster
) -> Iterator[None]:
    """The whole operator in a thread, with LocalAddresses in its memo."""
    failures: list[BaseException] = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KUBECONFIG", str(kube_api.kubeconfig_path))
        mp.setenv("FERRYMQ_OPERATOR_RESYNC_SECONDS", "5")
        mp.setenv("FERRYMQ_OPERATOR_RETRY_DELAY_SECONDS", "1")
        mp.setenv("FERRYMQ_OPERATOR_ADMIN_TIMEOUT_SECONDS", "2")
        importlib.import_module("ferrymq_operator.handlers")  # registers every handler
        stop, ready = threading.Event(), threading.Event()
        memo = kopf.Memo(
            topic_addresses=LocalAddresses(tuple(brokers.broker_addrs), brokers.namesrv_addr)
        )

        def target() -> None:
            try:
                asyncio.run(
                    kopf.operator(
                        clusterwide=True,
                        standalone=True,
                        memo=memo,
                        stop_flag=stop,
                        ready_flag=ready,
                    )
                )
            except BaseException as error:  # reported by the fixture's teardown
                failures.append(error)

        thread = threading.Thread(target=target, name="ferrymq-operator", daemon=True)
        thread.start()
        assert ready.wait(60), f"the operator did not start: {failures}"
        try:
            yield
        finally:
            stop.set()
            thread.join(180)
    assert not thread.is_alive(), "the operator did not stop"
    assert not failures, failures


@pytest.fixture
def cluster(kube_api: KubeApi, k8s_namespace: str) -> Iterator[Cluster]:
    with kube_api.api_client() as api_client:
        yield Cluster(api_client, k8s_namespace)


# --- helpers ---


def create(
    cluster: Cluster,
    kind: str,
    plural: str,
    name: str,
    spec: dict[str, Any],
    annotations: dict[str, str] | None = None,
) -> None:
    meta: dict[str, Any] = {"name": name}
    if annotations:
        meta["annotations"] = annotations
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": kind, "metadata": meta, "spec": spec}
    cluster.custom.create_namespaced_custom_object(GROUP, VERSION, cluster.ns, plural, body)


def status(cluster: Cluster, plural: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = (cluster.get(plural, name) or {}).get("status") or {}
    return found


def topics_on(brokers: LocalCluster, group: int) -> dict[str, Any]:
    async def read() -> dict[str, Any]:
        async with AdminClient(brokers.namesrv_addr) as admin:
            wrapper = await admin.topic_config(brokers.broker_addrs[group])
            return dict(wrapper.topic_config_table)

    return asyncio.run(read())


def queues_on(brokers: LocalCluster, group: int, topic: str) -> tuple[int, int] | None:
    tc = topics_on(brokers, group).get(topic)
    return None if tc is None else (tc.read_queue_nums, tc.write_queue_nums)


def groups_on(brokers: LocalCluster, group: int) -> dict[str, Any]:
    async def read() -> dict[str, Any]:
        async with AdminClient(brokers.namesrv_addr) as admin:
            api = admin.instance.broker
            wrapper = await api.get_all_subscription_group_config(brokers.broker_addrs[group])
            return dict(wrapper.subscription_group_table)

    return asyncio.run(read())


def admin_call(brokers: LocalCluster, action: Any) -> Any:
    async def run() -> Any:
        async with AdminClient(brokers.namesrv_addr) as admin:
            return await action(admin)

    return asyncio.run(run())


def send_to_queues(brokers: LocalCluster, topic: str, group: int, queues: range, n: int) -> None:
    """``n`` messages on each of ``queues`` of one broker group."""

    async def run() -> None:
        async with AdminClient(brokers.namesrv_addr) as admin:
            deadline = asyncio.get_running_loop().time() + 30
            while True:  # the route appears once the broker re-registered the topic
                try:
                    route = await admin.topic_route(topic)
                    if any(qd.write_queue_nums >= queues.stop for qd in route.queue_datas):
                        break
                except NoRouteError:
                    pass
                assert asyncio.get_running_loop().time() < deadline, "no route for the topic"
                await asyncio.sleep(0.1)
        producer = Producer("topic-resources", brokers.namesrv_addr)
        await producer.start()
        try:
            for q in queues:
                mq = MessageQueue(topic, brokers.group_name(group), q)
                for i in range(n):
                    await producer.send_to_queue(Message(topic, f"m{i}".encode()), mq)
        finally:
            await producer.shutdown()

    asyncio.run(run())


def commit(
    brokers: LocalCluster, group: int, consumer: str, topic: str, q: int, offset: int
) -> None:
    mq = MessageQueue(topic, brokers.group_name(group), q)
    admin_call(
        brokers,
        lambda admin: admin.instance.broker.update_consumer_offset(
            brokers.broker_addrs[group], consumer, mq, offset
        ),
    )


def max_offset(brokers: LocalCluster, group: int, topic: str, q: int) -> int:
    mq = MessageQueue(topic, brokers.group_name(group), q)
    result: int = admin_call(
        brokers, lambda admin: admin.instance.broker.get_max_offset(brokers.broker_addrs[group], mq)
    )
    return result


def ready_reason(cluster: Cluster, plural: str, name: str) -> tuple[str, str, str] | None:
    cond = cluster.condition(plural, name, "Ready")
    return None if cond is None else (cond["status"], cond["reason"], cond["message"])


# --- tests ---


def unmanaged(cluster: Cluster) -> dict[str, int] | None:
    found: dict[str, int] | None = status(cluster, "brokers", "orders").get("unmanaged")
    return found


# First in the module: the brokers are shared, and the namespaces of later tests are deleted in the
# background (their Topics' finalizers remove topics), which would move the count under this test.
def test_unmanaged_topics_and_groups_are_left_alone_and_counted(
    cluster: Cluster, brokers: LocalCluster, topic_operator: None
) -> None:
    create(
        cluster, "Broker", "brokers", "orders", {"nameServerRef": {"name": "routes"}, "groups": 2}
    )
    before = wait_for("the Broker's unmanaged count", lambda: unmanaged(cluster))
    # made with another tool: counted, never touched
    admin_call(
        brokers,
        lambda admin: admin.create_topic(
            "legacy_feed",
            broker_addr=brokers.broker_addrs[1],
            read_queue_nums=3,
            write_queue_nums=3,
        ),
    )
    admin_call(
        brokers,
        lambda admin: admin.create_subscription_group(
            SubscriptionGroupConfig(group_name="legacy_readers"),
            broker_addr=brokers.broker_addrs[0],
        ),
    )
    wait_for(
        "the unmanaged count to grow",
        lambda: (
            unmanaged(cluster) == {"topics": before["topics"] + 1, "groups": before["groups"] + 1}
        ),
    )
    assert queues_on(brokers, 1, "legacy_feed") == (3, 3)
    assert "legacy_feed" not in topics_on(brokers, 0)
    # a resource naming it adopts it (and puts it on every group as its spec says)
    create(
        cluster,
        "Topic",
        "topics",
        "legacy",
        {"brokerRef": {"name": "orders"}, "name": "legacy_feed", "queues": 3},
    )
    cluster.wait_condition("topics", "legacy", "Ready", "True")
    assert [queues_on(brokers, g, "legacy_feed") for g in range(2)] == [(3, 3), (3, 3)]
    wait_for(
        "the adopted topic no longer counted",
        lambda: unmanaged(cluster) == {"topics": before["topics"], "groups": before["groups"] + 1},
    )
    assert "legacy_readers" in groups_on(brokers, 0)


def test_topic_lifecycle(cluster: Cluster, brokers: LocalCluster, topic_operator: None) -> None:
    topic = "Payments_v1"  # an upstream name no Kubernetes object can be called
    create(
        cluster, "Broker", "brokers", "orders", {"nameServerRef": {"name": "routes"}, "groups": 2}
    )
    create(
        cluster,
        "Topic",
        "topics",
        "payments",
        {"brokerRef": {"name": "orders"}, "name": topic, "queues": 4, "messageType": "FIFO"},
    )

    # create: on both groups of the Broker, not on the third local broker
    cluster.wait_condition("topics", "payments", "Ready", "True", generation=1)
    assert [queues_on(brokers, g, topic) for g in range(3)] == [(4, 4), (4, 4), None]
    assert topics_on(brokers, 0)[topic].attributes == {"message.type": "FIFO"}
    st = status(cluster, "topics", "payments")
    assert st["brokerGroups"] == ["orders-broker-0", "orders-broker-1"]
    assert (st["name"], st["queues"]) == (topic, "4/4")
    cluster.wait_event("payments", "Created")
    ready = cluster.condition("topics", "payments", "ReconcileFailed") or {}
    assert ready["status"] == "False" and ready["observedGeneration"] == 1

    # grow: in place on every group
    cluster.patch_spec("topics", "payments", {"queues": 8})
    cluster.wait_condition("topics", "payments", "Ready", "True", generation=2)
    assert [queues_on(brokers, g, topic) for g in range(2)] == [(8, 8), (8, 8)]
    assert status(cluster, "topics", "payments")["queues"] == "8/8"

    # drift by another tool (mqadmin-like admin calls): put back at the next resync, with an event
    admin_call(
        brokers,
        lambda admin: admin.create_topic(
            topic,
            broker_addr=brokers.broker_addrs[0],
            read_queue_nums=8,
            write_queue_nums=8,
            perm=4,
        ),
    )
    admin_call(
        brokers, lambda admin: admin.instance.broker.delete_topic(brokers.broker_addrs[1], topic)
    )
    wait_for(
        "the drift put back",
        lambda: topics_on(brokers, 0)[topic].perm == 6 and queues_on(brokers, 1, topic) == (8, 8),
    )
    cluster.wait_event("payments", "DriftCorrected", "Warning")
    drift = [e.message for e in cluster.events_for("payments") if e.reason == "DriftCorrected"]
    # the perm change is always reported as drift; the topic deleted on group 1 is put back (the
    # wait above) and reported as DriftCorrected or, when a pass in between had already dropped
    # group 1 from status.brokerGroups, as Created: which one depends on pass timing
    assert any("perm 4 -> 6" in m for m in drift), drift

    # shrink 8 -> 6 while queues 6 and 7 of group 0 hold messages a consumer group has not read
    send_to_queues(brokers, topic, 0, range(6, 8), 3)
    for q in (6, 7):
        commit(brokers, 0, "billing", topic, q, 1)
    cluster.patch_spec("topics", "payments", {"queues": 6})
    cluster.wait_condition("topics", "payments", "Ready", "False", "ShrinkPending", generation=3)
    message = ready_reason(cluster, "topics", "payments")
    assert message is not None and "billing (4 left)" in message[2] and "queues 6..7" in message[2]
    # writes to the removed queues stop at once, reads stay until they are drained
    assert queues_on(brokers, 0, topic) == (8, 6)
    assert queues_on(brokers, 1, topic) == (6, 6)  # nothing left there: shrunk at once
    assert (cluster.condition("topics", "payments", "ReconcileFailed") or {})["status"] == "False"
    for q in (6, 7):
        commit(brokers, 0, "billing", topic, q, max_offset(brokers, 0, topic, q))
    cluster.wait_condition("topics", "payments", "Ready", "True", generation=3)
    assert [queues_on(brokers, g, topic) for g in range(2)] == [(6, 6), (6, 6)]

    # a Broker scaled out gets every Topic
    cluster.patch_spec("brokers", "orders", {"groups": 3})
    wait_for("the topic on the new group", lambda: queues_on(brokers, 2, topic) == (6, 6))
    wait_for(
        "the new group in the status",
        lambda: (
            status(cluster, "topics", "payments").get("brokerGroups")
            == ["orders-broker-0", "orders-broker-1", "orders-broker-2"]
        ),
    )
    # a fourth group whose master cannot be reached: Ready=False names it, the others stay as they are
    cluster.patch_spec("brokers", "orders", {"groups": 4})
    wait_for(
        "BrokerUnavailable for the fourth group",
        lambda: (
            (r := ready_reason(cluster, "topics", "payments"))
            and r[1] == "BrokerUnavailable"
            and "orders-broker-3" in r[2]
        ),
    )
    # a deletion waits while a master cannot be reached, and says so ...
    create(cluster, "Topic", "topics", "stuck", {"brokerRef": {"name": "orders"}, "queues": 1})
    wait_for(
        "'stuck' on the three reachable groups",
        lambda: len(status(cluster, "topics", "stuck").get("brokerGroups", [])) == 3,
    )
    cluster.delete("topics", "stuck")
    cluster.wait_event("stuck", "DeletePending", "Warning")
    assert cluster.get("topics", "stuck") is not None  # the finalizer holds it
    # ... until the retain annotation lets the resource go and keeps the topic
    cluster.custom.patch_namespaced_custom_object(
        GROUP,
        VERSION,
        cluster.ns,
        "topics",
        "stuck",
        {"metadata": {"annotations": {"ferrymq.io/deletion-policy": "retain"}}},
    )
    wait_for("the retained Topic gone", lambda: cluster.get("topics", "stuck") is None)
    assert [queues_on(brokers, g, "stuck") for g in range(3)] == [(1, 1)] * 3

    # delete with retain from the start: the topic stays on the brokers
    create(
        cluster,
        "Topic",
        "topics",
        "kept",
        {"brokerRef": {"name": "orders"}, "queues": 2},
        annotations={"ferrymq.io/deletion-policy": "retain"},
    )
    cluster.wait_condition("topics", "kept", "ReconcileFailed", "True", "BrokerUnavailable")
    cluster.delete("topics", "kept")
    wait_for("the retained Topic gone", lambda: cluster.get("topics", "kept") is None)
    assert [queues_on(brokers, g, "kept") for g in range(3)] == [(2, 2)] * 3

    # delete: off every broker group and off the NameServer (finalizer); it waits for the
    # unreachable fourth group and finishes once the Broker is back to three
    assert (
        "ferrymq.io/operator" in (cluster.get("topics", "payments") or {})["metadata"]["finalizers"]
    )
    cluster.delete("topics", "payments")
    cluster.wait_event("payments", "DeletePending", "Warning")
    assert cluster.get("topics", "payments") is not None
    cluster.patch_spec("brokers", "orders", {"groups": 3})
    wait_for("the Topic gone", lambda: cluster.get("topics", "payments") is None)
    assert [queues_on(brokers, g, topic) for g in range(3)] == [None, None, None]

    def no_route() -> bool:
        try:
            admin_call(brokers, lambda admin: admin.topic_route(topic))
        except NoRouteError:
            return True
        return False

    wait_for("the route removed from the NameServer", no_route)


def test_duplicates_invalid_specs_and_consumer_groups(
    cluster: Cluster, brokers: LocalCluster, topic_operator: None
) -> None:
    create(
        cluster, "Broker", "brokers", "orders", {"nameServerRef": {"name": "routes"}, "groups": 2}
    )
    create(cluster, "Topic", "topics", "audit", {"brokerRef": {"name": "orders"}, "queues": 2})
    cluster.wait_condition("topics", "audit", "Ready", "True")

    # the later of two resources naming the same topic changes nothing
    create(
        cluster,
        "Topic",
        "topics",
        "audit-copy",
        {"brokerRef": {"name": "orders"}, "name": "audit", "queues": 16},
    )
    dup = cluster.wait_condition("topics", "audit-copy", "Ready", "False", "DuplicateName")
    assert "already managed by Topic 'audit'" in dup["message"]
    cluster.wait_condition("topics", "audit-copy", "ReconcileFailed", "True", "DuplicateName")
    assert queues_on(brokers, 0, "audit") == (2, 2)
    # deleting the duplicate leaves the topic to its owner
    cluster.delete("topics", "audit-copy")
    wait_for("the duplicate gone", lambda: cluster.get("topics", "audit-copy") is None)
    assert queues_on(brokers, 0, "audit") == (2, 2)

    # invalid specs: what the schema can express is refused by the API server ...
    with pytest.raises(k8s.ApiException) as refused:
        create(
            cluster, "Topic", "topics", "bad-name", {"brokerRef": {"name": "orders"}, "name": "a b"}
        )
    assert refused.value.status == 422 and "spec.name" in str(refused.value.body)
    with pytest.raises(k8s.ApiException) as refused:
        create(
            cluster, "Topic", "topics", "bad-queues", {"brokerRef": {"name": "orders"}, "queues": 0}
        )
    assert refused.value.status == 422
    # ... the rest by the operator, with a condition naming the key
    create(
        cluster,
        "Topic",
        "topics",
        "lopsided",
        {"brokerRef": {"name": "orders"}, "readQueueNums": 2, "writeQueueNums": 4},
    )
    bad = cluster.wait_condition("topics", "lopsided", "ReconcileFailed", "True", "InvalidSpec")
    assert "writeQueueNums (4)" in bad["message"] and "readQueueNums" in bad["message"]
    create(cluster, "Topic", "topics", "dotted.name", {"brokerRef": {"name": "orders"}})
    bad = cluster.wait_condition("topics", "dotted.name", "Ready", "False", "InvalidSpec")
    assert "set spec.name" in bad["message"]
    create(cluster, "Topic", "topics", "orphan", {"brokerRef": {"name": "missing"}})
    bad = cluster.wait_condition("topics", "orphan", "Ready", "False", "BrokerNotFound")
    assert "'missing'" in bad["message"]
    assert all("lopsided" not in topics_on(brokers, g) for g in range(2))
    # fixing the spec makes it Ready
    cluster.patch_spec("topics", "lopsided", {"readQueueNums": 4})
    cluster.wait_condition("topics", "lopsided", "Ready", "True", generation=2)
    assert queues_on(brokers, 1, "lopsided") == (4, 4)

    # a ConsumerGroup: upstream SubscriptionGroupConfig on every group, with its live lag
    create(
        cluster,
        "ConsumerGroup",
        "consumergroups",
        "auditors",
        {"brokerRef": {"name": "orders"}, "retryMaxTimes": 3, "consumeMessageOrderly": True},
    )
    cluster.wait_condition("consumergroups", "auditors", "Ready", "True")
    for g in range(2):
        config = groups_on(brokers, g)["auditors"]
        assert (config.retry_max_times, config.consume_message_orderly) == (3, True)
    send_to_queues(brokers, "audit", 0, range(0, 1), 5)
    commit(brokers, 0, "auditors", "audit", 0, 1)
    wait_for(
        "the lag in the status",
        lambda: status(cluster, "consumergroups", "auditors").get("lag") == 4,
    )
    assert status(cluster, "consumergroups", "auditors")["lagByTopic"] == {"audit": 4}
    # drift: removed by another tool, put back
    admin_call(
        brokers,
        lambda admin: admin.instance.broker.delete_subscription_group(
            brokers.broker_addrs[1], "auditors"
        ),
    )
    wait_for("the group put back", lambda: "auditors" in groups_on(brokers, 1))
    cluster.wait_event("auditors", "DriftCorrected", "Warning")
    # a spec change is applied in place
    cluster.patch_spec("consumergroups", "auditors", {"retryMaxTimes": 5})
    cluster.wait_condition("consumergroups", "auditors", "Ready", "True", generation=2)
    assert groups_on(brokers, 0)["auditors"].retry_max_times == 5
    # deletion removes it from every group
    cluster.delete("consumergroups", "auditors")
    wait_for("the ConsumerGroup gone", lambda: cluster.get("consumergroups", "auditors") is None)
    assert all("auditors" not in groups_on(brokers, g) for g in range(2))
