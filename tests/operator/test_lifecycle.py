"""Lifecycle glue: status decoration, pause, OnDelete settling (pure), and the broker admin calls
of the roll-out (replication state from GET_BROKER_RUNTIME_INFO) and of NameServer scaling
(UPDATE_BROKER_CONFIG namesrvAddr) against real ferrymq brokers on 127.0.0.1.

The operator addresses pods by DNS names; here a named stand-in, ``LocalAddresses``, maps those
names to the local brokers' ports (the only part a test machine cannot provide).
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Iterator

import pytest
from ferrymq.broker.local_cluster import LocalCluster
from ferrymq.client.admin import AdminClient
from ferrymq.client.producer import Producer
from ferrymq.message import Message
from ferrymq_operator import lifecycle, models, rollout
from ferrymq_operator.builders import names
from ferrymq_operator.builders.names import Owner
from ferrymq_operator.status import StatusBuilder, WorkloadObservation

OWNER = Owner("ferrymq.io/v1alpha1", "Broker", "orders", "prod", "uid")
DOMAIN = "cluster.local"
NOW = "2026-11-22T02:00:00Z"


def conditions(**status: tuple[str, str]) -> list[dict[str, str]]:
    return [
        {"type": kind, "status": value, "reason": reason, "message": reason}
        for kind, (value, reason) in status.items()
    ]


def base_status(phase: str = "Running") -> dict[str, object]:
    return {
        "phase": phase,
        "conditions": conditions(
            Ready=("True", "AllPodsReady"),
            Progressing=("False", "Complete"),
            Degraded=("False", "AsDesired"),
            ReconcileFailed=("False", "Reconciled"),
        ),
    }


def by_type(status: dict[str, object]) -> dict[str, dict[str, str]]:
    conds = status["conditions"]
    assert isinstance(conds, list)
    return {c["type"]: c for c in conds}


# --- pure ---


def test_pause_annotation_values() -> None:
    def body(value: str | None) -> dict[str, object]:
        annotations = {} if value is None else {lifecycle.PAUSE_ANNOTATION: value}
        return {"metadata": {"annotations": annotations}}

    assert lifecycle.is_paused(body("true")) and lifecycle.is_paused(body(" True "))
    assert not lifecycle.is_paused(body("false")) and not lifecycle.is_paused(body(None))
    assert not lifecycle.is_paused({"metadata": {}})


def test_paused_status_keeps_the_rest_and_says_why() -> None:
    previous = models.ClusterStatus.model_validate(base_status())
    builder = StatusBuilder(models.ClusterStatus, previous, 3, NOW)
    lifecycle.paused_status(builder)
    status = builder.patch()
    conds = by_type(status)
    assert conds["ReconciliationPaused"]["status"] == "True"
    assert lifecycle.PAUSE_ANNOTATION in conds["ReconciliationPaused"]["message"]
    assert conds["Ready"]["reason"] == "AllPodsReady"
    assert "phase" not in status  # the last observed phase stays
    assert lifecycle.paused_events(previous)
    again = models.ClusterStatus.model_validate(status)
    assert lifecycle.paused_events(again) == []
    assert lifecycle.resumed_events(again)[0][1] == "ReconciliationResumed"


def test_on_delete_groups_settle_once_every_pod_runs_the_update_revision() -> None:
    w = WorkloadObservation(
        "orders-broker-0", 2, True, 2, 2, 2, 2, 2, current_revision="r1", update_revision="r2"
    )
    pods = (
        rollout.PodState("orders-broker-0-0", 0, "r2"),
        rollout.PodState("orders-broker-0-1", 1, "r2"),
    )
    done = rollout.GroupState(0, "orders-broker-0", "r2", 2, pods)
    assert w.rolling
    assert not lifecycle.settle_on_delete([w], [done])[0].rolling
    half = rollout.GroupState(0, "orders-broker-0", "r2", 2, (pods[0],))
    assert lifecycle.settle_on_delete([w], [half])[0].rolling


def test_group_states_from_api_objects() -> None:
    sts = {0: {"status": {"updateRevision": "orders-broker-0-new"}}}
    pods = [
        {
            "metadata": {
                "name": f"orders-broker-0-{i}",
                "labels": {
                    names.LABEL_GROUP: "orders-broker-0",
                    "controller-revision-hash": "orders-broker-0-old",
                },
            }
        }
        for i in range(3)  # pod 2 is left over from a scale-down: not part of the group now
    ]
    (state,) = lifecycle.group_states(OWNER, 2, sts, pods, groups=2)
    assert state.update_revision == "orders-broker-0-new"
    assert [p.ordinal for p in state.pods] == [0, 1]


# --- real brokers ---


class LocalAddresses:
    """Stand-in for cluster DNS: the operator's pod addresses -> the local brokers' ports."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.table = {
            names.broker_pod_address(OWNER.name, OWNER.namespace, 0, i, DOMAIN): addr
            for i, addr in enumerate(cluster.broker_addrs)
        }

    def __call__(self, addr: str) -> str:
        return self.table[addr]


