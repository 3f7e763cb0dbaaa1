"""Differential: a NameServer ignores a registration for a brokerId held by another live broker
with a newer master epoch (``DataVersion.stateVersion``), Apache 5.4.0 and ferrymq alike
(issue 34: a replaced master back from a partition took the master out of the route)."""

from __future__ import annotations

import asyncio

from ferrymq.remoting.bodies import TopicRouteData
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.headers import UnRegisterBrokerRequestHeader
from namesrv.test_namesrv_server import register_request
from polling import wait_for

from .reference import Target, registered_brokers


async def test_an_older_epoch_does_not_replace_the_master(target: Target) -> None:
    group, topic = "epoch-group", "EpochTopic"
    old, new = "127.0.0.1:41001", "127.0.0.1:41002"
    client = RemotingClient()
    route_req = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})

    async def register(addr: str, bid: int, epoch: int) -> None:
        # two topics: upstream refuses a first registration carrying exactly one ("register
        # broker failed", its single-topic update path)
        request = register_request(group, addr, bid, topic, f"{topic}2", state_version=epoch)
        resp = await client.invoke(target.namesrv_addr, request, 10.0)
        assert resp.code == ResponseCode.SUCCESS, resp.remark

    async def addrs() -> dict[int, str]:
        resp = await client.invoke(target.namesrv_addr, route_req, 10.0)
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        route = TopicRouteData.decode(resp.body_bytes())  # fastjson: Apache's keys are numbers
        return next(dict(d.broker_addrs) for d in route.broker_datas if d.broker_name == group)

    try:
        await register(old, 0, 1)
        await register(new, 1, 1)
        await register(new, 0, 2)  # elected: epoch 2
        assert await addrs() == {0: new}
        await register(old, 0, 1)  # the replaced master, still at epoch 1
        assert await addrs() == {0: new}
        await register(old, 1, 2)  # then as a slave of epoch 2
        assert await addrs() == {0: new, 1: old}
    finally:
        # Unregister both explicitly: on a closed connection Apache's NameServer drops only the
        # first broker it finds for that channel (RouteInfoManager.onChannelDestroy), and the
        # other would stay in the table for 120 s and be seen by the next test on this target.
        for addr, bid in ((old, 1), (new, 0)):
            header = UnRegisterBrokerRequestHeader(
                broker_name=group, broker_addr=addr, cluster_name="c", broker_id=bid
            ).to_ext()
            request = RemotingCommand.request(RequestCode.UNREGISTER_BROKER, header)
            resp = await client.invoke(target.namesrv_addr, request, 10.0)
            assert resp.code == ResponseCode.SUCCESS, resp.remark
        await client.close()

        async def gone() -> bool:
            table = await asyncio.to_thread(registered_brokers, target.namesrv_addr)
            return table is not None and group not in table

        await wait_for(gone, timeout=30, what=f"{group} unregistered")
