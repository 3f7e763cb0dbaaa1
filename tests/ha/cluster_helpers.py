"""Helpers for HA tests on real processes: a master + slave LocalCluster, runtime info, raw pulls."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path

import pulling
from ferrymq.broker.local_cluster import Child, LocalCluster
from ferrymq.client.broker_api import BrokerApi
from ferrymq.message import MessageExt
from ferrymq.remoting.bodies import KVTable
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.errors import RemotingError

_HA_PORT = re.compile(rb"HA \(\w+\) listening on port (\d+)")


def ha_cluster(
    data_dir: Path, role: str = "SYNC_MASTER", file_size: int = 1024 * 1024
) -> LocalCluster:
    """One broker group: a master (``role``) and one slave, SYNC_FLUSH, ports chosen by the OS."""
    return LocalCluster(
        data_dir,
        groups=1,
        slaves=1,
        namesrv_port=0,
        broker_port=0,
        flush_disk_type="SYNC_FLUSH",
        mapped_file_size_commit_log=file_size,
        # slave sync every 1 s instead of 10 s so a topic created on the master reaches the slave fast
        extra_conf={"brokerRole": role, "haSlaveSyncInterval": "1000"},
    )


def broker_addr(cluster: LocalCluster, index: int) -> str:
    return f"{cluster.host}:{cluster.brokers[index].port}"


def pin_ports(child: Child) -> None:
    """Make a restart of ``child`` reuse its ports: clients and its slave keep those addresses."""
    assert child.conf_path is not None
    text = child.conf_path.read_text().replace("listenPort=0\n", f"listenPort={child.port}\n")
    if "haListenPort=" not in text:
        match = _HA_PORT.search(child.log_path.read_bytes())
        assert match, f"no HA port in {child.log_path}"
        text += f"haListenPort={int(match.group(1))}\n"
    child.conf_path.write_text(text)


async def runtime_info(client: RemotingClient, addr: str) -> dict[str, str]:
    reply = await client.invoke(addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO))
    assert reply.code == ResponseCode.SUCCESS, reply.remark
    return dict(KVTable.decode(reply.body_bytes()).table)


async def wait_slave_connected(client: RemotingClient, master_addr: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            info = await runtime_info(client, master_addr)
            if info.get("haConnectionCount") == "1":
                return
        except (RemotingError, OSError):
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"no slave connected to {master_addr} within {timeout}s")
        await asyncio.sleep(0.1)


async def pull_queue(api: BrokerApi, addr: str, topic: str, queue_id: int) -> list[MessageExt]:
    """Every message of one queue on one broker, in queue order, by raw pulls."""
    return await pulling.pull_queue(api, addr, topic, queue_id, group="ha_checker")
