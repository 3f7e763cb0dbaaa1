"""A live NameServer on 127.0.0.1 (port 0) served through the raw remoting client."""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import AsyncIterator

import orjson
import pytest
from ferrymq.namesrv.app import NamesrvApp
from ferrymq.remoting.bodies import (
    ClusterInfo,
    DataVersion,
    RegisterBrokerBody,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicList,
    TopicRouteData,
)
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.headers import RegisterBrokerRequestHeader, UnRegisterBrokerRequestHeader


@pytest.fixture
async def client() -> AsyncIterator[RemotingClient]:
    c = RemotingClient()
    yield c
    await c.close()


def register_request(
    name: str,
    addr: str,
    bid: int,
    *topics: str,
    crc: bool = True,
    state_version: int = 0,
) -> RemotingCommand:
    body = RegisterBrokerBody(
        topic_config_serialize_wrapper=TopicConfigSerializeWrapper(
            topic_config_table={
                t: TopicConfig(topic_name=t, read_queue_nums=4, write_queue_nums=4) for t in topics
            },
            data_version=DataVersion(timestamp=1, counter=1, state_version=state_version),
        )
    ).encode()
    header = RegisterBrokerRequestHeader(
        broker_name=name,
        broker_addr=addr,
        cluster_name="c",
        broker_id=bid,
        ha_server_addr=addr,
        body_crc32=(zlib.crc32(body) & 0x7FFFFFFF) if crc else 0,
    )
    return RemotingCommand.request(RequestCode.REGISTER_BROKER, header.to_ext(), body)


async def test_register_then_route_then_unregister(
    namesrv: NamesrvApp, client: RemotingClient
) -> None:
    resp = await client.invoke(namesrv.addr, register_request("b1", "127.0.0.1:1", 0, "T"))
    assert resp.code == ResponseCode.SUCCESS, resp.remark

    route_req = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"})
    resp = await client.invoke(namesrv.addr, route_req)
    assert resp.code == ResponseCode.SUCCESS
    raw = orjson.loads(resp.body_bytes())
    assert raw["brokerDatas"] == [
        {"cluster": "c", "brokerName": "b1", "brokerAddrs": {"0": "127.0.0.1:1"}}
    ]
    assert TopicRouteData.decode(resp.body_bytes()).queue_datas[0].write_queue_nums == 4

    info = await client.invoke(
        namesrv.addr, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO)
    )
    assert ClusterInfo.decode(info.body_bytes()).cluster_addr_table == {"c": ["b1"]}
    topics = await client.invoke(
        namesrv.addr, RemotingCommand.request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
    )
    assert TopicList.decode(topics.body_bytes()).topic_list == ["T"]

    unreg = UnRegisterBrokerRequestHeader(
        broker_name="b1", broker_addr="127.0.0.1:1", cluster_name="c", broker_id=0
    )
    resp = await client.invoke(
        namesrv.addr, RemotingCommand.request(RequestCode.UNREGISTER_BROKER, unreg.to_ext())
    )
    assert resp.code == ResponseCode.SUCCESS
    resp = await client.invoke(namesrv.addr, route_req)
    assert resp.code == ResponseCode.TOPIC_NOT_EXIST
    assert resp.remark and "T" in resp.remark


async def test_bad_input_gets_clear_errors(namesrv: NamesrvApp, client: RemotingClient) -> None:
    resp = await client.invoke(
        namesrv.addr, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {})
    )
    assert resp.code == ResponseCode.SYSTEM_ERROR and "'topic'" in (resp.remark or "")
    bad = register_request("b1", "127.0.0.1:1", 0, "T")
    bad.body = b"{not json"
    bad.ext_fields["bodyCrc32"] = "0"
    resp = await client.invoke(namesrv.addr, bad)
    assert resp.code == ResponseCode.SYSTEM_ERROR and "not JSON" in (resp.remark or "")
    corrupt = register_request("b1", "127.0.0.1:1", 0, "T")
    corrupt.ext_fields["bodyCrc32"] = "12345"
    resp = await client.invoke(namesrv.addr, corrupt)
    assert resp.code == ResponseCode.SYSTEM_ERROR and "CRC" in (resp.remark or "")
    resp = await client.invoke(namesrv.addr, RemotingCommand.request(4242))
    assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    # still serving
    resp = await client.invoke(namesrv.addr, register_request("b1", "127.0.0.1:1", 0, "T"))
    assert resp.code == ResponseCode.SUCCESS


