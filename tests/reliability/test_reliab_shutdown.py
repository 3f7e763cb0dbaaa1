"""Issue 23 item 4: one SIGTERM always ends ``ferrymq broker`` / ``ferrymq namesrv`` within the
configured shutdownGraceSeconds, whatever the NameServer does (refusing, never answering, never
completing a connect), at
random moments (during start, right after a topic creation and one send); a second SIGTERM, or the
grace running out, forces the exit with a log line naming what was still running.
"""

from __future__ import annotations

import asyncio
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import ResponseCode
from ferrymq.remoting.eventloop import FORCED_EXIT_CODE
from reliab_helpers import (
    broker_conf,
    create_topic_request,
    hanging_connect_address,
    kill_leftover,
    refusing_address,
    send_request,
    silent_address,
    spawn,
    wait_exit,
    wait_ready,
    write_conf,
)
from subprocess_helpers import popen

GRACE = 6.0
# the interpreter's own exit after the loop ended (modules torn down, threads joined) on a
# loaded 2-core machine: not part of the service's stop, so not counted against the grace
EXIT_SLACK = 3.0
RACES = 25
# the NameServer refuses connections, accepts but never answers, or never completes a connect
MODES = ("refused", "silent", "hanging-connect")


async def _one_race(tmp: Path, index: int, rng: random.Random) -> str:
    mode = MODES[index % len(MODES)]
    if mode == "refused":
        sock, namesrv = refusing_address()
        holders = [sock]
    elif mode == "silent":
        sock, namesrv = silent_address()
        holders = [sock]
    else:
        holders, namesrv = hanging_connect_address()
    root = tmp / f"race-{index}"
    conf = write_conf(
        root / "broker.conf",
        broker_conf(
            root,
            namesrv,
            shutdownGraceSeconds=str(GRACE),
            # the registration loop retries at its shortest period
            registerNameServerPeriod="10000",
        ),
    )
    log = root / "broker.log"
    proc = spawn(["broker", "-c", str(conf)], log)
    moment = rng.choice(["starting", "after-send"])
    signalled_at = time.monotonic()
    try:
        if moment == "starting":
            await asyncio.sleep(rng.uniform(0.0, 1.5))  # a random moment, not synchronisation
        else:
            port = await asyncio.to_thread(wait_ready, proc, log)
            client = RemotingClient()
            try:
                addr = f"127.0.0.1:{port}"
                created = await client.invoke(addr, create_topic_request(f"Race{index}"), 10)
                assert created.code == ResponseCode.SUCCESS, created.remark
                # the send auto-creates a second topic (a re-registration is kicked) and the
                # signal lands while the broker handles it: the moment the cancellation of the
                # registration loop used to be swallowed
                send = asyncio.ensure_future(
                    client.invoke(addr, send_request(f"Race{index}Auto", b"x"), 10)
                )
                await asyncio.sleep(rng.uniform(0.0, 0.01))
                signalled_at = time.monotonic()
                proc.send_signal(signal.SIGTERM)
                await asyncio.wait((send,), timeout=GRACE)
                if send.done() and not send.exception():
                    assert send.result().code == ResponseCode.SUCCESS, send.result().remark
            finally:
                await client.close()
        if moment == "starting":
            signalled_at = time.monotonic()
            proc.send_signal(signal.SIGTERM)
        # the bound runs from the signal
        left = GRACE + EXIT_SLACK - (time.monotonic() - signalled_at)
        code = await asyncio.to_thread(wait_exit, proc, max(left, 0.0))
        text = log.read_text(errors="replace")
        assert code is not None, f"race {index} ({mode}, {moment}): still running: {text[-3000:]}"
        # -SIGTERM: the signal came before the handlers were installed (interpreter start-up)
        assert code in (0, -signal.SIGTERM), f"race {index}: exit {code}: {text[-3000:]}"
        assert "forcing exit" not in text, text[-3000:]
        return f"{mode}/{moment}/{code}"
    finally:
        kill_leftover(proc)
        for sock in holders:
            sock.close()


