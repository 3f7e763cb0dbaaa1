"""ACL against a live broker and NameServer over real sockets on 127.0.0.1.

Every refusal is answered NO_PERMISSION (16) with a remark naming what was missing, on a
connection that stays open, and changes nothing on disk; a permitted client produces and
consumes; a change of plain_acl.yml is in force within seconds, without a restart; /metrics
counts refusals by code and reason.
"""

from __future__ import annotations

import hashlib
import socket
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from ferrymq.acl.settings import AclSettings
from ferrymq.acl.signature import sign_fields
from ferrymq.broker.app import BrokerApp
from ferrymq.broker.config import BrokerConfig
from ferrymq.broker.local_cluster import pick_free_port
from ferrymq.client.credentials import ClientSecurity, SessionCredentials
from ferrymq.client.instance import ClientInstance
from ferrymq.client.producer import Producer
from ferrymq.client.pull_consumer import PullConsumer
from ferrymq.message import Message, encode_properties
from ferrymq.namesrv.app import NamesrvApp
from ferrymq.namesrv.config import NamesrvConfig
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand, decode_command
from ferrymq.remoting.frame import FrameDecoder
from ferrymq.remoting.headers import SendMessageRequestHeader
from ferrymq.store.config import MessageStoreConfig
from security_helpers import ADMIN_AK, ADMIN_SK, APP_AK, APP_SK, PLAIN_ACL, wait_for


@pytest.fixture
def acl_file(tmp_path: Path) -> Path:
    path = tmp_path / "acl" / "plain_acl.yml"
    path.parent.mkdir()
    path.write_text(PLAIN_ACL)
    return path


@pytest.fixture
async def namesrv(tmp_path: Path, acl_file: Path) -> AsyncIterator[NamesrvApp]:
    app = NamesrvApp(
        NamesrvConfig(listen_port=0, bind_address="127.0.0.1", kv_config_path=tmp_path / "kv.json"),
        acl_settings=AclSettings(acl_enable=True, acl_file_path=acl_file),
    )
    await app.start()
    yield app
    await app.stop()


@pytest.fixture
async def broker(tmp_path: Path, namesrv: NamesrvApp, acl_file: Path) -> AsyncIterator[BrokerApp]:
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerPermission=6\n")
    cfg = BrokerConfig(
        broker_cluster_name="TestCluster",
        broker_name="broker-a",
        broker_ip1="127.0.0.1",
        bind_address="127.0.0.1",
        listen_port=0,
        namesrv_addr=namesrv.addr,
        metrics_port=pick_free_port("127.0.0.1"),
        broker_config_path=conf,
    )
    store = MessageStoreConfig(
        store_path_root_dir=tmp_path / "store",
        mapped_file_size_commit_log=1024 * 1024,
        mapped_file_size_consume_queue=20 * 1000,
    )
    app = BrokerApp(
        cfg,
        store,
        acl_settings=AclSettings(
            acl_enable=True,
            acl_file_path=acl_file,
            acl_reload_interval=0.1,
            # the ACL NameServer admits registrations signed by an admin account only
            inner_client_authentication_credentials=(
                f'{{"accessKey":"{ADMIN_AK}","secretKey":"{ADMIN_SK}"}}'
            ),
        ),
    )
    await app.start()
    yield app
    await app.stop()


@pytest.fixture
async def client() -> AsyncIterator[RemotingClient]:
    c = RemotingClient()
    yield c
    await c.close()


def send_v2(topic: str, body: bytes = b"hello", group: str = "pg") -> RemotingCommand:
    header = SendMessageRequestHeader(
        producer_group=group,
        topic=topic,
        queue_id=0,
        born_timestamp=1,
        properties=encode_properties({"WAIT": "true"}),
    )
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, header.to_ext_v2(), body)


def signed(request: RemotingCommand, ak: str = APP_AK, sk: str = APP_SK) -> RemotingCommand:
    sign_fields(request.ext_fields, request.body_bytes() or None, ak, sk)
    return request


