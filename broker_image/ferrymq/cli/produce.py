"""``ferrymq produce``: send messages to a topic with ferrymq's producer."""

from __future__ import annotations

import asyncio
import time
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ferrymq.cli.client_common import NamesrvOption, namesrv_list, run_client
from ferrymq.client.broker_api import SendResult
from ferrymq.client.producer import Producer, check_topic
from ferrymq.message import Message

console = Console()


def _format(template: str | None, i: int) -> str | None:
    if template is None:
        return None
    return template.replace("{i}", str(i))


def build_message(
    topic: str, i: int, body: str | None, size: int, tags: str | None, keys: str | None
) -> Message:
    payload = _format(body, i).encode() if body is not None else _sized_body(i, size)  # type: ignore[union-attr]
    msg = Message(topic=topic, body=payload)
    msg.tags = _format(tags, i)
    msg.keys = _format(keys, i)
    return msg


def _sized_body(i: int, size: int) -> bytes:
    head = f"{i}:".encode()
    return (head + b"x" * size)[:size] if size > len(head) else head


async def _produce(
    namesrv: list[str],
    topic: str,
    group: str,
    count: int,
    body: str | None,
    size: int,
    tags: str | None,
    keys: str | None,
    batch: int,
    mode: str,
    show: int,
) -> tuple[list[SendResult], int, float]:
    results: list[SendResult] = []
    failed = 0
    async with Producer(group, namesrv) as producer:
        begin = time.perf_counter()
        with Progress(
            TextColumn("[bold]produce[/bold] {task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=True,
            disable=count < 1000,
        ) as progress:
            task = progress.add_task(topic, total=count)
            i = 0
            window: list[asyncio.Task[SendResult]] = []
            while i < count:
                n = min(batch, count - i)
                msgs = [build_message(topic, i + j, body, size, tags, keys) for j in range(n)]
                if mode == "async":
                    window.extend(producer.send_async(m) for m in msgs)
                    if len(window) >= 1000:
                        done = await asyncio.gather(*window, return_exceptions=True)
                        failed += sum(isinstance(r, BaseException) for r in done)
                        results.extend(r for r in done if isinstance(r, SendResult))
                        window.clear()
                elif mode == "oneway":
                    for m in msgs:
                        await producer.send_oneway(m)
                elif n > 1:
                    results.append(await producer.send_batch(msgs))
                else:
                    results.append(await producer.send(msgs[0]))
                i += n
                progress.update(task, completed=i)
            if window:
                done = await asyncio.gather(*window, return_exceptions=True)
                failed += sum(isinstance(r, BaseException) for r in done)
                results.extend(r for r in done if isinstance(r, SendResult))
        elapsed = time.perf_counter() - begin
    return results, failed, elapsed


def produce(
    topic: Annotated[str, typer.Option("--topic", "-t", help="Topic to send to.")],
    namesrv: NamesrvOption = "127.0.0.1:9876",
    count: Annotated[int, typer.Option("--count", "-c", min=1, help="Number of messages.")] = 1,
    tags: Annotated[str | None, typer.Option(help="Tag of every message ('{i}' = index).")] = None,
    keys: Annotated[
        str | None, typer.Option(help="Keys, space separated ('{i}' = index), e.g. 'order-{i}'.")
    ] = None,
    body: Annotated[str | None, typer.Option(help="Body text ('{i}' = index).")] = None,
    size: Annotated[
        int,
        typer.Option(
            min=1, max=4 * 1024 * 1024, help="Body size in bytes when --body is not given."
        ),
    ] = 128,
    group: Annotated[str, typer.Option(help="Producer group.")] = "ferrymq-cli-producer",
    batch: Annotated[int, typer.Option(min=1, max=1024, help="Messages per batch request.")] = 1,
    mode: Annotated[str, typer.Option(help="sync | async | oneway")] = "sync",
    show: Annotated[int, typer.Option(help="Print the send results of the first N messages.")] = 10,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Send COUNT messages to TOPIC and print where they were stored."""
    if mode not in ("sync", "async", "oneway"):
        raise typer.BadParameter("must be sync, async or oneway", param_hint="--mode")
    if batch > 1 and mode != "sync":
        raise typer.BadParameter("batches are sent in sync mode only", param_hint="--batch")
    try:
        check_topic(topic)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--topic") from None
    addrs = namesrv_list(namesrv)
    results, failed, elapsed = run_client(
        _produce(addrs, topic, group, count, body, size, tags, keys, batch, mode, show),
        verbose=verbose,
    )
    if show and results:
        table = Table("msgId", "queue", "queueOffset", "status")
        for r in results[:show]:
            table.add_row(
                r.msg_id if len(r.msg_id) < 70 else r.msg_id[:67] + "...",
                f"{r.queue.broker_name}:{r.queue.queue_id}",
                str(r.queue_offset),
                r.status.value,
            )
        console.print(table)
    sent = count - failed
    rate = sent / elapsed if elapsed > 0 else 0.0
    console.print(
        f"sent {sent}/{count} message(s) to {topic} in {elapsed:.2f}s ({rate:,.0f} msg/s)"
    )
    if failed:
        console.print(f"[red]{failed} send(s) failed[/red]")
        raise typer.Exit(1)