async def test_closed_broker_connection_drops_its_routes(namesrv: NamesrvApp) -> None:
    broker_conn = RemotingClient()
    resp = await broker_conn.invoke(namesrv.addr, register_request("b9", "127.0.0.1:9", 0, "Z"))
    assert resp.code == ResponseCode.SUCCESS
    assert namesrv.routes.pickup_topic_route_data("Z") is not None
    await broker_conn.close()
    deadline = asyncio.get_running_loop().time() + 5
    while namesrv.routes.pickup_topic_route_data("Z") is not None:
        assert asyncio.get_running_loop().time() < deadline, "routes of a closed broker kept"
        await asyncio.sleep(0.01)


async def test_slave_registration_returns_master(
    namesrv: NamesrvApp, client: RemotingClient
) -> None:
    await client.invoke(namesrv.addr, register_request("b1", "127.0.0.1:1", 0, "T"))
    resp = await client.invoke(namesrv.addr, register_request("b1", "127.0.0.1:2", 1, "T"))
    assert resp.ext_fields["masterAddr"] == "127.0.0.1:1"
    assert resp.ext_fields["haServerAddr"] == "127.0.0.1:1"


async def test_kv_config_roundtrip_and_order_conf_in_route(
    namesrv: NamesrvApp, client: RemotingClient
) -> None:
    put = RemotingCommand.request(
        RequestCode.PUT_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG", "key": "T", "value": "b1:4"}
    )
    assert (await client.invoke(namesrv.addr, put)).code == ResponseCode.SUCCESS
    get = RemotingCommand.request(
        RequestCode.GET_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG", "key": "T"}
    )
    assert (await client.invoke(namesrv.addr, get)).ext_fields["value"] == "b1:4"
    await client.invoke(namesrv.addr, register_request("b1", "127.0.0.1:1", 0, "T"))
    resp = await client.invoke(
        namesrv.addr, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"})
    )
    assert orjson.loads(resp.body_bytes())["orderTopicConf"] == "b1:4"


async def test_a_registration_with_an_older_master_epoch_is_ignored(
    namesrv: NamesrvApp, client: RemotingClient
) -> None:
    """Upstream 5.x ``RouteInfoManager.registerBroker``: brokerId 0 held by a live broker with a
    higher ``stateVersion`` (controller mode: the master epoch) stays. Before, a master cut off
    and replaced (epoch 1) re-registered as brokerId 0 after the heal, overwrote the new master
    (epoch 2), then registered as a slave and so removed brokerId 0: no master in the route
    (issue 34)."""
    old, new = "127.0.0.1:1", "127.0.0.1:2"
    await client.invoke(namesrv.addr, register_request("b1", old, 0, "T", state_version=1))
    await client.invoke(namesrv.addr, register_request("b1", new, 1, "T", state_version=1))
    # the election: the new master registers as 0 (epoch 2)
    await client.invoke(namesrv.addr, register_request("b1", new, 0, "T", state_version=2))
    route_req = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"})

    async def addrs() -> dict[str, str]:
        resp = await client.invoke(namesrv.addr, route_req)
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        data: dict[str, str] = orjson.loads(resp.body_bytes())["brokerDatas"][0]["brokerAddrs"]
        return data

    assert await addrs() == {"0": new}
    # the old master, back from its partition, still thinks it is master of epoch 1
    resp = await client.invoke(namesrv.addr, register_request("b1", old, 0, "T", state_version=1))
    assert resp.code == ResponseCode.SUCCESS, resp.remark  # ignored, as upstream, not refused
    assert await addrs() == {"0": new}
    # then it learns of epoch 2 and registers as a slave: the master entry stays
    await client.invoke(namesrv.addr, register_request("b1", old, 1, "T", state_version=2))
    assert await addrs() == {"0": new, "1": old}
    # an equal or newer epoch replaces the holder (a later election)
    await client.invoke(namesrv.addr, register_request("b1", old, 0, "T", state_version=3))
    assert await addrs() == {"0": old}
