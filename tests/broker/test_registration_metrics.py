"""Registration with several independent NameServers, UNREGISTER_CLIENT, and the /metrics endpoint."""

from __future__ import annotations

import asyncio
import urllib.request
import zlib
from pathlib import Path

from broker_helpers import broker_configs
from ferrymq.broker.app import BrokerApp
from ferrymq.broker.metrics import BrokerCollector, MetricsServer
from ferrymq.broker.register import build_register_request
from ferrymq.namesrv.app import NamesrvApp
from ferrymq.namesrv.config import NamesrvConfig
from ferrymq.remoting.bodies import HeartbeatData, RegisterBrokerBody, TopicConfigSerializeWrapper
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode
from ferrymq.remoting.command import RemotingCommand


async def test_registers_with_every_namesrv_and_unregisters_on_stop(tmp_path: Path) -> None:
    servers = [
        NamesrvApp(
            NamesrvConfig(
                listen_port=0, bind_address="127.0.0.1", kv_config_path=tmp_path / f"kv{i}.json"
            )
        )
        for i in range(2)
    ]
    for ns in servers:
        await ns.start()
    # the second address is down: registration to the others must not suffer
    dead = "127.0.0.1:1"
    cfg, store_cfg = broker_configs(tmp_path / "b", ";".join([s.addr for s in servers] + [dead]))
    broker = BrokerApp(cfg, store_cfg)
    await broker.start()
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while not all(broker.addr in ns.routes.broker_live_table for ns in servers):
            assert loop.time() < deadline, "not registered with every NameServer"
            await asyncio.sleep(0.02)
        for ns in servers:
            route = ns.routes.pickup_topic_route_data("TBW102")
            assert route is not None and route.broker_datas[0].broker_addrs == {0: broker.addr}
    finally:
        await broker.stop()
    for ns in servers:
        assert broker.addr not in ns.routes.broker_live_table
        await ns.stop()


def test_register_request_carries_topics_and_crc(tmp_path: Path) -> None:
    cfg, _ = broker_configs(tmp_path, "127.0.0.1:9876")
    wrapper = TopicConfigSerializeWrapper.from_json_obj(
        {"topicConfigTable": {"T": {"topicName": "T", "readQueueNums": 2, "writeQueueNums": 2}}}
    )
    req = build_register_request(cfg, wrapper, "127.0.0.1:10912")
    assert req.code == RequestCode.REGISTER_BROKER
    assert req.ext_fields["brokerName"] == "broker-a" and req.ext_fields["brokerId"] == "0"
    assert req.ext_fields["haServerAddr"] == "127.0.0.1:10912"
    body = req.body_bytes()
    assert int(req.ext_fields["bodyCrc32"]) == zlib.crc32(body) & 0x7FFFFFFF
    parsed = RegisterBrokerBody.decode(body).topic_config_serialize_wrapper
    assert parsed.topic_config_table["T"].read_queue_nums == 2


async def test_unregister_client_leaves_group(broker: BrokerApp, client: RemotingClient) -> None:
    hb = HeartbeatData.from_json_obj(
        {
            "clientID": "u1",
            "producerDataSet": [{"groupName": "UP"}],
            "consumerDataSet": [{"groupName": "UG"}],
        }
    )
    await client.invoke(
        broker.addr, RemotingCommand.request(RequestCode.HEART_BEAT, None, hb.encode())
    )
    assert broker.consumers.get("UG") is not None and "UP" in broker.producers.table
    resp = await client.invoke(
        broker.addr,
        RemotingCommand.request(
            RequestCode.UNREGISTER_CLIENT,
            {"clientID": "u1", "producerGroup": "UP", "consumerGroup": "UG"},
        ),
    )
    assert resp.code == 0
    assert broker.consumers.get("UG") is None and "UP" not in broker.producers.table


async def test_metrics_endpoint_reports_live_figures(
    broker: BrokerApp, client: RemotingClient
) -> None:
    from test_send_pull import send_request

    for _ in range(3):
        assert (await client.invoke(broker.addr, send_request("MetricsT", b"m"))).code == 0
    server = MetricsServer("127.0.0.1", 0, BrokerCollector({"broker": "broker-a"}, broker.figures))
    server.start()
    try:
        url = f"http://127.0.0.1:{server.port}/metrics"
        text = await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=10).read())
    finally:
        server.stop()
    lines = text.decode().splitlines()
    assert 'ferrymq_broker_put_messages_total{broker="broker-a"} 3.0' in lines
    assert any(line.startswith('ferrymq_broker_topics{broker="broker-a"}') for line in lines)
    assert 'ferrymq_broker_writable{broker="broker-a"} 1.0' in lines
    assert 'ferrymq_broker_store_corrupt_records_skipped_total{broker="broker-a"} 0.0' in lines


async def test_vip_channel_on_listen_port_minus_two(tmp_path: Path) -> None:
    import socket

    from ferrymq.broker.local_cluster import pick_free_port
    from test_send_pull import send_request

    def free(port: int) -> bool:
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                return False
            return True

    port = pick_free_port("127.0.0.1")
    while not free(port - 2):
        port = pick_free_port("127.0.0.1")
    cfg, store_cfg = broker_configs(tmp_path / "vip", None)
    cfg.listen_port = port
    broker = BrokerApp(cfg, store_cfg)
    await broker.start()
    client = RemotingClient()
    try:
        for p in (port, port - 2):
            resp = await client.invoke(f"127.0.0.1:{p}", send_request("VipT", b"v"))
            assert resp.code == 0, resp.remark
    finally:
        await client.close()
        await broker.stop()
