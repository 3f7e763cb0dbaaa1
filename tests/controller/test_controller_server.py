"""The controller on real sockets (127.0.0.1, port 0): registration, heartbeats, SyncStateSet
changes, elections on master loss, notifications, bad input, and a restart from its file store.

Time is the controller's injected clock (a plain counter the test advances) so expiry is decided
without sleeping; the scan is called directly (its own loop's interval is an hour here).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest
from ferrymq.controller.config import DEFAULT_HEARTBEAT_TIMEOUT_MS, ControllerConfig
from ferrymq.controller.protocol import ControllerRequestCode as Req
from ferrymq.controller.protocol import ControllerResponseCode as Resp
from ferrymq.controller.protocol import ReplicaInfo
from ferrymq.controller.server import ControllerServer
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.server import RemotingServer

TIMEOUT = 1000


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


def make(tmp_path: Path, clock: Clock) -> ControllerServer:
    config = ControllerConfig(
        listen_port=0,
        bind_address="127.0.0.1",
        controller_store_path=tmp_path / "ctl",
        scan_not_active_broker_interval=3_600_000,
    )
    return ControllerServer(config, clock=clock)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def controller(tmp_path: Path, clock: Clock) -> AsyncIterator[ControllerServer]:
    server = make(tmp_path, clock)
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
async def client() -> AsyncIterator[RemotingClient]:
    c = RemotingClient()
    yield c
    await c.close()


def addr_of(c: ControllerServer) -> str:
    return f"127.0.0.1:{c.port}"


async def call(
    client: RemotingClient,
    controller: ControllerServer,
    code: int,
    ext: dict[str, object],
    body: bytes | None = None,
) -> RemotingCommand:
    return await client.invoke(addr_of(controller), RemotingCommand.request(code, ext, body))


def reg_ext(bid: int, addr: str, **extra: object) -> dict[str, object]:
    return {
        "clusterName": "c1",
        "brokerName": "g",
        "brokerId": bid,
        "brokerAddr": addr,
        "haAddress": addr + "0",
        "epoch": 0,
        "maxOffset": 0,
        "heartbeatTimeoutMills": TIMEOUT,
        **extra,
    }


async def register(
    client: RemotingClient, controller: ControllerServer, bid: int, addr: str, **extra: object
) -> ReplicaInfo:
    resp = await call(
        client, controller, Req.CONTROLLER_REGISTER_BROKER, reg_ext(bid, addr, **extra)
    )
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    return ReplicaInfo.parse(resp.ext_fields, resp.body_bytes())


async def heartbeat(
    client: RemotingClient, controller: ControllerServer, bid: int, addr: str, offset: int = 0
) -> RemotingCommand:
    return await call(
        client,
        controller,
        Req.BROKER_HEARTBEAT,
        {"brokerName": "g", "brokerId": bid, "brokerAddr": addr, "maxOffset": offset},
    )


async def alter(
    client: RemotingClient,
    controller: ControllerServer,
    master: int,
    epoch: int,
    sss_epoch: int,
    members: list[int],
) -> RemotingCommand:
    return await call(
        client,
        controller,
        Req.CONTROLLER_ALTER_SYNC_STATE_SET,
        {
            "brokerName": "g",
            "masterBrokerId": master,
            "masterEpoch": epoch,
            "syncStateSetEpoch": sss_epoch,
        },
        orjson.dumps({"syncStateSet": members}),
    )


async def test_first_broker_is_master_then_others_follow(
    controller: ControllerServer, client: RemotingClient
) -> None:
    first = await register(client, controller, 1, "127.0.0.1:1001")
    assert (first.master_broker_id, first.master_epoch) == (1, 1)
    assert first.master_addr == "127.0.0.1:1001"
    assert first.master_ha_addr == "127.0.0.1:10010"
    assert first.sync_state_set == {1}
    second = await register(client, controller, 2, "127.0.0.1:1002")
    assert (second.master_broker_id, second.master_epoch) == (1, 1)


async def test_alter_sync_state_set_and_its_fencing(
    controller: ControllerServer, client: RemotingClient
) -> None:
    info = await register(client, controller, 1, "127.0.0.1:1001")
    await register(client, controller, 2, "127.0.0.1:1002")
    resp = await alter(client, controller, 1, 1, info.sync_state_set_epoch, [1, 2])
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    after = ReplicaInfo.parse(resp.ext_fields, resp.body_bytes())
    assert after.sync_state_set == {1, 2}
    assert after.sync_state_set_epoch == info.sync_state_set_epoch + 1
    stale = await alter(client, controller, 1, 1, info.sync_state_set_epoch, [1])
    assert stale.code == Resp.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH
    not_master = await alter(client, controller, 2, 1, after.sync_state_set_epoch, [2])
    assert not_master.code == Resp.CONTROLLER_INVALID_MASTER
    old_epoch = await alter(client, controller, 1, 0, after.sync_state_set_epoch, [1])
    assert old_epoch.code == Resp.CONTROLLER_FENCED_MASTER_EPOCH
    garbage = await call(
        client,
        controller,
        Req.CONTROLLER_ALTER_SYNC_STATE_SET,
        {"brokerName": "g", "masterBrokerId": 1, "masterEpoch": 1, "syncStateSetEpoch": 1},
        b"not json",
    )
    assert garbage.code == Resp.CONTROLLER_INVALID_REQUEST
    assert "syncStateSet" in (garbage.remark or "")


async def test_master_loss_elects_from_the_sync_state_set_and_notifies(
    controller: ControllerServer, client: RemotingClient, clock: Clock
) -> None:
    notified: asyncio.Queue[RemotingCommand] = asyncio.Queue()
    broker3 = RemotingServer("127.0.0.1", 0, name="fake-broker-3")

    def on_notify(channel: object, request: RemotingCommand) -> RemotingCommand:
        notified.put_nowait(request)
        return request.response(ResponseCode.SUCCESS)

    broker3.register(Req.NOTIFY_BROKER_ROLE_CHANGED, on_notify)
    await broker3.start()
    try:
        info = await register(client, controller, 1, "127.0.0.1:1001")
        await register(client, controller, 2, "127.0.0.1:1002")
        await register(client, controller, 3, f"127.0.0.1:{broker3.port}")
        resp = await alter(client, controller, 1, 1, info.sync_state_set_epoch, [1, 3])
        assert resp.code == ResponseCode.SUCCESS
        # 2 has more data but is out of sync; 1 (master) stops heartbeating
        clock.ms += TIMEOUT // 2
        assert (await heartbeat(client, controller, 2, "127.0.0.1:1002", 900)).code == 0
        assert (await heartbeat(client, controller, 3, f"127.0.0.1:{broker3.port}", 500)).code == 0
        await controller.scan_once()
        assert controller.groups["g"].master_id == 1  # not yet expired: no election
        clock.ms += TIMEOUT // 2 + 1
        await controller.scan_once()
        group = controller.groups["g"]
        assert (group.master_id, group.master_epoch, group.sync_state_set) == (3, 2, {3})
        note = await asyncio.wait_for(notified.get(), 5)
        told = ReplicaInfo.parse(note.ext_fields, note.body_bytes())
        assert (told.master_broker_id, told.master_epoch) == (3, 2)
    finally:
        await broker3.stop()


async def test_no_election_without_an_alive_in_sync_replica(
    controller: ControllerServer, client: RemotingClient, clock: Clock
) -> None:
    await register(client, controller, 1, "127.0.0.1:1001")
    await register(client, controller, 2, "127.0.0.1:1002")  # never joins the SyncStateSet
    clock.ms += TIMEOUT + 1
    assert (await heartbeat(client, controller, 2, "127.0.0.1:1002", 10**6)).code == 0
    await controller.scan_once()
    group = controller.groups["g"]
    assert group.master_id is None and group.master_epoch == 1
    assert controller.elections == 1  # only the first master
    # the old master (the only in-sync replica) comes back: it is elected again, new epoch
    back = await register(client, controller, 1, "127.0.0.1:1001", epoch=1)
    assert (back.master_broker_id, back.master_epoch) == (1, 2)


async def test_bad_input_is_refused_with_a_reason(
    controller: ControllerServer, client: RemotingClient
) -> None:
    await register(client, controller, 1, "127.0.0.1:1001")
    cases: list[tuple[dict[str, object], int, str]] = [
        (reg_ext(0, "127.0.0.1:1"), Resp.CONTROLLER_INVALID_REQUEST, "brokerId 0"),
        (reg_ext(2, "nowhere"), Resp.CONTROLLER_INVALID_REQUEST, "host:port"),
        (reg_ext(2, "127.0.0.1:2", clusterName="other"), Resp.CONTROLLER_INVALID_REQUEST, "c1"),
        (reg_ext(2, "127.0.0.1:2", epoch=7), Resp.CONTROLLER_FENCED_MASTER_EPOCH, "epoch 7"),
        (reg_ext(1, "127.0.0.1:9"), Resp.CONTROLLER_INVALID_REQUEST, "held by the live broker"),
        (reg_ext(2, "127.0.0.1:2", brokerId="x"), Resp.CONTROLLER_INVALID_REQUEST, "integer"),
    ]
    for ext, code, words in cases:
        resp = await call(client, controller, Req.CONTROLLER_REGISTER_BROKER, ext)
        assert resp.code == code, (ext, resp.remark)
        assert words in (resp.remark or ""), resp.remark
    unknown = await heartbeat(client, controller, 5, "127.0.0.1:5")
    assert unknown.code == Resp.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED
    no_group = await call(client, controller, Req.CONTROLLER_GET_REPLICA_INFO, {"brokerName": "x"})
    assert no_group.code == Resp.CONTROLLER_BROKER_METADATA_NOT_EXIST
    # the controller still serves after all that
    assert (await heartbeat(client, controller, 1, "127.0.0.1:1001")).code == 0


async def test_admin_election_moves_mastership_only_to_an_in_sync_replica(
    controller: ControllerServer, client: RemotingClient
) -> None:
    info = await register(client, controller, 1, "127.0.0.1:1001")
    await register(client, controller, 2, "127.0.0.1:1002")
    await register(client, controller, 3, "127.0.0.1:1003")
    await alter(client, controller, 1, 1, info.sync_state_set_epoch, [1, 2])
    refused = await call(
        client, controller, Req.CONTROLLER_ELECT_MASTER, {"brokerName": "g", "brokerId": 3}
    )
    assert refused.code == Resp.CONTROLLER_ELECT_MASTER_FAILED
    ok = await call(
        client, controller, Req.CONTROLLER_ELECT_MASTER, {"brokerName": "g", "brokerId": 2}
    )
    assert ok.code == ResponseCode.SUCCESS
    moved = ReplicaInfo.parse(ok.ext_fields, b"")
    assert (moved.master_broker_id, moved.master_epoch) == (2, 2)
    # upstream's ElectMasterResponseBody: the group's replicas and the new SyncStateSet
    assert ok.body_bytes() == (
        b'{"brokerMemberGroup":{"brokerAddrs":{1:"127.0.0.1:1001",2:"127.0.0.1:1002",'
        b'3:"127.0.0.1:1003"},"brokerName":"g","cluster":"c1"},"syncStateSet":[2]}'
    )
    # upstream's codes and remarks: the master itself, a group nobody registered
    again = await call(
        client, controller, Req.CONTROLLER_ELECT_MASTER, {"brokerName": "g", "brokerId": 2}
    )
    assert (again.code, again.remark) == (
        Resp.CONTROLLER_MASTER_STILL_EXIST,
        "The old master 2 is still alive, not need to elect new master for broker g",
    )
    unknown = await call(
        client, controller, Req.CONTROLLER_ELECT_MASTER, {"brokerName": "x", "brokerId": 2}
    )
    assert (unknown.code, unknown.remark) == (
        Resp.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
        "Broker hasn't been registered",
    )
    assert refused.remark == "Failed to elect a new master"


async def test_restart_keeps_state_and_gives_brokers_a_full_timeout(
    tmp_path: Path, client: RemotingClient, clock: Clock
) -> None:
    first = make(tmp_path, clock)
    await first.start()
    try:
        info = await register(client, first, 1, "127.0.0.1:1001")
        await register(client, first, 2, "127.0.0.1:1002")
        await alter(client, first, 1, 1, info.sync_state_set_epoch, [1, 2])
        before = first.groups["g"].replica_info()
    finally:
        await first.stop()
    clock.ms += 10 * TIMEOUT  # down far longer than any heartbeat timeout: elected nobody
    second = make(tmp_path, clock)
    await second.start()
    try:
        assert second.groups["g"].replica_info() == before
        await second.scan_once()  # no heartbeat yet since the restart, but no election either
        assert second.groups["g"].master_id == 1 and second.elections == 0
        # a restarted controller gives each broker the default timeout (10 s) until it heartbeats
        clock.ms += DEFAULT_HEARTBEAT_TIMEOUT_MS + 1
        assert (await heartbeat(client, second, 2, "127.0.0.1:1002", 5)).code == 0
        await second.scan_once()  # now the master really is silent: 2 takes over
        assert second.groups["g"].master_id == 2
        data = await call(client, second, Req.CONTROLLER_GET_SYNC_STATE_DATA, {})
        assert orjson.loads(data.body_bytes())["g"]["masterEpoch"] == 2
    finally:
        await second.stop()


async def test_mqadmin_requests_are_answered_in_upstreams_shapes(
    controller: ControllerServer, client: RemotingClient
) -> None:
    """CONTROLLER_GET_METADATA_INFO (getControllerMetaData) and CONTROLLER_GET_SYNC_STATE_DATA
    with a list of broker names (getSyncStateSet), as Apache's controller answers them."""
    meta = await call(client, controller, Req.CONTROLLER_GET_METADATA_INFO, {})
    assert meta.code == ResponseCode.SUCCESS
    me = addr_of(controller)
    assert {k: meta.ext_fields.get(k) for k in ("group", "controllerLeaderId", "peers")} == {
        "group": "group1",
        "controllerLeaderId": "n0",
        "peers": f"n0:{me}",
    }
    assert meta.ext_fields["controllerLeaderAddress"] == me
    info = await register(client, controller, 1, "127.0.0.1:1001")
    await register(client, controller, 2, "127.0.0.1:1002")
    await alter(client, controller, 1, 1, info.sync_state_set_epoch, [1])
    names = orjson.dumps(["g", "unknown"])
    data = await call(client, controller, Req.CONTROLLER_GET_SYNC_STATE_DATA, {}, names)
    assert data.code == ResponseCode.SUCCESS
    table = orjson.loads(data.body_bytes())["replicasInfoTable"]
    assert list(table) == ["g"]  # a name the controller does not know is left out
    group = table["g"]
    assert (group["masterBrokerId"], group["masterAddress"]) == (1, "127.0.0.1:1001")
    assert [r["brokerId"] for r in group["inSyncReplicas"]] == [1]
    assert group["notInSyncReplicas"] == [
        {"brokerName": "g", "brokerId": 2, "brokerAddress": "127.0.0.1:1002", "alive": True}
    ]
    bad = await call(client, controller, Req.CONTROLLER_GET_SYNC_STATE_DATA, {}, b"{")
    assert bad.code == Resp.CONTROLLER_INVALID_REQUEST
    assert "list of broker names" in (bad.remark or "")
