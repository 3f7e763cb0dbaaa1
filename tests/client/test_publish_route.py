"""Where a producer sends a topic the NameServers know but with no master registered (a
switchover under way): upstream's tryToFindTopicPublishInfo returns that route (isHaveTopicRouterInfo)
and the send fails until the new master registers. Borrowing TBW102's route instead created the
topic on other brokers (seen on kind: acks from a Broker the topic was never meant for). A real
NameServer on 127.0.0.1 with brokers registered by raw REGISTER_BROKER requests."""

from __future__ import annotations

import asyncio
import zlib

import pytest
from ferrymq.client.errors import NoRouteError
from ferrymq.client.instance import ClientInstance
from ferrymq.namesrv.app import NamesrvApp
from ferrymq.remoting.bodies import (
    DataVersion,
    RegisterBrokerBody,
    TopicConfig,
    TopicConfigSerializeWrapper,
)
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.headers import RegisterBrokerRequestHeader


async def register(
    client: RemotingClient, namesrv: NamesrvApp, name: str, addr: str, broker_id: int, topic: str
) -> None:
    """REGISTER_BROKER over ``client``, whose connection must stay open: the NameServer drops a
    broker whose channel closes."""
    body = RegisterBrokerBody(
        topic_config_serialize_wrapper=TopicConfigSerializeWrapper(
            topic_config_table={
                topic: TopicConfig(topic_name=topic, read_queue_nums=4, write_queue_nums=4)
            },
            data_version=DataVersion(timestamp=1, counter=1),
        )
    ).encode()
    header = RegisterBrokerRequestHeader(
        broker_name=name,
        broker_addr=addr,
        cluster_name="c",
        broker_id=broker_id,
        ha_server_addr=addr,
        body_crc32=zlib.crc32(body) & 0x7FFFFFFF,
    )
    request = RemotingCommand.request(RequestCode.REGISTER_BROKER, header.to_ext(), body)
    response = await client.invoke(namesrv.addr, request)
    assert response.code == ResponseCode.SUCCESS, response.remark


async def test_a_known_topic_without_a_master_is_not_sent_through_tbw102(
    namesrv: NamesrvApp,
) -> None:
    # another group's master offers TBW102 (autoCreateTopicEnable); the topic's own group has
    # only its slave registered, as between a master's exit and the new master's registration
    brokers = RemotingClient()
    await register(brokers, namesrv, "other", "127.0.0.1:1", 0, "TBW102")
    # the NameServer takes topic configs from masters only: the master registers the topic, its
    # slave registers too, then the master's channel closes (the pod rolled) and it is dropped
    master = RemotingClient()
    await register(master, namesrv, "ha", "127.0.0.1:2", 0, "Orders")
    await register(brokers, namesrv, "ha", "127.0.0.1:3", 1, "Orders")
    await master.close()
    instance = ClientInstance(namesrv.addr)
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while True:
            route = await instance.namesrv.get_route("Orders")
            assert route is not None
            if [bd.broker_addrs for bd in route.broker_datas] == [{1: "127.0.0.1:3"}]:
                break
            assert loop.time() < deadline, f"the master is still routed: {route.broker_datas}"
            await asyncio.sleep(0.05)
        with pytest.raises(NoRouteError, match="no broker master"):
            await instance.publish_info("Orders")
        # a topic no NameServer knows still borrows TBW102's route (auto-creation)
        info = await instance.publish_info("Fresh")
        assert {q.broker_name for q in info.queues} == {"other"}
    finally:
        await instance.shutdown()
        await brokers.close()
