"""A broker whose store host (brokerIP1) is IPv6 writes the v6 record layout, and pulls hand
those records to clients as stored: the client decodes the layout its sysFlag names. The
broker still listens on 127.0.0.1 (only its advertised address is IPv6)."""

from __future__ import annotations

from pathlib import Path

from broker_helpers import broker_configs
from ferrymq.broker.app import BrokerApp
from ferrymq.message import MessageSysFlag, decode_message_id
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.store.record import decode_messages
from test_send_pull import pull_all, send_request


async def test_ipv6_store_host_records_pull_and_view_by_id(tmp_path: Path) -> None:
    cfg, store_cfg = broker_configs(tmp_path / "b6", None)
    cfg = cfg.model_copy(update={"broker_ip1": "::1"})  # advertised only: it still binds 127.0.0.1
    app = BrokerApp(cfg, store_cfg)
    await app.start()
    client = RemotingClient()
    try:
        addr = f"127.0.0.1:{app.port}"
        resp = await client.invoke(addr, send_request("T6", b"hello", 0))
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        msg_id = resp.ext_fields["msgId"]
        assert len(msg_id) == 56  # 16 address bytes + port + offset, as upstream for IPv6
        assert decode_message_id(msg_id)[:2] == ("::1", app.port)
        pulled, bodies = await pull_all(client, addr, "T6", 0, 1)
        assert bodies == [b"hello"]
        (m,) = decode_messages(pulled.body_bytes())
        assert m.store_host == ("::1", app.port) and m.born_host[0] == "127.0.0.1"
        assert m.sys_flag & MessageSysFlag.STOREHOSTADDRESS_V6_FLAG
        assert not m.sys_flag & MessageSysFlag.BORNHOST_V6_FLAG
        view = await client.invoke(
            addr,
            RemotingCommand.request(
                RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(m.commit_log_offset)}
            ),
        )
        assert view.code == ResponseCode.SUCCESS, view.remark
        (viewed,) = decode_messages(view.body_bytes())
        assert (viewed.body, viewed.store_host) == (b"hello", ("::1", app.port))
    finally:
        await client.close()
        await app.stop()