async def test_25_sigterm_races_each_end_within_the_grace(tmp_path: Path) -> None:
    rng = random.Random(20261124)
    outcomes: list[str] = []
    # four at a time: 25 interpreters one after another would cost minutes
    for start in range(0, RACES, 4):
        batch = range(start, min(start + 4, RACES))
        seeds = [random.Random(rng.random()) for _ in batch]
        outcomes += await asyncio.gather(
            *(_one_race(tmp_path, i, r) for i, r in zip(batch, seeds, strict=True))
        )
    assert len(outcomes) == RACES
    # both NameServer behaviours and both moments were exercised
    assert {o.split("/")[0] for o in outcomes} == set(MODES)
    assert {o.split("/")[1] for o in outcomes} == {"starting", "after-send"}


def test_second_sigterm_forces_exit_and_logs_what_ran(tmp_path: Path) -> None:
    """A NameServer that never answers holds the unregister (its share of a 60 s grace): a second
    SIGTERM cuts it short with exit code 3 and the unfinished work in the log."""
    holder, namesrv = silent_address()
    conf = write_conf(
        tmp_path / "broker.conf",
        broker_conf(
            tmp_path, namesrv, shutdownGraceSeconds="60", registerBrokerTimeoutMills="60000"
        ),
    )
    log = tmp_path / "broker.log"
    proc = spawn(["broker", "-c", str(conf)], log)
    try:
        wait_ready(proc, log)
        proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 30
        while "shutting down" not in log.read_text(errors="replace"):
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.02)  # polling a log file, with a deadline
        proc.send_signal(signal.SIGTERM)
        code = wait_exit(proc, 15)
        text = log.read_text(errors="replace")
        assert code == FORCED_EXIT_CODE, text[-3000:]
        assert "forcing exit (second SIGTERM received); still running:" in text
        assert "unregister_all" in text, text[-3000:]
    finally:
        kill_leftover(proc)
        holder.close()


HANGING_STOP = """
import asyncio, logging, sys
from ferrymq.remoting.eventloop import GracefulShutdown, run

async def main():
    shutdown = GracefulShutdown(float(sys.argv[1]), name="stand-in service")
    shutdown.install()
    print("ready", flush=True)
    await shutdown.requested.wait()
    # a stop that never ends (a stuck peer, a hung disk): only the grace can end the process
    await asyncio.create_task(asyncio.Event().wait(), name="stuck-stop-step")

logging.basicConfig(level=logging.INFO)
run(main())
"""


def test_grace_running_out_forces_exit(tmp_path: Path) -> None:
    proc = popen(
        [sys.executable, "-c", HANGING_STOP, "1.5"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == b"ready"
        proc.send_signal(signal.SIGTERM)
        code = wait_exit(proc, 1.5 + EXIT_SLACK + 5)
        assert code == FORCED_EXIT_CODE
        assert proc.stderr is not None
        err = proc.stderr.read().decode()
        assert "graceful stop did not end within 1.5s" in err
        assert "stuck-stop-step" in err
    finally:
        kill_leftover(proc)


@pytest.mark.parametrize("mode", ["refused", "silent"])
def test_namesrv_sigterm_ends_within_the_grace(tmp_path: Path, mode: str) -> None:
    """``ferrymq namesrv`` with a broker-like client that stopped reading mid-frame."""
    conf = write_conf(
        tmp_path / "namesrv.conf",
        {
            "listenPort": "0",
            "bindAddress": "127.0.0.1",
            "kvConfigPath": str(tmp_path / "kvConfig.json"),
            "shutdownGraceSeconds": str(GRACE),
        },
    )
    log = tmp_path / "namesrv.log"
    proc = spawn(["namesrv", "-c", str(conf)], log)
    try:
        port = wait_ready(proc, log)
        peer = socket.create_connection(("127.0.0.1", port))
        # half a frame: the NameServer holds a partial frame of this connection
        peer.sendall((1000).to_bytes(4, "big") + b"\x00" * 10)
        if mode == "silent":
            peer.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        proc.send_signal(signal.SIGTERM)
        code = wait_exit(proc, GRACE + EXIT_SLACK)
        assert code == 0, log.read_text()[-3000:]
        peer.close()
    finally:
        kill_leftover(proc)
