"""Produce/consume/latency measurements against a running cluster (``ferrymq bench ...`` and
``bench/cluster_bench.py``), shaped like the peer benchmarks in ``shared/bench/peers`` so the figures
compare: 1 KiB messages, loops bounded by a message count *and* a time cap.

- ``produce_sync``: one producer, one message in flight, each send acknowledged;
  ``produce_blocking``: the same from a ``SyncProducer`` in a thread of its own, no event loop
  (like the peers' blocking clients, redis-py and pika).
- ``produce_batched``: SEND_BATCH_MESSAGE requests of ``batch`` messages, ``window`` requests in
  flight; ``produce_async``: single async sends with ``window`` in flight.
- ``drain``: a push consumer reads a backlog from the first offset until ``expected`` messages
  arrived (acks are the consumer offsets it commits, batched as upstream does).
- ``latency``: an open-loop producer at a fixed rate writes CLOCK_MONOTONIC into the first 8 body
  bytes; a consumer in another process records send->receive; the first 500 samples are dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
import struct
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ferrymq.client.broker_api import PullResult, SendResult
from ferrymq.client.consume_service import ConsumeContext
from ferrymq.client.producer import Producer
from ferrymq.client.push_consumer import PushConsumer
from ferrymq.client.sync_producer import SyncProducer
from ferrymq.message import Message, MessageExt
from ferrymq.remoting.bodies import ConsumeFromWhere

_TS = struct.Struct(">q")


@dataclass
class Throughput:
    name: str
    messages: int
    seconds: float
    errors: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.messages / self.seconds if self.seconds > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "msgs_per_s": round(self.rate, 1)}


@dataclass
class Latency:
    name: str
    target_rate: int
    achieved_rate: float
    samples: int
    p50_us: float
    p99_us: float
    p999_us: float
    breakdown: dict[str, dict[str, Any]] | None = None

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if self.breakdown is None:
            del out["breakdown"]
        return out


def payload(size: int, i: int = 0) -> bytes:
    head = _TS.pack(i)
    return head + b"x" * max(0, size - len(head))


async def produce_sync(
    producer: Producer,
    topic: str,
    *,
    size: int = 1024,
    max_count: int = 50_000,
    max_seconds: float = 8.0,
) -> Throughput:
    body = payload(size)
    sent = errors = 0
    begin = time.perf_counter()
    deadline = begin + max_seconds
    while sent < max_count and time.perf_counter() < deadline:
        try:
            await producer.send(Message(topic, body))
            sent += 1
        except Exception:
            errors += 1
            if errors > 100:
                break
    return Throughput("produce_sync", sent, time.perf_counter() - begin, errors)


def produce_blocking(
    producer: SyncProducer,
    topic: str,
    *,
    size: int = 1024,
    max_count: int = 50_000,
    max_seconds: float = 8.0,
) -> Throughput:
    """``produce_sync`` through a blocking producer: call it from a thread that may block."""
    body = payload(size)
    sent = errors = 0
    begin = time.perf_counter()
    deadline = begin + max_seconds
    while sent < max_count and time.perf_counter() < deadline:
        try:
            producer.send(Message(topic, body))
            sent += 1
        except Exception:
            errors += 1
            if errors > 100:
                break
    return Throughput("produce_blocking", sent, time.perf_counter() - begin, errors)


async def produce_batched(
    producer: Producer,
    topic: str,
    *,
    size: int = 1024,
    total: int = 200_000,
    batch: int = 64,
    window: int = 16,
    max_seconds: float = 150.0,
) -> Throughput:
    """``window`` batch requests in flight (about ``batch * window`` messages unacknowledged)."""
    body = payload(size)
    sent = errors = 0
    in_flight: set[asyncio.Task[SendResult]] = set()
    begin = time.perf_counter()
    deadline = begin + max_seconds
    queued = 0
    while queued < total and time.perf_counter() < deadline:
        n = min(batch, total - queued)
        msgs = [Message(topic, body) for _ in range(n)]
        in_flight.add(producer.send_batch_async(msgs))
        queued += n
        if len(in_flight) >= window:
            done, in_flight = await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
            for t in done:
                if t.exception() is None:
                    sent += len(t.result().msg_id.split(","))
                else:
                    errors += 1
    for outcome in await asyncio.gather(*in_flight, return_exceptions=True):
        if isinstance(outcome, SendResult):
            sent += len(outcome.msg_id.split(","))
        else:
            errors += 1
    return Throughput(
        "produce_batched",
        sent,
        time.perf_counter() - begin,
        errors,
        {"batch": batch, "window": window},
    )


async def produce_async(
    producer: Producer,
    topic: str,
    *,
    size: int = 1024,
    total: int = 100_000,
    window: int = 1000,
    max_seconds: float = 150.0,
) -> Throughput:
    body = payload(size)
    sent = errors = 0
    slots = asyncio.Semaphore(window)

    def done(result: SendResult | None, exc: BaseException | None) -> None:
        nonlocal sent, errors
        slots.release()
        if exc is None:
            sent += 1
        else:
            errors += 1

    begin = time.perf_counter()
    deadline = begin + max_seconds
    queued = 0
    while queued < total and time.perf_counter() < deadline:
        await slots.acquire()
        producer.send_async(Message(topic, body), done)
        queued += 1
    for _ in range(window):
        await slots.acquire()
    return Throughput(
        "produce_async", sent, time.perf_counter() - begin, errors, {"window": window}
    )


async def drain(
    namesrv: list[str], topic: str, group: str, expected: int, *, max_seconds: float = 150.0
) -> Throughput:
    received = 0
    done = asyncio.Event()

    async def on_messages(msgs: list[MessageExt], ctx: ConsumeContext) -> None:
        nonlocal received
        received += len(msgs)
        if received >= expected:
            done.set()

    consumer = PushConsumer(
        group,
        namesrv,
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        consume_batch_max_size=32,
        consume_thread_max=4,
    )
    consumer.subscribe(topic, "*")
    consumer.register_listener(on_messages)
    begin = time.perf_counter()
    await consumer.start()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(done.wait(), max_seconds)
    elapsed = time.perf_counter() - begin
    await consumer.shutdown()
    return Throughput(
        "consume_drain", received, elapsed, 0 if received >= expected else expected - received
    )


def percentile(sorted_values: list[int], q: float) -> float:
    if not sorted_values:
        return float("nan")
    idx = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return float(sorted_values[idx])


async def latency_consumer(
    namesrv: list[str],
    topic: str,
    group: str,
    out: Path,
    expected: int,
    max_seconds: float,
    breakdown: bool = False,
) -> None:
    """Runs in its own process: record receive - send (ns) of every message into ``out``.

    With ``breakdown``, also where each message waited (see :func:`latency_breakdown`): the
    broker's store timestamp (wall-clock ms) and the moment its pull response was decoded."""
    samples: list[int] = []
    stages: list[tuple[int, int, int]] = []  # (store - send, pulled - send, callback - send) ns
    done = asyncio.Event()
    pulled_at: dict[int, int] = {}  # id(message) -> monotonic ns its pull response was decoded
    # CLOCK_MONOTONIC is machine-wide, the store timestamp is wall-clock ms: one offset maps them
    wall_minus_mono = time.time_ns() - time.monotonic_ns()

    def on_messages(msgs: list[MessageExt], ctx: ConsumeContext) -> None:
        now = time.monotonic_ns()
        for m in msgs:
            sent = _TS.unpack_from(m.body)[0]
            samples.append(now - sent)
            if breakdown:
                # the store stamps whole ms: +0.5 ms centres the truncation
                stored = m.store_timestamp * 1_000_000 + 500_000 - wall_minus_mono
                stages.append((stored - sent, pulled_at.pop(id(m), now) - sent, now - sent))
        if len(samples) >= expected:
            done.set()

    consumer = PushConsumer(
        group,
        namesrv,
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
        run_sync_listener_in_thread=False,
        consume_thread_max=1,
        consume_batch_max_size=32,
    )
    consumer.subscribe(topic, "*")
    consumer.register_listener(on_messages)
    if breakdown:
        _time_pulls(consumer, pulled_at)
    await consumer.start()
    # as the broker does after start-up: what start-up built lives as long as the process, so a
    # full collection need not walk it (one such walk stalled this consumer 30-74 ms per run)
    gc.freeze()
    ready = out.with_suffix(".ready")
    ready.write_text(str(sorted(consumer.owned_queues())))
    cpu0 = time.process_time()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(done.wait(), max_seconds)
    cpu_us = (time.process_time() - cpu0) * 1e6
    await consumer.shutdown()
    if breakdown:
        cpu = round(cpu_us / len(samples), 1) if samples else None
        out.write_text(json.dumps({"samples": samples, "stages": stages, "cpu_us_per_msg": cpu}))
    else:
        out.write_text(json.dumps(samples))