def disk_digest(root: Path, *extra: Path) -> dict[str, str]:
    """Content digest of every store file (the checkpoint's flush timestamps aside)."""
    out: dict[str, str] = {}
    for path in [*sorted(root.rglob("*")), *extra]:
        if path.is_file() and path.name not in ("checkpoint", "abort", "lock"):
            out[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


async def test_refusals_answer_16_with_a_remark_and_change_nothing(
    broker: BrokerApp, client: RemotingClient, tmp_path: Path
) -> None:
    addr = broker.addr
    # a permitted send first, so the topic exists and the store has content to compare
    ok = await client.invoke(addr, signed(send_v2("allowed")))
    assert ok.code == ResponseCode.SUCCESS, ok.remark
    assert broker.store is not None
    conf = tmp_path / "broker.conf"
    await broker.persist_metadata()
    before = disk_digest(tmp_path / "store", conf)
    max_offset = broker.store.max_phy_offset
    topics_before = sorted(broker.topics.table)

    cases: list[tuple[str, RemotingCommand, str]] = [
        ("unsigned", send_v2("allowed"), "no AccessKey"),
        ("wrong signature", signed(send_v2("allowed"), sk="wrongSecret"), "signature"),
        ("unknown AccessKey", signed(send_v2("allowed"), ak="strangerKey"), "strangerKey"),
        (
            "topic without PUB",
            signed(send_v2("subOnly")),
            "no permission to access Topic:subOnly from",
        ),
        (
            "group without SUB",
            signed(
                RemotingCommand.request(
                    RequestCode.UPDATE_CONSUMER_OFFSET,
                    {
                        "consumerGroup": "deniedGroup",
                        "topic": "allowed",
                        "queueId": "0",
                        "commitOffset": "1",
                    },
                )
            ),
            "no permission to access Group:deniedGroup from",
        ),
        (
            "admin code without admin",
            signed(
                RemotingCommand.request(
                    RequestCode.UPDATE_AND_CREATE_TOPIC,
                    {
                        "topic": "newTopic",
                        "readQueueNums": "4",
                        "writeQueueNums": "4",
                        "perm": "6",
                        "topicFilterType": "SINGLE_TAG",
                    },
                )
            ),
            "needs admin permission",
        ),
        (
            "broker config without admin",
            signed(
                RemotingCommand.request(
                    RequestCode.UPDATE_BROKER_CONFIG, None, b"brokerPermission=4\n"
                )
            ),
            "needs admin permission",
        ),
    ]
    for name, request, needle in cases:
        response = await client.invoke(addr, request)
        assert response.code == ResponseCode.NO_PERMISSION, (name, response.code, response.remark)
        assert response.remark is not None and needle in response.remark, (name, response.remark)
    # the same connection served every refusal: it is still open
    assert client.open_channel(addr) is not None

    assert broker.store.max_phy_offset == max_offset
    assert sorted(broker.topics.table) == topics_before
    assert broker.config.broker_permission == 6
    await broker.persist_metadata()
    assert disk_digest(tmp_path / "store", conf) == before

    # the admin account may do what the app account may not
    admin = await client.invoke(
        addr,
        signed(
            RemotingCommand.request(
                RequestCode.UPDATE_AND_CREATE_TOPIC,
                {
                    "topic": "newTopic",
                    "readQueueNums": "4",
                    "writeQueueNums": "4",
                    "perm": "6",
                    "topicFilterType": "SINGLE_TAG",
                },
            ),
            ADMIN_AK,
            ADMIN_SK,
        ),
    )
    assert admin.code == ResponseCode.SUCCESS, admin.remark
    assert "newTopic" in broker.topics.table

    # refusals by code and reason on /metrics
    port = broker.metrics.port if broker.metrics else 0
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert (
        'ferrymq_acl_refused_requests_total{broker="broker-a",cluster="TestCluster",code="310",reason="no_access_key"} 1.0'
        in text
    )
    assert 'code="310",reason="bad_signature"} 1.0' in text
    assert 'code="310",reason="unknown_access_key"} 1.0' in text
    assert 'code="310",reason="no_topic_permission"} 1.0' in text
    assert 'code="15",reason="no_group_permission"} 1.0' in text
    assert 'code="17",reason="not_admin"} 1.0' in text
    assert 'code="25",reason="not_admin"} 1.0' in text


def raw_call_from(source_ip: str, addr: str, request: RemotingCommand) -> RemotingCommand:
    """One request over a blocking socket bound to ``source_ip`` (another loopback address)."""
    host, _, port = addr.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=5, source_address=(source_ip, 0)) as s:
        s.sendall(request.to_bytes())
        decoder = FrameDecoder()
        while True:
            data = s.recv(65536)
            assert data, "connection closed without an answer"
            frames = decoder.feed(data)
            if frames:
                return decode_command(frames[0])


async def test_global_white_list_admits_its_addresses_only(broker: BrokerApp) -> None:
    import asyncio

    addr = broker.addr
    inside = await asyncio.to_thread(raw_call_from, "127.0.0.2", addr, send_v2("anyTopic"))
    assert inside.code == ResponseCode.SUCCESS, inside.remark
    outside = await asyncio.to_thread(raw_call_from, "127.0.0.1", addr, send_v2("anyTopic"))
    assert outside.code == ResponseCode.NO_PERMISSION
    assert outside.remark is not None and "127.0.0.1" in outside.remark
    assert "globalWhiteRemoteAddresses" in outside.remark


async def test_permitted_client_produces_and_consumes(
    broker: BrokerApp, namesrv: NamesrvApp
) -> None:
    security = ClientSecurity(SessionCredentials(APP_AK, APP_SK))
    instance = ClientInstance(namesrv.addr, security=security)
    producer = Producer("pg", instance=instance)
    consumer = PullConsumer("cg", instance=instance)
    await producer.start()
    await consumer.start()
    try:
        sent = [await producer.send(Message("allowed", f"m{i}".encode())) for i in range(5)]
        assert all(r.msg_id for r in sent)
        got: list[bytes] = []
        for mq in await consumer.fetch_subscribe_message_queues("allowed"):
            result = await consumer.pull(mq, offset=0)
            got.extend(m.body for m in result.messages)
        assert sorted(got) == [f"m{i}".encode() for i in range(5)]
    finally:
        await consumer.shutdown()
        await producer.shutdown()
        await instance.shutdown()


