"""The roll-out's controller half: groupMasters read into the roll state, replication measured
against the elected master, and the operator's switchover call against a real controller
(127.0.0.1, port 0) with a standby that answers CONTROLLER_NOT_LEADER first."""

from __future__ import annotations

import datetime
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest
from ferrymq.controller.config import ControllerConfig
from ferrymq.controller.protocol import ControllerRequestCode as Req
from ferrymq.controller.protocol import ControllerResponseCode as Resp
from ferrymq.controller.server import ControllerServer
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.server import RemotingServer
from ferrymq_operator import lifecycle, rollout
from ferrymq_operator.builders.names import Owner

NOW = datetime.datetime(2026, 11, 22, 2, 0, 0, tzinfo=datetime.UTC)


def _states() -> list[rollout.GroupState]:
    pods = tuple(rollout.PodState(f"orders-broker-0-{i}", i, "new", True) for i in range(3))
    return [rollout.GroupState(0, "orders-broker-0", "new", 3, pods)]


def test_with_controller_maps_replica_ids_to_ordinals() -> None:
    masters = [{"brokerName": "orders-broker-0", "masterBrokerId": 2, "syncStateSet": [1, 2]}]
    (g,) = lifecycle.with_controller(_states(), masters)
    assert (g.controller_mode, g.master_ordinal, g.in_sync) == (True, 1, frozenset({0, 1}))
    (none,) = lifecycle.with_controller(_states(), [])
    assert none.controller_mode and none.master_ordinal is None


async def test_replication_is_measured_against_the_elected_master() -> None:
    (g,) = lifecycle.with_controller(
        _states(), [{"brokerName": "orders-broker-0", "masterBrokerId": 2, "syncStateSet": [2]}]
    )
    offsets = {"0": 100, "1": 5000, "2": 5000}

    async def info(addr: str) -> dict[str, str]:
        ordinal = addr.split(".")[0].rsplit("-", 1)[1]
        return {"haConnected": "true", "commitLogMaxOffset": str(offsets[ordinal])}

    (synced,) = await lifecycle.with_sync(
        Owner("v", "Broker", "orders", "ns", "u"), [g], info, "d", 10
    )
    assert set(synced.sync) == {0, 2}  # ordinal 1 is the master
    assert synced.sync[2].caught_up is True
    assert synced.sync[0].caught_up is False  # 4900 bytes behind ordinal 1


@pytest.fixture
async def controller(tmp_path: Path) -> AsyncIterator[ControllerServer]:
    server = ControllerServer(
        ControllerConfig(
            listen_port=0,
            bind_address="127.0.0.1",
            controller_store_path=tmp_path / "ctl",
            scan_not_active_broker_interval=3_600_000,
        )
    )
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
async def standby() -> AsyncIterator[str]:
    """A controller that is not the leader: answers every request CONTROLLER_NOT_LEADER."""
    server = RemotingServer("127.0.0.1", 0, name="standby")

    async def not_leader(channel: object, request: RemotingCommand) -> RemotingCommand:
        return request.response(Resp.CONTROLLER_NOT_LEADER, "this controller is not the leader")

    server.register(Req.CONTROLLER_ELECT_MASTER, not_leader)  # type: ignore[arg-type]
    await server.start()
    yield f"127.0.0.1:{server.port}"
    await server.stop()


async def _call(
    addr: str, code: int, ext: dict[str, object], body: bytes | None = None
) -> RemotingCommand:
    client = RemotingClient()
    try:
        return await client.invoke(addr, RemotingCommand.request(code, ext, body))
    finally:
        await client.close()


async def test_switchover_reaches_the_leader_and_moves_mastership(
    controller: ControllerServer, standby: str
) -> None:
    addr = f"127.0.0.1:{controller.port}"
    for bid in (1, 2, 3):
        reg = await _call(
            addr,
            Req.CONTROLLER_REGISTER_BROKER,
            {
                "clusterName": "orders",
                "brokerName": "orders-broker-0",
                "brokerId": bid,
                "brokerAddr": f"127.0.0.1:{1000 + bid}",
                "epoch": 0,
                "heartbeatTimeoutMills": 3_600_000,
            },
        )
        assert reg.code == ResponseCode.SUCCESS, reg.remark
    altered = await _call(
        addr,
        Req.CONTROLLER_ALTER_SYNC_STATE_SET,
        {
            "brokerName": "orders-broker-0",
            "masterBrokerId": 1,
            "masterEpoch": 1,
            "syncStateSetEpoch": controller.groups["orders-broker-0"].sync_state_set_epoch,
        },
        orjson.dumps({"syncStateSet": [1, 2]}),
    )
    assert altered.code == ResponseCode.SUCCESS, altered.remark
    owner = Owner("ferrymq.io/v1alpha1", "Broker", "orders", "ns", "u")
    call = lifecycle.remoting_switchover(owner, 2.0, [standby, addr])
    # ordinal 2 (replica 3) is not in the SyncStateSet: refused, with the controller's reason
    with pytest.raises(RuntimeError, match="Failed to elect a new master"):
        await call(0, 2)
    assert controller.groups["orders-broker-0"].master_id == 1
    await call(0, 1)  # ordinal 1 = replica 2
    group = controller.groups["orders-broker-0"]
    assert (group.master_id, group.master_epoch) == (2, 2)
    # again: the controller answers 2011 CONTROLLER_MASTER_STILL_EXIST (as upstream's), which
    # means done; nothing changes
    await call(0, 1)
    assert (group.master_id, group.master_epoch) == (2, 2)


