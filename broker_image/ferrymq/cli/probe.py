"""``ferrymq probe --addr HOST:PORT``: exit 0 when a NameServer or broker answers a request.

Used by the Kubernetes probes the operator writes (as ``python -m ferrymq.cli.probe``, which skips
loading the other subcommands). A TCP connect alone would pass even with a stuck event loop (the
kernel completes the handshake); a remoting round trip needs the server to actually serve. Any
answer counts, even REQUEST_CODE_NOT_SUPPORTED: the probe asks "are you serving", not "are you
healthy in every way". The request is read-only (GET_BROKER_RUNTIME_INFO / GET_NAMESRV_CONFIG).
"""

from __future__ import annotations

import asyncio
import enum
import math
import os
import signal
import sys
from typing import Annotated

import typer

from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.processor import ProcessorTable


class Role(enum.StrEnum):
    broker = "broker"
    namesrv = "namesrv"


REQUEST_OF_ROLE = {
    Role.broker: RequestCode.GET_BROKER_RUNTIME_INFO,
    Role.namesrv: RequestCode.GET_NAMESRV_CONFIG,
}


async def round_trip(addr: str, role: Role, timeout: float) -> int:
    """Send one read-only request; the response code (raises on no answer within ``timeout``)."""
    client = RemotingClient(ProcessorTable(), name="probe")
    try:
        request = RemotingCommand.request(REQUEST_OF_ROLE[role])
        response = await asyncio.wait_for(client.invoke(addr, request, timeout), timeout)
        return response.code
    finally:
        await client.close()


def _give_up(signum: int, frame: object) -> None:
    sys.stderr.write("probe: no answer before the hard deadline\n")
    os._exit(1)


def probe(
    addr: Annotated[str, typer.Option("--addr", help="host:port to probe")] = "127.0.0.1:10911",
    role: Annotated[Role, typer.Option("--role", help="what listens there")] = Role.broker,
    timeout: Annotated[float, typer.Option("--timeout", min=0.1, help="seconds")] = 3.0,
) -> None:
    """Exit 0 when the server at ADDR answers a remoting request within TIMEOUT seconds."""
    # A hard bound on the process itself: the kubelet does not kill an exec probe that outlives
    # its timeout, and on a loaded node such probes pile up and make the load worse.
    signal.signal(signal.SIGALRM, _give_up)
    signal.alarm(math.ceil(timeout) + 1)
    try:
        code = asyncio.run(round_trip(addr, role, timeout))
    except (OSError, TimeoutError, Exception) as error:  # any failure means "not serving"
        typer.echo(f"probe {addr}: no answer: {type(error).__name__}: {error}", err=True)
        raise typer.Exit(1) from error
    typer.echo(f"probe {addr}: answered (code {code})")


if __name__ == "__main__":
    typer.run(probe)