async def test_unsigned_client_library_fails_with_no_permission(
    broker: BrokerApp, namesrv: NamesrvApp
) -> None:
    from ferrymq.client.errors import MQClientError

    instance = ClientInstance(namesrv.addr, security=ClientSecurity())
    producer = Producer("pg", instance=instance, retry_times_when_send_failed=0)
    await producer.start()
    try:
        # the route exists (created by a permitted send), the send itself is refused
        admin = RemotingClient()
        ok = await admin.invoke(broker.addr, signed(send_v2("allowed")))
        await admin.close()
        assert ok.code == ResponseCode.SUCCESS
        with pytest.raises(MQClientError, match="AccessKey"):
            await producer.send(Message("allowed", b"x"))
    finally:
        await producer.shutdown()
        await instance.shutdown()


async def test_file_change_is_reloaded_within_seconds(
    broker: BrokerApp, client: RemotingClient, acl_file: Path
) -> None:
    refused = await client.invoke(broker.addr, signed(send_v2("subOnly")))
    assert refused.code == ResponseCode.NO_PERMISSION
    assert broker.acl is not None
    reloads = broker.acl.reloads
    acl_file.write_text(PLAIN_ACL.replace("subOnly=SUB", "subOnly=PUB|SUB"))
    await wait_for(lambda: broker.acl is not None and broker.acl.reloads > reloads, 20, "reload")
    allowed = await client.invoke(broker.addr, signed(send_v2("subOnly")))
    assert allowed.code == ResponseCode.SUCCESS, allowed.remark

    # a broken file keeps the accounts in force and is counted
    failures = broker.acl.reload_failures
    acl_file.write_text("accounts: [")
    await wait_for(lambda: broker.acl is not None and broker.acl.reload_failures > failures, 20)
    still = await client.invoke(broker.addr, signed(send_v2("subOnly")))
    assert still.code == ResponseCode.SUCCESS, still.remark


async def test_namesrv_checks_admin_codes(namesrv: NamesrvApp, client: RemotingClient) -> None:
    put = RemotingCommand.request(
        RequestCode.PUT_KV_CONFIG, {"namespace": "ns", "key": "k", "value": "v"}
    )
    refused = await client.invoke(namesrv.addr, put)
    assert refused.code == ResponseCode.NO_PERMISSION
    assert refused.remark is not None and "AccessKey" in refused.remark
    not_admin = await client.invoke(
        namesrv.addr,
        signed(
            RemotingCommand.request(
                RequestCode.PUT_KV_CONFIG, {"namespace": "ns", "key": "k", "value": "v"}
            )
        ),
    )
    assert not_admin.code == ResponseCode.NO_PERMISSION
    assert not_admin.remark is not None and "admin" in not_admin.remark
    get = await client.invoke(
        namesrv.addr,
        RemotingCommand.request(RequestCode.GET_KV_CONFIG, {"namespace": "ns", "key": "k"}),
    )
    assert get.code != ResponseCode.SUCCESS  # nothing was written
    admin = await client.invoke(
        namesrv.addr,
        signed(
            RemotingCommand.request(
                RequestCode.PUT_KV_CONFIG, {"namespace": "ns", "key": "k", "value": "v"}
            ),
            ADMIN_AK,
            ADMIN_SK,
        ),
    )
    assert admin.code == ResponseCode.SUCCESS, admin.remark
    # route lookups stay open to unsigned clients (upstream clients send them unsigned)
    route = await client.invoke(
        namesrv.addr, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO)
    )
    assert route.code == ResponseCode.SUCCESS


def test_bad_acl_file_refuses_to_start(tmp_path: Path) -> None:
    import asyncio

    from ferrymq.acl.plain_config import AclConfigError

    bad = tmp_path / "plain_acl.yml"
    bad.write_text("accounts: [{accessKey: x, secretKey: y}]")
    app = NamesrvApp(
        NamesrvConfig(listen_port=0, bind_address="127.0.0.1", kv_config_path=tmp_path / "kv.json"),
        acl_settings=AclSettings(acl_enable=True, acl_file_path=bad),
    )
    with pytest.raises(AclConfigError, match="accessKey"):
        asyncio.run(app.start())


async def test_sync_producer_signs_its_blocking_sends(
    broker: BrokerApp, namesrv: NamesrvApp
) -> None:
    import asyncio

    from ferrymq.client.errors import MQClientError
    from ferrymq.client.sync_producer import SyncProducer

    def run(ak: str, sk: str) -> str:
        instance_security = ClientSecurity(SessionCredentials(ak, sk))
        # the producer's instance lives on the SyncProducer's own loop thread: built there
        with SyncProducer(
            "pg-sync",
            namesrv.addr,
            retry_times_when_send_failed=0,
            security=instance_security,
        ) as producer:
            return producer.send(Message("allowed", b"sync")).msg_id

    assert await asyncio.to_thread(run, APP_AK, APP_SK)
    with pytest.raises(MQClientError, match="signature"):
        await asyncio.to_thread(run, APP_AK, "wrongSecret")