async def test_roll_hands_over_instead_of_deleting_the_master() -> None:
    pods = (
        rollout.PodState("orders-broker-0-0", 0, "old", True),
        rollout.PodState("orders-broker-0-1", 1, "new", True),
    )
    g = rollout.GroupState(
        0,
        "orders-broker-0",
        "new",
        2,
        pods,
        {1: rollout.SlaveSync(True)},
        controller_mode=True,
        master=0,
        in_sync=frozenset({0, 1}),
    )
    asked: list[tuple[int, int]] = []

    async def switchover(group: int, to_ordinal: int) -> None:
        asked.append((group, to_ordinal))

    async def no_sync(states: object) -> list[rollout.GroupState]:
        raise AssertionError("replication state not needed here")

    events: list[tuple[str, str, str]] = []
    outcome = await lifecycle.roll(
        None,  # type: ignore[arg-type]  # no pod is deleted on this path: the Kube is unused
        Owner("v", "Broker", "orders", "ns", "u"),
        [g],
        None,
        False,
        no_sync,
        rollout.Policy(),
        events,
        NOW,
        switchover,
    )
    assert isinstance(outcome.decision, rollout.SwitchOver)
    assert asked == [(0, 1)]
    assert events and events[0][1] == "SwitchOver"
    assert outcome.status is not None and "handing mastership" in outcome.status["message"]


def test_topic_copy_goes_to_the_elected_master() -> None:
    from ferrymq_operator import models, reconcile

    owner = Owner("ferrymq.io/v1alpha1", "Broker", "orders", "ns", "u")
    masters = [
        {"brokerName": "orders-broker-0", "masterBrokerId": 2},
        {"brokerName": "orders-broker-1", "masterBrokerId": None},
        {"brokerName": "other-broker-0", "masterBrokerId": 1},
    ]
    assert reconcile.master_ordinals(owner, masters) == {0: 1}
    spec = models.parse_broker_spec({"nameServerRef": {"name": "r"}, "failover": "controller"})
    addr = reconcile.broker_admin_address(owner, spec, 0, "cluster.local", 1)
    assert addr.startswith("orders-broker-0-1.orders-broker-hs.ns.svc.cluster.local:")


async def test_drain_asks_the_elected_master() -> None:
    """Which broker a scale-in drain talks to; the admin here only records the address it is
    given (a stand-in for the broker calls, which tests/k8s/test_lifecycle_drain.py makes)."""
    from ferrymq_operator import drain

    asked: list[str] = []

    class Recorder:
        async def stop_writes(self, namesrv_addr: str, broker_name: str, broker_addr: str) -> None:
            asked.append(broker_addr)
            raise drain.DrainUnavailable("not reachable in this test")

        async def lags(self, namesrv_addr: str, broker_addr: str) -> drain.Backlog:
            raise AssertionError("not reached")

        async def resume_writes(
            self, namesrv_addr: str, broker_name: str, broker_addr: str
        ) -> None:
            asked.append(broker_addr)

    owner = Owner("ferrymq.io/v1alpha1", "Broker", "orders", "ns", "u")
    out = await lifecycle.drain_groups(
        None,  # type: ignore[arg-type]  # no group is drained here, so nothing is deleted
        owner,
        [1],
        [],
        Recorder(),
        "ns:9876",
        "cluster.local",
        False,
        [],
        "2026-11-22T02:00:00Z",
        None,
        {1: 2},
    )
    assert asked == ["orders-broker-1-2.orders-broker-hs.ns.svc.cluster.local:10911"]
    assert out[0]["reason"] == "DrainUnavailable"
