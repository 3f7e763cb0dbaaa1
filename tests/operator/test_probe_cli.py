"""The probe the operator puts in its pods, against a real NameServer on 127.0.0.1 (port 0)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from ferrymq.cli.probe import Role, round_trip
from ferrymq.namesrv.app import NamesrvApp
from ferrymq.namesrv.config import NamesrvConfig


@pytest.fixture
async def namesrv(tmp_path: Path) -> AsyncIterator[NamesrvApp]:
    app = NamesrvApp(
        NamesrvConfig(
            listen_port=0,
            bind_address="127.0.0.1",
            rocketmq_home=tmp_path,
            kv_config_path=tmp_path / "kv.json",
        )
    )
    await app.start()
    yield app
    await app.stop()


async def test_round_trip_to_a_live_namesrv(namesrv: NamesrvApp) -> None:
    code = await round_trip(f"127.0.0.1:{namesrv.port}", Role.namesrv, timeout=3)
    assert isinstance(code, int)


async def test_probe_process_exit_codes(namesrv: NamesrvApp) -> None:
    """Run exactly what the pod's exec probe runs; exit 0 while serving, 1 when nothing listens."""
    argv = [sys.executable, "-m", "ferrymq.cli.probe", "--role", "namesrv", "--timeout", "5"]
    ok = await asyncio.create_subprocess_exec(
        *argv, "--addr", f"127.0.0.1:{namesrv.port}", stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    out, err = await asyncio.wait_for(ok.communicate(), 60)
    assert ok.returncode == 0, err.decode()
    assert b"answered" in out

    port = namesrv.port
    await namesrv.stop()
    down = await asyncio.create_subprocess_exec(
        *argv, "--addr", f"127.0.0.1:{port}", stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    _, err = await asyncio.wait_for(down.communicate(), 60)
    assert down.returncode == 1
    assert b"no answer" in err


async def test_probe_times_out_on_a_silent_server() -> None:
    """A listener that accepts but never answers (what a stuck event loop looks like) fails."""
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        with pytest.raises(TimeoutError):
            await round_trip(f"127.0.0.1:{port}", Role.broker, timeout=0.5)
    finally:
        server.close()
        await server.wait_closed()