@pytest.fixture(scope="module")
def ha_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(
        tmp_path_factory.mktemp("lifecycle"),
        groups=1,
        slaves=1,
        namesrv_port=0,
        broker_port=0,
        cluster_name="orders",
        mapped_file_size_commit_log=1024 * 1024,
    ) as running:
        yield running


async def test_replication_state_of_a_real_slave(ha_cluster: LocalCluster) -> None:
    local = LocalAddresses(ha_cluster)
    info = lifecycle.remoting_runtime_info(ha_cluster.namesrv_addr, 5)

    async def runtime_info(addr: str) -> dict[str, str]:
        return await info(local(addr))

    producer = Producer("lifecycle-test", ha_cluster.namesrv_addr)
    await producer.start()
    try:
        for i in range(50):
            await producer.send(Message("lifecycle-topic", b"x" * 512 + str(i).encode()))
    finally:
        await producer.shutdown()
    group = rollout.GroupState(
        0,
        "orders-broker-0",
        "r",
        2,
        (
            rollout.PodState("orders-broker-0-0", 0, "r", True),
            rollout.PodState("orders-broker-0-1", 1, "r", True),
        ),
    )
    deadline = asyncio.get_running_loop().time() + 30
    while True:
        (state,) = await lifecycle.with_sync(OWNER, [group], runtime_info, DOMAIN, 0)
        if state.sync[1].caught_up or asyncio.get_running_loop().time() > deadline:
            break
        await asyncio.sleep(0.2)
    assert state.sync[1].caught_up is True, state.sync[1]
    assert state.sync[1].detail == "0 bytes behind"

    # The slave stopped: its state is unknown, and the roll of its master waits.
    async def slave_down(addr: str) -> dict[str, str]:
        if addr.startswith("orders-broker-0-1."):
            raise OSError("connection refused")
        return await runtime_info(addr)

    (state,) = await lifecycle.with_sync(OWNER, [group], slave_down, DOMAIN, 0)
    assert state.sync[1].caught_up is None
    stale = rollout.GroupState(0, "orders-broker-0", "r2", 2, group.pods, state.sync)
    decision = rollout.next_step([stale], datetime.datetime.now(datetime.UTC))
    assert isinstance(decision, rollout.Wait) and "slave not reachable" in decision.message


async def test_namesrv_addr_pushed_to_running_brokers(ha_cluster: LocalCluster) -> None:
    local = LocalAddresses(ha_cluster)
    update = lifecycle.remoting_config_update(ha_cluster.namesrv_addr, 5)

    async def to_local(addr: str, properties: dict[str, str]) -> None:
        await update(local(addr), properties)

    pids = [b.pid for b in ha_cluster.brokers]
    new_list = f"{ha_cluster.namesrv_addr};127.0.0.1:9"
    ready = {"orders-broker-0-0", "orders-broker-0-1"}
    failed = await lifecycle.push_namesrv_addr(OWNER, 1, 2, ready, new_list, to_local, DOMAIN)
    assert failed == []
    async with AdminClient(ha_cluster.namesrv_addr) as admin:
        for addr in ha_cluster.broker_addrs:
            assert (await admin.broker_config(addr))["namesrvAddr"] == new_list
        for addr in ha_cluster.broker_addrs:  # put the original list back
            await admin.update_broker_config(addr, {"namesrvAddr": ha_cluster.namesrv_addr})
    # no restart: the same broker processes are running
    assert [b.pid for b in ha_cluster.brokers] == pids and all(
        b.alive() for b in ha_cluster.brokers
    )

    # An unreachable pod is reported by name (retried at the next pass), the others updated.
    async def one_down(addr: str, properties: dict[str, str]) -> None:
        if addr.startswith("orders-broker-0-1."):
            raise OSError("connection refused")
        await to_local(addr, properties)

    failed = await lifecycle.push_namesrv_addr(OWNER, 1, 2, ready, new_list, one_down, DOMAIN)
    assert len(failed) == 1 and failed[0].startswith("orders-broker-0-1: ")
    # pods not Ready are skipped (they read the ConfigMap when they start)
    failed = await lifecycle.push_namesrv_addr(
        OWNER, 1, 2, {"orders-broker-0-0"}, ha_cluster.namesrv_addr, one_down, DOMAIN
    )
    assert failed == []
