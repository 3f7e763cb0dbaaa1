"""The controller's state and leadership on the real Kubernetes API server: a ConfigMap written
with compare-and-swap on resourceVersion, a coordination.k8s.io/v1 Lease for leadership, and two
``ControllerServer``s of which only the Lease holder answers and elects."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from ferrymq.controller.config import ControllerConfig
from ferrymq.controller.k8s_store import ConfigMapStateStore, LeaseElector
from ferrymq.controller.protocol import ControllerRequestCode as Req
from ferrymq.controller.protocol import ControllerResponseCode as Resp
from ferrymq.controller.server import ControllerServer
from ferrymq.controller.state import GroupState, Replica, StateConflict
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import ResponseCode
from ferrymq.remoting.command import RemotingCommand
from kubernetes import client as k8s

from k8s.control_plane import KubeApi


def _group(name: str, master: int, epoch: int) -> GroupState:
    g = GroupState("DefaultCluster", name)
    g.replicas = {1: Replica(1, "127.0.0.1:10911"), 2: Replica(2, "127.0.0.1:10921")}
    g.master_id, g.master_epoch, g.sync_state_set = master, epoch, {1, 2}
    return g


async def _until(what: str, check: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)


async def test_state_survives_a_new_store_and_a_stale_write_is_refused(
    k8s_client: k8s.ApiClient, k8s_namespace: str
) -> None:
    a = ConfigMapStateStore(k8s_client, k8s_namespace, "ctl-state")
    b = ConfigMapStateStore(k8s_client, k8s_namespace, "ctl-state")
    assert a.load(0) == {}
    assert b.load(0) == {}
    await a.save({"g1": _group("g1", 1, 1)})
    # b's create is based on "absent", which is no longer true
    with pytest.raises(StateConflict):
        await b.save({"g1": _group("g1", 2, 5)})
    # a restarted controller (new store object) sees exactly what was saved
    loaded = ConfigMapStateStore(k8s_client, k8s_namespace, "ctl-state").load(0)
    assert loaded["g1"].master_id == 1 and loaded["g1"].master_epoch == 1
    assert loaded["g1"].sync_state_set == {1, 2}
    assert loaded["g1"].replicas[2].addr == "127.0.0.1:10921"
    # b reads the new version; now a's next write is the stale one
    assert b.load(0)["g1"].master_epoch == 1
    await b.save({"g1": _group("g1", 2, 2)})
    with pytest.raises(StateConflict):
        await a.save({"g1": _group("g1", 1, 3)})
    final = ConfigMapStateStore(k8s_client, k8s_namespace, "ctl-state").load(0)
    assert (final["g1"].master_id, final["g1"].master_epoch) == (2, 2)


def test_unreadable_state_is_a_clear_error(k8s_client: k8s.ApiClient, k8s_namespace: str) -> None:
    k8s.CoreV1Api(k8s_client).create_namespaced_config_map(
        k8s_namespace,
        k8s.V1ConfigMap(
            metadata=k8s.V1ObjectMeta(name="ctl-state"), data={"controller.json": "{not json"}
        ),
    )
    with pytest.raises(ValueError, match="unreadable controller state"):
        ConfigMapStateStore(k8s_client, k8s_namespace, "ctl-state").load(0)


async def test_two_electors_one_leader_and_takeover_after_expiry(
    k8s_client: k8s.ApiClient, k8s_namespace: str
) -> None:
    a = LeaseElector(k8s_client, k8s_namespace, "ctl", "ctl-a", lease_duration_s=2)
    b = LeaseElector(k8s_client, k8s_namespace, "ctl", "ctl-b", lease_duration_s=2)
    assert await a.step()
    for _ in range(5):
        assert await b.step() is False
        assert await a.step() is True
        assert a.is_leader() and not b.is_leader()
    lease = k8s.CoordinationV1Api(k8s_client).read_namespaced_lease("ctl", k8s_namespace)
    assert lease.spec.holder_identity == "ctl-a"
    assert lease.spec.lease_duration_seconds == 2
    # a stops renewing (crashed / frozen): it stops counting itself leader by its renew
    # deadline, and b takes the Lease only once it has seen it unchanged for the duration
    await _until("a to give up leading", lambda: not a.is_leader())
    assert not b.is_leader()
    took_at: list[float] = []

    async def b_leads() -> None:
        deadline = time.monotonic() + 20
        while not await b.step():
            assert time.monotonic() < deadline, "b never took the expired Lease"
            await asyncio.sleep(0.2)
        took_at.append(time.monotonic())

    await b_leads()
    assert b.is_leader() and b.term == 1
    lease = k8s.CoordinationV1Api(k8s_client).read_namespaced_lease("ctl", k8s_namespace)
    assert lease.spec.holder_identity == "ctl-b"
    assert lease.spec.lease_transitions == 1
    # a comes back: it sees b's renewals and does not take over
    for _ in range(3):
        assert await b.step()
        assert await a.step() is False


async def test_release_hands_over_without_waiting(
    k8s_client: k8s.ApiClient, k8s_namespace: str
) -> None:
    a = LeaseElector(k8s_client, k8s_namespace, "ctl", "ctl-a", lease_duration_s=60)
    b = LeaseElector(k8s_client, k8s_namespace, "ctl", "ctl-b", lease_duration_s=60)
    assert await a.step()
    assert await b.step() is False
    await a.stop()
    assert await b.step()


def _register(broker_id: int, port: int) -> RemotingCommand:
    return RemotingCommand.request(
        Req.CONTROLLER_REGISTER_BROKER,
        {
            "clusterName": "DefaultCluster",
            "brokerName": "broker-a",
            "brokerId": broker_id,
            "brokerAddr": f"127.0.0.1:{port}",
            "epoch": 0,
            "heartbeatTimeoutMills": 60_000,
        },
    )


async def test_only_the_lease_holder_answers_and_its_successor_keeps_the_state(
    kube_api: KubeApi, k8s_namespace: str, tmp_path: Path
) -> None:
    clients = [kube_api.api_client() for _ in range(2)]
    servers = []
    for i, c in enumerate(clients):
        cfg = ControllerConfig(
            listen_port=0,
            bind_address="127.0.0.1",
            controller_store_path=tmp_path / f"unused-{i}",
            scan_not_active_broker_interval=100,
        )
        servers.append(
            ControllerServer(
                cfg,
                store=ConfigMapStateStore(c, k8s_namespace, "ctl-state"),
                leadership=LeaseElector(
                    c, k8s_namespace, "ctl", f"ctl-{i}", lease_duration_s=2, retry_period_s=0.2
                ),
            )
        )
    remoting = RemotingClient(name="test")
    try:
        await servers[0].start()
        await _until("controller 0 to lead", servers[0].leadership.is_leader)  # type: ignore[union-attr]
        await servers[1].start()
        leader, follower = servers
        ok = await remoting.invoke(f"127.0.0.1:{leader.port}", _register(1, 10911), 5.0)
        assert ok.code == ResponseCode.SUCCESS, ok.remark
        refused = await remoting.invoke(f"127.0.0.1:{follower.port}", _register(2, 10921), 5.0)
        assert refused.code == Resp.CONTROLLER_NOT_LEADER
        assert "not the leader" in (refused.remark or "")
        # the leader dies without handing the Lease back
        await leader._scan.stop()
        await leader.server.stop()
        elector = leader.leadership
        assert isinstance(elector, LeaseElector)
        await elector.stop(release=False)  # no renewals and no hand-back: the Lease lapses
        await _until("controller 1 to take over", follower.leadership.is_leader)  # type: ignore[union-attr]
        second = await remoting.invoke(f"127.0.0.1:{follower.port}", _register(2, 10921), 5.0)
        assert second.code == ResponseCode.SUCCESS, second.remark
        # the group and its first master (epoch 1) came from the ConfigMap, not from scratch
        assert second.ext_fields["masterBrokerId"] == "1"
        assert second.ext_fields["masterEpoch"] == "1"
        saved = ConfigMapStateStore(clients[1], k8s_namespace, "ctl-state").load(0)
        assert set(saved["broker-a"].replicas) == {1, 2}
    finally:
        await remoting.close()
        for s in servers:
            await s.stop()
        for c in clients:
            c.close()


async def test_racing_electors_never_both_lead(
    k8s_client: k8s.ApiClient, k8s_namespace: str
) -> None:
    """Both try at once, from no Lease and again at every renewal: the API's create/replace
    conflicts leave exactly one leader each round."""
    a = LeaseElector(k8s_client, k8s_namespace, "race", "ctl-a", lease_duration_s=30)
    b = LeaseElector(k8s_client, k8s_namespace, "race", "ctl-b", lease_duration_s=30)
    first: bool | None = None
    for _ in range(10):
        got = await asyncio.gather(a.step(), b.step())
        assert sorted(got) == [False, True], got
        assert a.is_leader() != b.is_leader()
        if first is None:
            first = a.is_leader()
        assert a.is_leader() == first  # the first winner keeps it
