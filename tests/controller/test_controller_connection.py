"""A broker drops a controller connection that stopped answering (issue 34, item 2).

A call that times out leaves its connection in TCP retransmission backoff when the controller
is cut off; heartbeats queued behind it reached the controller only at the next retransmission,
about 24 s after the partition healed (``shared/evidence/partition-probe.md``, runs C and E).
Now the channel is aborted on a timeout (upstream ``clientCloseSocketIfTimeout``) and the next
call connects afresh. A real controller-like server on 127.0.0.1 that holds its first answer
shows it: the second call arrives on a new connection and is answered.
"""

from __future__ import annotations

import asyncio

import pytest
from ferrymq.broker.controller_client import BrokerIdentity, ControllerCallError, ControllerClient
from ferrymq.controller.protocol import ControllerRequestCode as Req
from ferrymq.controller.protocol import ReplicaInfo
from ferrymq.remoting.channel import Channel
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.server import RemotingServer


async def test_a_timed_out_controller_call_drops_its_connection() -> None:
    server = RemotingServer("127.0.0.1", 0, name="silent-controller")
    peers: list[str] = []
    release = asyncio.Event()

    async def heartbeat(channel: Channel, request: RemotingCommand) -> RemotingCommand:
        peers.append(channel.remote_addr)
        if len(peers) == 1:
            await release.wait()  # the first call is never answered in time
        info = ReplicaInfo(1, "127.0.0.1:1", "127.0.0.1:2", 1, frozenset({1}))
        return request.response(ResponseCode.SUCCESS, None, info.to_ext(), info.body())

    server.register(Req.BROKER_HEARTBEAT, heartbeat)
    await server.start()
    remoting = RemotingClient()
    addr = f"127.0.0.1:{server.port}"
    client = ControllerClient(remoting, [addr], BrokerIdentity("c", "g", 1, "127.0.0.1:1"))
    args = {"epoch": 1, "max_offset": 0, "timeout_ms": 10_000, "ha_addr": ""}
    try:
        with pytest.raises(ControllerCallError, match="connection dropped"):
            await client.heartbeat(**args)  # type: ignore[arg-type]
        assert remoting.open_channel(addr) is None
        info = await client.heartbeat(**args)  # type: ignore[arg-type]
        assert info.master_broker_id == 1
        assert len(peers) == 2 and peers[0] != peers[1], peers  # a new connection
    finally:
        release.set()
        await remoting.close()
        await server.stop()
