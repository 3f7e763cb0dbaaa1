"""The latency floor of any three-process Python chain on this machine (no broker at all).

A producer process sends 1 KiB frames at a fixed rate (open loop, like the peers' ``latency_2000``)
to a relay process, which forwards each whole frame to a consumer process; the consumer records
send -> receive from the CLOCK_MONOTONIC stamp in the first 8 bytes of each frame. All three are
asyncio on uvloop over loopback TCP with TCP_NODELAY, and do nothing else: whatever p99 this shows
is the share of the e2e latency target (p99 <= 2 ms) that the machine itself takes, before any
broker work (ferrymq's chain is producer -> broker -> consumer, the same three hops).

    .venv/bin/python bench/loopback_floor.py [--rate 2000] [--seconds 10] [--json out.json]

``--rtt N`` also measures the floor of an acked single send: one client process sends a 1 KiB
frame to an echo process and waits for it before the next (one in flight, as ``produce_sync``),
N times, and reports round trips per second and the client's user/system CPU per round trip:
what any Python client and server pair pays here before doing any work of its own. It runs
twice: an asyncio client (as ``Producer``) and a blocking-socket client (as ``SyncProducer``,
and as the peers' redis-py and pika clients), both against the same uvloop echo process.

Every process is a child started here and stopped by its PID; the loop is bounded by count and time.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing as mp
import os
import socket
import struct
import time
from multiprocessing.connection import Connection
from typing import Any

FRAME = struct.Struct(">I")  # length prefix
STAMP = struct.Struct(">q")  # CLOCK_MONOTONIC ns, first 8 bytes of the payload
SIZE = 1024
WARMUP = 500  # samples dropped, as the peers do


class FrameReader(asyncio.Protocol):
    """Cuts length-prefixed frames out of the byte stream and hands each to ``on_frame``."""

    def __init__(self, on_frame: Any) -> None:
        self.buf = bytearray()
        self.on_frame = on_frame

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        pos = 0
        while len(self.buf) - pos >= FRAME.size:
            (n,) = FRAME.unpack_from(self.buf, pos)
            if len(self.buf) - pos - FRAME.size < n:
                break
            self.on_frame(bytes(self.buf[pos : pos + FRAME.size + n]))
            pos += FRAME.size + n
        del self.buf[:pos]


def _loop() -> asyncio.AbstractEventLoop:
    import uvloop

    return uvloop.new_event_loop()


def consumer(port_out: Connection, result_out: Connection, expect: int, deadline_s: float) -> None:
    loop = _loop()
    latencies: list[int] = []
    done = loop.create_future()

    def on_frame(frame: bytes) -> None:
        latencies.append(time.monotonic_ns() - STAMP.unpack_from(frame, FRAME.size)[0])
        if len(latencies) >= expect and not done.done():
            done.set_result(None)

    async def main() -> None:
        server = await loop.create_server(lambda: FrameReader(on_frame), "127.0.0.1", 0)
        port_out.send(server.sockets[0].getsockname()[1])
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done, deadline_s)
        server.close()

    loop.run_until_complete(main())
    result_out.send(latencies)


def relay(port_out: Connection, consumer_port: int, deadline_s: float) -> None:
    loop = _loop()

    async def main() -> None:
        downstream, _ = await loop.create_connection(
            lambda: FrameReader(lambda f: None), "127.0.0.1", consumer_port
        )
        server = await loop.create_server(lambda: FrameReader(downstream.write), "127.0.0.1", 0)
        port_out.send(server.sockets[0].getsockname()[1])
        await asyncio.sleep(deadline_s)

    loop.run_until_complete(main())


class Echo(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        self.transport.write(data)  # type: ignore[attr-defined]


def echo_server(port_out: Connection, deadline_s: float) -> None:
    loop = _loop()

    async def main() -> None:
        server = await loop.create_server(Echo, "127.0.0.1", 0)
        port_out.send(server.sockets[0].getsockname()[1])
        await asyncio.sleep(deadline_s)

    loop.run_until_complete(main())


class Waiter(asyncio.Protocol):
    """Completes ``pending`` once a whole echoed frame is back."""

    pending: asyncio.Future[None] | None = None
    want = 0
    got = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        self.got += len(data)
        if self.got >= self.want and self.pending is not None and not self.pending.done():
            self.pending.set_result(None)


def _rtt_result(name: str, count: int, wall: float, r0: Any, r1: Any) -> dict[str, Any]:
    return {
        "name": name,
        "round_trips": count,
        "round_trips_per_s": round(count / wall),
        "client_user_us_per_rtt": round(1e6 * (r1.ru_utime - r0.ru_utime) / count, 1),
        "client_sys_us_per_rtt": round(1e6 * (r1.ru_stime - r0.ru_stime) / count, 1),
        "load_average_1m": os.getloadavg()[0],
    }


def _rtt_blocking(port: int, count: int, warmup: int) -> dict[str, Any]:
    import resource

    frame = FRAME.pack(SIZE) + bytes(SIZE)
    buf = bytearray(len(frame))
    view = memoryview(buf)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        r0 = resource.getrusage(resource.RUSAGE_SELF)
        t0 = time.perf_counter()
        for i in range(warmup + count):
            if i == warmup:
                r0 = resource.getrusage(resource.RUSAGE_SELF)
                t0 = time.perf_counter()
            sock.sendall(frame)
            got = 0
            while got < len(frame):
                n = sock.recv_into(view[got:])
                if not n:
                    raise RuntimeError("the echo server closed the connection")
                got += n
        wall = time.perf_counter() - t0
        r1 = resource.getrusage(resource.RUSAGE_SELF)
    return _rtt_result("loopback_rtt_floor_blocking", count, wall, r0, r1)


def rtt(count: int, warmup: int = 500) -> list[dict[str, Any]]:
    import resource

    ctx = mp.get_context("spawn")
    port_r, port_w = ctx.Pipe(False)
    srv = ctx.Process(target=echo_server, args=(port_w, 120.0), daemon=True)
    srv.start()
    try:
        if not port_r.poll(30):
            raise RuntimeError("echo server did not start")
        port = port_r.recv()
        loop = _loop()

        async def main() -> dict[str, Any]:
            transport, proto = await loop.create_connection(Waiter, "127.0.0.1", port)
            frame = FRAME.pack(SIZE) + bytes(SIZE)
            r0 = resource.getrusage(resource.RUSAGE_SELF)
            t0 = time.perf_counter()
            for i in range(warmup + count):
                if i == warmup:
                    r0 = resource.getrusage(resource.RUSAGE_SELF)
                    t0 = time.perf_counter()
                proto.got, proto.want = 0, len(frame)
                proto.pending = loop.create_future()
                transport.write(frame)
                await asyncio.wait_for(proto.pending, 10)
            wall = time.perf_counter() - t0
            r1 = resource.getrusage(resource.RUSAGE_SELF)
            transport.close()
            return _rtt_result("loopback_rtt_floor", count, wall, r0, r1)

        return [loop.run_until_complete(main()), _rtt_blocking(port, count, warmup)]
    finally:
        if srv.is_alive() and srv.pid is not None:
            os.kill(srv.pid, 15)
        srv.join(5)


def percentile(values: list[int], q: float) -> float:
    return float(values[min(len(values) - 1, int(q * len(values)))]) if values else float("nan")


def run(rate: int, seconds: float) -> dict[str, Any]:
    count = int(rate * seconds)
    deadline = seconds + 30
    ctx = mp.get_context("spawn")
    c_port_r, c_port_w = ctx.Pipe(False)
    res_r, res_w = ctx.Pipe(False)
    r_port_r, r_port_w = ctx.Pipe(False)
    cons = ctx.Process(target=consumer, args=(c_port_w, res_w, count, deadline), daemon=True)
    cons.start()
    procs = [cons]
    try:
        if not c_port_r.poll(30):
            raise RuntimeError("consumer did not start")
        rel = ctx.Process(target=relay, args=(r_port_w, c_port_r.recv(), deadline), daemon=True)
        rel.start()
        procs.append(rel)
        if not r_port_r.poll(30):
            raise RuntimeError("relay did not start")
        relay_port = r_port_r.recv()
        loop = _loop()
        sent = loop.run_until_complete(_produce(loop, relay_port, rate, count, seconds))
        if not res_r.poll(deadline):
            raise RuntimeError("consumer did not report")
        received = res_r.recv()
        if len(received) < sent:
            raise RuntimeError(f"the consumer received {len(received)} of {sent} frames")
        latencies = sorted(received[WARMUP:])
    finally:
        for p in procs:  # stop what we started, by PID
            if p.is_alive() and p.pid is not None:
                os.kill(p.pid, 15)
            p.join(5)
    us = [v / 1000 for v in latencies]
    return {
        "name": f"loopback_floor_{rate}",
        "rate": rate,
        "sent": sent,
        "samples": len(us),
        "p50_us": round(percentile(latencies, 0.50) / 1000, 1),
        "p99_us": round(percentile(latencies, 0.99) / 1000, 1),
        "p999_us": round(percentile(latencies, 0.999) / 1000, 1),
        "max_us": round(max(us), 1) if us else None,
        "load_average_1m": os.getloadavg()[0],
    }


async def _produce(
    loop: asyncio.AbstractEventLoop, port: int, rate: int, count: int, seconds: float
) -> int:
    transport, _ = await loop.create_connection(
        lambda: FrameReader(lambda f: None), "127.0.0.1", port
    )
    body = bytearray(FRAME.pack(SIZE) + bytes(SIZE))
    interval = 1.0 / rate
    start = time.monotonic()
    sent = 0
    while sent < count and time.monotonic() - start < seconds + 5:
        due = start + sent * interval
        delay = due - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        STAMP.pack_into(body, FRAME.size, time.monotonic_ns())
        transport.write(bytes(body))
        sent += 1
    await asyncio.sleep(0.5)
    transport.close()
    return sent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=int, default=2000)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--json", default=None, help="also write the results here")
    ap.add_argument("--rtt", type=int, default=0, help="also N closed-loop round trips")
    args = ap.parse_args()
    results = []
    for _ in range(args.runs):
        r = run(args.rate, args.seconds)
        print(json.dumps(r), flush=True)
        results.append(r)
        if args.rtt:
            for r in rtt(args.rtt):
                print(json.dumps(r), flush=True)
                results.append(r)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"when": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "runs": results}, fh, indent=1)


if __name__ == "__main__":
    main()
