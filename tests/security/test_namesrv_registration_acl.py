"""REGISTER_BROKER / UNREGISTER_BROKER at a NameServer with aclEnable (real sockets, processes).

Upstream 4.9 and 5.x have no ACL on the NameServer: anyone who reaches port 9876 can register a
broker under any name and take over a topic's route. ferrymq's ACL NameServer admits a
registration (and an unregistration) only when an admin account signed it; the broker signs with
``innerClientAuthenticationCredentials`` (upstream 5.x key) or FERRYMQ_ACCESS_KEY/SECRET_KEY.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from ferrymq.acl.settings import AclSettings
from ferrymq.acl.signature import sign_fields
from ferrymq.broker.config import BrokerConfig
from ferrymq.broker.register import build_register_request
from ferrymq.client.admin import AdminClient
from ferrymq.namesrv.app import NamesrvApp
from ferrymq.namesrv.config import NamesrvConfig
from ferrymq.remoting.bodies import TopicConfig, TopicConfigSerializeWrapper
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.headers import UnRegisterBrokerRequestHeader
from security_helpers import ADMIN_AK, ADMIN_SK, APP_AK, APP_SK, PLAIN_ACL
from test_cli_security import Proc, cli

ROUTE_TOPIC = "payments"


@pytest.fixture
async def namesrv(tmp_path: Path) -> AsyncIterator[NamesrvApp]:
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(PLAIN_ACL)
    app = NamesrvApp(
        NamesrvConfig(listen_port=0, bind_address="127.0.0.1", kv_config_path=tmp_path / "kv.json"),
        acl_settings=AclSettings(acl_enable=True, acl_file_path=acl),
    )
    await app.start()
    yield app
    await app.stop()


def register(broker_name: str, addr: str, namesrv_addr: str) -> RemotingCommand:
    config = BrokerConfig(
        broker_cluster_name="Prod",
        broker_name=broker_name,
        broker_ip1=addr.split(":")[0],
        listen_port=int(addr.split(":")[1]),
        namesrv_addr=namesrv_addr,
    )
    wrapper = TopicConfigSerializeWrapper(
        topic_config_table={ROUTE_TOPIC: TopicConfig(topic_name=ROUTE_TOPIC)}
    )
    return build_register_request(config, wrapper, None)


def unregister(broker_name: str, addr: str) -> RemotingCommand:
    header = UnRegisterBrokerRequestHeader(
        broker_name=broker_name, broker_addr=addr, cluster_name="Prod", broker_id=0
    )
    return RemotingCommand.request(RequestCode.UNREGISTER_BROKER, header.to_ext())


def signed(request: RemotingCommand, ak: str, sk: str) -> RemotingCommand:
    sign_fields(request.ext_fields, request.body_bytes() or None, ak, sk)
    return request


async def routed_addrs(namesrv_addr: str) -> set[str]:
    async with AdminClient(namesrv_addr, timeout=5) as admin:
        info = await admin.cluster_info()
    return {a for data in info.broker_addr_table.values() for a in data.broker_addrs.values()}


async def test_registration_needs_an_admin_signature(namesrv: NamesrvApp) -> None:
    client = RemotingClient()
    try:
        real = "127.0.0.1:10911"
        ok = await client.invoke(
            namesrv.addr, signed(register("a", real, namesrv.addr), ADMIN_AK, ADMIN_SK)
        )
        assert ok.code == ResponseCode.SUCCESS, ok.remark
        assert await routed_addrs(namesrv.addr) == {real}

        # an attacker's broker, unsigned / signed by a non-admin / with a wrong secret
        hijack = "127.0.0.1:20911"
        unsigned = await client.invoke(namesrv.addr, register("a", hijack, namesrv.addr))
        assert unsigned.code == ResponseCode.NO_PERMISSION
        assert "carries no AccessKey" in (unsigned.remark or "")
        assert "innerClientAuthenticationCredentials" in (unsigned.remark or "")
        not_admin = await client.invoke(
            namesrv.addr, signed(register("a", hijack, namesrv.addr), APP_AK, APP_SK)
        )
        assert not_admin.code == ResponseCode.NO_PERMISSION
        assert "needs admin permission" in (not_admin.remark or "")
        forged = await client.invoke(
            namesrv.addr, signed(register("a", hijack, namesrv.addr), ADMIN_AK, "guess")
        )
        assert forged.code == ResponseCode.NO_PERMISSION
        assert "signature" in (forged.remark or "")
        assert await routed_addrs(namesrv.addr) == {real}  # the route is unchanged

        # unregistering takes the same signature
        refused = await client.invoke(namesrv.addr, unregister("a", real))
        assert refused.code == ResponseCode.NO_PERMISSION
        assert await routed_addrs(namesrv.addr) == {real}
        done = await client.invoke(namesrv.addr, signed(unregister("a", real), ADMIN_AK, ADMIN_SK))
        assert done.code == ResponseCode.SUCCESS, done.remark
        assert await routed_addrs(namesrv.addr) == set()
        assert namesrv.acl is not None
        assert namesrv.acl.refused[(int(RequestCode.REGISTER_BROKER), "no_access_key")] == 1
        assert namesrv.acl.refused[(int(RequestCode.UNREGISTER_BROKER), "no_access_key")] == 1
    finally:
        await client.close()


def test_brokers_register_through_the_cli_with_their_credentials(tmp_path: Path) -> None:
    (tmp_path / "plain_acl.yml").write_text(PLAIN_ACL)
    ns_conf = tmp_path / "namesrv.conf"
    ns_conf.write_text(f"aclEnable=true\naclFilePath={tmp_path / 'plain_acl.yml'}\n")
    namesrv = Proc(
        ["namesrv", "-c", str(ns_conf), "--listen-port", "0", "--bind", "127.0.0.1"], tmp_path
    )

    def broker_conf(name: str, extra: str) -> Path:
        conf = tmp_path / f"{name}.conf"
        conf.write_text(
            f"brokerClusterName=Prod\nbrokerName={name}\nbrokerIP1=127.0.0.1\n"
            f"bindAddress=127.0.0.1\nlistenPort=0\nnamesrvAddr={ns}\n"
            f"storePathRootDir={tmp_path / name}\nmappedFileSizeCommitLog=1048576\n{extra}"
        )
        return conf

    brokers: list[Proc] = []
    try:
        ns_port = namesrv.wait_line(r"NameServer ready on port (\d+)").group(1)
        ns = f"127.0.0.1:{ns_port}"
        pair = f'{{"accessKey":"{ADMIN_AK}","secretKey":"{ADMIN_SK}"}}'
        creds = f"innerClientAuthenticationCredentials={pair}\n"
        good = Proc(["broker", "-c", str(broker_conf("signed", creds))], tmp_path)
        brokers.append(good)
        port = good.wait_line(r"Broker signed ready on port (\d+)").group(1)
        bare = Proc(["broker", "-c", str(broker_conf("unsigned", ""))], tmp_path)
        brokers.append(bare)
        # the unsigned broker says why it is not in the routes
        line = bare.wait_line(r"refused registration \(code 16\).*")
        assert "innerClientAuthenticationCredentials" in line.group(0)

        async def addrs() -> set[str]:
            deadline = asyncio.get_running_loop().time() + 30
            while True:
                found = await routed_addrs(ns)
                if found or asyncio.get_running_loop().time() > deadline:
                    return found
                await asyncio.sleep(0.2)

        assert asyncio.run(addrs()) == {f"127.0.0.1:{port}"}

        # a bad credentials value stops the broker at start with a message naming the key
        bad = cli(
            [
                "broker",
                "-c",
                str(broker_conf("bad", "innerClientAuthenticationCredentials=ak:sk\n")),
            ]
        )
        assert bad.returncode == 2
        assert "innerClientAuthenticationCredentials" in bad.stdout + bad.stderr
    finally:
        for proc in brokers:
            proc.stop()
        namesrv.stop()
