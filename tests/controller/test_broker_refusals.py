"""Bad controller-mode input at the broker: a conf without controllerAddr or with brokerId 0 is a
CLI error (exit 2, the key named); a broker the controller refuses (its group belongs to another
cluster) exits 2 with the controller's reason instead of serving."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
from ferrymq.controller.config import ControllerConfig
from ferrymq.controller.protocol import ControllerRequestCode as Req
from ferrymq.controller.server import ControllerServer
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.command import RemotingCommand


def conf(tmp_path: Path, **keys: str) -> Path:
    values = {
        "brokerClusterName": "c1",
        "brokerName": "g",
        "brokerId": "1",
        "brokerIP1": "127.0.0.1",
        "bindAddress": "127.0.0.1",
        "listenPort": "0",
        "fastChannelEnable": "false",
        "storePathRootDir": str(tmp_path / "store"),
        "enableControllerMode": "true",
        **keys,
    }
    path = tmp_path / "broker.conf"
    path.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
    return path


async def run_broker(path: Path, timeout: float = 60) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "ferrymq.cli.main",
        "broker",
        "-c",
        str(path),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise AssertionError("the broker kept running instead of refusing") from None
    return proc.returncode or 0, out.decode(errors="replace")


@pytest.mark.parametrize(
    ("keys", "words"),
    [
        ({"controllerAddr": "127.0.0.1:9"} | {"brokerId": "0"}, "brokerId"),
        ({}, "controllerAddr"),
        ({"controllerAddr": "nowhere"}, "controllerAddr"),
        (
            {
                "controllerAddr": "127.0.0.1:9",
                "controllerHeartBeatTimeoutMills": "1000",
                "brokerHeartbeatInterval": "500",
            },
            "controllerHeartBeatTimeoutMills",
        ),
    ],
)
async def test_bad_controller_mode_config_is_a_cli_error(
    tmp_path: Path, keys: dict[str, str], words: str
) -> None:
    code, out = await run_broker(conf(tmp_path, **keys))
    assert code == 2, out
    assert words in out, out


async def test_broker_refused_by_the_controller_exits_with_its_reason(tmp_path: Path) -> None:
    controller = ControllerServer(
        ControllerConfig(
            listen_port=0, bind_address="127.0.0.1", controller_store_path=tmp_path / "ctl"
        )
    )
    await controller.start()
    client = RemotingClient()
    try:
        addr = f"127.0.0.1:{controller.port}"
        reply = await client.invoke(
            addr,
            RemotingCommand.request(
                Req.CONTROLLER_REGISTER_BROKER,
                {
                    "clusterName": "c1",
                    "brokerName": "g",
                    "brokerId": 1,
                    "brokerAddr": "127.0.0.1:1",
                },
            ),
        )
        assert reply.code == 0, reply.remark
        code, out = await run_broker(
            conf(tmp_path, brokerClusterName="other", brokerId="2", controllerAddr=addr)
        )
        assert code == 2, out
        assert "controller refused" in out and "belongs to cluster c1" in out, out
        assert "ready on port" not in out
    finally:
        await client.close()
        await controller.stop()
