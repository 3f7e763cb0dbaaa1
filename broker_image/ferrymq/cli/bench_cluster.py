"""``ferrymq bench produce|consume|latency``: throughput and latency against a running cluster."""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from ferrymq.cli.client_common import NamesrvOption, namesrv_list, run_client
from ferrymq.client import benchmark
from ferrymq.client.producer import Producer, check_topic
from ferrymq.client.sync_producer import SyncProducer

console = Console()

Topic = Annotated[str, typer.Option("--topic", "-t", help="Topic (create it first, 8+ queues).")]
Size = Annotated[int, typer.Option(min=8, max=4 * 1024 * 1024, help="Body bytes.")]
JsonOut = Annotated[Path | None, typer.Option("--json", help="Also write the result here.")]


def _topic(topic: str) -> str:
    try:
        check_topic(topic)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--topic") from None
    return topic


def _report(result: dict[str, Any], out: Path | None) -> None:
    console.print_json(json.dumps(result))
    if out is not None:
        out.write_text(json.dumps(result, indent=2))


def bench_produce(
    topic: Topic,
    namesrv: NamesrvOption = "127.0.0.1:9876",
    mode: Annotated[
        str,
        typer.Option(
            help="sync | blocking (sync from SyncProducer, no event loop) | batched | async"
        ),
    ] = "batched",
    count: Annotated[int, typer.Option(min=1, help="Messages (sync: at most).")] = 200_000,
    size: Size = 1024,
    batch: Annotated[int, typer.Option(min=1, max=1024, help="Messages per batch request.")] = 64,
    window: Annotated[int, typer.Option(min=1, help="Requests in flight (batched/async).")] = 16,
    max_seconds: Annotated[float, typer.Option(min=0.1, help="Time cap.")] = 150.0,
    json_out: JsonOut = None,
) -> None:
    """Acknowledged produce throughput: one at a time, batched, or async with a window."""
    if mode not in ("sync", "blocking", "batched", "async"):
        raise typer.BadParameter("must be sync, blocking, batched or async", param_hint="--mode")
    addrs = namesrv_list(namesrv)
    topic = _topic(topic)

    def blocking() -> benchmark.Throughput:
        with SyncProducer(f"bench_producer_{time.monotonic_ns()}", addrs) as producer:
            return benchmark.produce_blocking(
                producer, topic, size=size, max_count=count, max_seconds=max_seconds
            )

    async def go() -> benchmark.Throughput:
        if mode == "blocking":  # its own thread: the sends block, this loop only waits
            return await asyncio.to_thread(blocking)
        async with Producer(f"bench_producer_{time.monotonic_ns()}", addrs) as producer:
            if mode == "sync":
                return await benchmark.produce_sync(
                    producer, topic, size=size, max_count=count, max_seconds=max_seconds
                )
            if mode == "async":
                return await benchmark.produce_async(
                    producer, topic, size=size, total=count, window=window, max_seconds=max_seconds
                )
            return await benchmark.produce_batched(
                producer,
                topic,
                size=size,
                total=count,
                batch=batch,
                window=window,
                max_seconds=max_seconds,
            )

    result = run_client(go())
    _report(result.as_dict(), json_out)
    if result.errors:
        raise typer.Exit(1)


def bench_consume(
    topic: Topic,
    expected: Annotated[
        int, typer.Option("--expected", "-e", min=1, help="Backlog size to drain.")
    ],
    namesrv: NamesrvOption = "127.0.0.1:9876",
    group: Annotated[
        str | None, typer.Option(help="Consumer group (default: a fresh one).")
    ] = None,
    max_seconds: Annotated[float, typer.Option(min=0.1)] = 150.0,
    json_out: JsonOut = None,
) -> None:
    """Drain a backlog from the first offset with a push consumer (a fresh group by default)."""
    addrs = namesrv_list(namesrv)
    topic = _topic(topic)
    name = group or f"bench_drain_{time.monotonic_ns()}"
    result = run_client(benchmark.drain(addrs, topic, name, expected, max_seconds=max_seconds))
    _report(result.as_dict(), json_out)
    if result.errors:
        raise typer.Exit(1)


def bench_latency(
    topic: Topic,
    namesrv: NamesrvOption = "127.0.0.1:9876",
    rate: Annotated[int, typer.Option(min=1, max=100_000, help="Messages per second.")] = 2000,
    seconds: Annotated[float, typer.Option(min=1.0, max=600.0)] = 10.0,
    size: Size = 1024,
    json_out: JsonOut = None,
) -> None:
    """End-to-end latency at a fixed rate (consumer in a second process)."""
    addrs = namesrv_list(namesrv)
    topic = _topic(topic)

    async def go() -> benchmark.Latency:
        with tempfile.TemporaryDirectory(prefix="ferrymq-bench-") as tmp:
            async with Producer(f"bench_latency_producer_{time.monotonic_ns()}", addrs) as producer:
                return await benchmark.latency(
                    producer, addrs, topic, Path(tmp), rate=rate, seconds=seconds, size=size
                )

    result = run_client(go())
    _report(result.as_dict(), json_out)
    if result.samples == 0:
        raise typer.Exit(1)


def register(bench_app: typer.Typer) -> None:
    """Add ``produce``, ``consume`` and ``latency`` to ``ferrymq bench``."""
    bench_app.command("produce")(bench_produce)
    bench_app.command("consume")(bench_consume)
    bench_app.command("latency")(bench_latency)
