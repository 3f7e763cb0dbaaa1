"""The unmodified upstream C++ client (rocketmq==0.4.4, ``set_session_credentials``) against an
ACL-enabled NameServer and broker: with credentials it produces and consumes, without them (or
with a wrong secret) every send is refused. Each C++ client runs in its own process."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from ferrymq.acl.settings import AclSettings
from ferrymq.broker.app import BrokerApp
from ferrymq.broker.config import BrokerConfig
from ferrymq.namesrv.app import NamesrvApp
from ferrymq.namesrv.config import NamesrvConfig
from ferrymq.store.config import MessageStoreConfig

pytestmark = pytest.mark.interop
pytest.importorskip(
    "rocketmq.client", reason="the upstream C++ client rocketmq==0.4.4 is not installed"
)

CPP = Path(__file__).with_name("cpp_acl_client.py")
AK = "cppAccess01"
SK = "cppSecret001"
ACL = f"""\
accounts:
  - accessKey: {AK}
    secretKey: {SK}
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms:
      - CppAclTopic=PUB|SUB
    groupPerms:
      - CID_cpp_acl=SUB
  - accessKey: brokerAdmin01
    secretKey: brokerSecret01
    admin: true
"""


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[tuple[NamesrvApp, BrokerApp]]:
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL)
    # the broker registers with the ACL NameServer as an admin account
    creds = '{"accessKey":"brokerAdmin01","secretKey":"brokerSecret01"}'
    settings = AclSettings(
        acl_enable=True, acl_file_path=acl, inner_client_authentication_credentials=creds
    )
    namesrv = NamesrvApp(
        NamesrvConfig(listen_port=0, bind_address="127.0.0.1", kv_config_path=tmp_path / "kv"),
        acl_settings=settings,
    )
    await namesrv.start()
    broker = BrokerApp(
        BrokerConfig(
            broker_cluster_name="AclCluster",
            broker_name="broker-acl",
            broker_ip1="127.0.0.1",
            bind_address="127.0.0.1",
            listen_port=0,
            namesrv_addr=namesrv.addr,
        ),
        MessageStoreConfig(
            store_path_root_dir=tmp_path / "store",
            mapped_file_size_commit_log=4 * 1024 * 1024,
            mapped_file_size_consume_queue=20 * 1000,
        ),
        acl_settings=settings,
    )
    await broker.start()
    # the route must be known before the C++ client asks for it: wait for the registration
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10
    while "broker-acl" not in namesrv.routes.broker_addr_table:
        assert loop.time() < deadline, "the broker never registered"
        await asyncio.sleep(0.05)
    yield namesrv, broker
    await broker.stop()
    await namesrv.stop()


async def run_cpp(
    args: list[str], home: Path, creds: tuple[str, str] | None, timeout: float = 90
) -> tuple[int, list[dict[str, object]]]:
    env = dict(os.environ, HOME=str(home))
    env.pop("CPP_ACCESS_KEY", None)
    if creds is not None:
        env["CPP_ACCESS_KEY"], env["CPP_SECRET_KEY"] = creds
    proc = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, str(CPP), *args],
        capture_output=True,
        timeout=timeout,
        env=env,
        check=False,
    )
    events = [
        json.loads(line)
        for line in proc.stdout.decode(errors="replace").splitlines()
        if line.startswith("{")
    ]
    if proc.returncode not in (0, 3):
        raise AssertionError(f"C++ client crashed ({proc.returncode}): {proc.stderr[-2000:]!r}")
    return proc.returncode, events


async def test_cpp_client_with_credentials_against_acl_broker(
    cluster: tuple[NamesrvApp, BrokerApp], tmp_path: Path
) -> None:
    namesrv, broker = cluster
    # create the topic through a permitted path: the C++ producer's first send auto-creates it
    rc, events = await run_cpp(["produce", namesrv.addr, "CppAclTopic", "5"], tmp_path, (AK, SK))
    sent = [e for e in events if "sent" in e]
    assert len(sent) == 5 and all(e["status"] == 0 for e in sent), events

    assert broker.acl is not None
    refused_before = sum(broker.acl.refused.values())
    _, events = await run_cpp(["produce", namesrv.addr, "CppAclTopic", "2"], tmp_path, None)
    assert not [e for e in events if "sent" in e], events
    assert len([e for e in events if "error" in e]) == 2
    _, events = await run_cpp(
        ["produce", namesrv.addr, "CppAclTopic", "1"], tmp_path, (AK, "wrongSecret1")
    )
    assert not [e for e in events if "sent" in e], events
    assert sum(broker.acl.refused.values()) > refused_before

    rc, events = await run_cpp(
        ["consume", namesrv.addr, "CppAclTopic", "CID_cpp_acl", "5", "60"], tmp_path, (AK, SK)
    )
    bodies = {e["body"] for e in events if "body" in e}
    assert bodies == {f"acl-body-{i}" for i in range(5)}, events
    assert rc == 0