def _time_pulls(consumer: PushConsumer, pulled_at: dict[int, int]) -> None:
    """Breakdown mode only: note when each pulled message's response was decoded (wraps the
    consumer's pull call; measurement code, not used by the normal latency case)."""
    api = consumer.instance.broker
    pull = api.pull_message

    async def timed(addr: str, header: Any, timeout: float) -> PullResult:
        result = await pull(addr, header, timeout)
        now = time.monotonic_ns()
        for m in result.messages:
            pulled_at[id(m)] = now
        return result

    api.pull_message = timed  # type: ignore[method-assign]


def latency_breakdown(stages: list[tuple[int, int, int]]) -> dict[str, dict[str, Any]]:
    """p50/p99/mean (us) of each slice: send->store (producer + broker append, ms-resolution
    store stamp), store->pulled (reput, held-pull wake-up, read, response, client read + decode),
    pulled->callback (ProcessQueue, consume dispatch) and the total."""
    slices = {
        "send_to_store": [s for s, _, _ in stages],
        "store_to_pulled": [p - s for s, p, _ in stages],
        "pulled_to_callback": [c - p for _, p, c in stages],
        "total": [c for _, _, c in stages],
    }
    out: dict[str, dict[str, Any]] = {}
    for name, values in slices.items():
        us = sorted(v // 1000 for v in values)
        out[name] = {
            "p50_us": percentile(us, 0.5),
            "p99_us": percentile(us, 0.99),
            "mean_us": round(sum(us) / len(us), 1) if us else float("nan"),
        }
    return out


async def latency(
    producer: Producer,
    namesrv: list[str],
    topic: str,
    workdir: Path,
    *,
    rate: int = 2000,
    seconds: float = 10.0,
    size: int = 1024,
    warmup: int = 500,
    breakdown: bool = False,
) -> Latency:
    total = int(rate * seconds)
    out = workdir / "latency-samples.json"
    out.unlink(missing_ok=True)
    out.with_suffix(".ready").unlink(missing_ok=True)
    group = f"bench_latency_{os.getpid()}_{time.monotonic_ns()}"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ferrymq.client.benchmark",
            "latency-consumer",
            ";".join(namesrv),
            topic,
            group,
            str(out),
            str(total),
            str(seconds + 60),
            *(["breakdown"] if breakdown else []),
        ],
    )
    try:
        deadline = time.monotonic() + 60
        while not out.with_suffix(".ready").exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("latency consumer did not start")
            await asyncio.sleep(0.05)
        await asyncio.sleep(1.0)  # let its long polls reach the broker before the clock starts
        # the bench process still holds earlier phases' objects: freeze them so a full collection
        # during the open loop walks only what this phase allocates (27-235 ms stalls before)
        gc.collect()
        gc.freeze()
        interval = 1.0 / rate
        begin = time.monotonic()
        tasks: set[asyncio.Task[SendResult]] = set()
        for i in range(total):
            target = begin + i * interval
            delay = target - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            body = _TS.pack(time.monotonic_ns()) + b"x" * (size - 8)
            t = producer.send_async(Message(topic, body))
            tasks.add(t)
            t.add_done_callback(tasks.discard)
        achieved = total / (time.monotonic() - begin)
        if tasks:
            await asyncio.wait(tasks, timeout=10)
        proc_deadline = time.monotonic() + seconds + 70
        while proc.poll() is None and time.monotonic() < proc_deadline:
            await asyncio.sleep(0.1)
    finally:
        gc.unfreeze()
        if proc.poll() is None:
            proc.terminate()
            proc.wait(10)
    raw: Any = json.loads(out.read_text()) if out.exists() else []
    stages = None
    if isinstance(raw, dict):
        stages = latency_breakdown([tuple(x) for x in raw["stages"][warmup:]])
        stages["consumer_process"] = {"cpu_us_per_msg": raw.get("cpu_us_per_msg")}
        raw = raw["samples"]
    samples = sorted(raw[warmup:])
    us = [s // 1000 for s in samples]
    return Latency(
        f"latency_{rate}",
        rate,
        achieved,
        len(us),
        percentile(us, 0.5),
        percentile(us, 0.99),
        percentile(us, 0.999),
        stages,
    )


def _main(argv: list[str]) -> int:
    if len(argv) in (7, 8) and argv[0] == "latency-consumer":
        _, ns, topic, group, out, expected, max_s = argv[:7]
        breakdown = argv[7:] == ["breakdown"]
        from ferrymq.remoting.eventloop import run

        run(
            latency_consumer(
                ns.split(";"), topic, group, Path(out), int(expected), float(max_s), breakdown
            )
        )
        return 0
    print(
        "usage: python -m ferrymq.client.benchmark latency-consumer NAMESRV TOPIC GROUP OUT N MAX_S"
        " [breakdown]",
        file=sys.stderr,
    )
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
