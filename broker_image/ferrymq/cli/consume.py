"""``ferrymq consume``: receive messages of a topic with ferrymq's push consumer."""

from __future__ import annotations

import asyncio
import time
from typing import Annotated

import typer
from rich.console import Console

from ferrymq.cli.client_common import NamesrvOption, namesrv_list, run_client
from ferrymq.client.consume_service import ConsumeContext
from ferrymq.client.producer import check_topic
from ferrymq.client.push_consumer import PushConsumer
from ferrymq.message import MessageExt
from ferrymq.remoting.bodies import ConsumeFromWhere, MessageModel

console = Console()


def describe(msg: MessageExt, body_chars: int = 60) -> str:
    body = msg.body[:body_chars].decode("utf-8", "replace")
    more = "..." if len(msg.body) > body_chars else ""
    return (
        f"{msg.msg_id} {msg.topic} q={msg.queue_id} off={msg.queue_offset} "
        f"tags={msg.tags or '-'} keys={' '.join(msg.keys) or '-'} body={body!r}{more}"
    )


async def _consume(
    namesrv: list[str],
    topic: str,
    group: str,
    expression: str,
    count: int | None,
    timeout: float,
    from_first: bool,
    broadcast: bool,
    quiet: bool,
) -> int:
    received = 0
    done = asyncio.Event()

    def on_messages(msgs: list[MessageExt], ctx: ConsumeContext) -> None:
        nonlocal received
        for msg in msgs:
            received += 1
            if not quiet:
                console.print(describe(msg), highlight=False, markup=False)
        if count is not None and received >= count:
            done.set()

    consumer = PushConsumer(
        group,
        namesrv,
        message_model=MessageModel.BROADCASTING if broadcast else MessageModel.CLUSTERING,
        consume_from_where=(
            ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
            if from_first
            else ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
        ),
        # printing is quick: stay on the event loop, in order per batch
        run_sync_listener_in_thread=False,
        consume_thread_max=1,
        consume_batch_max_size=32,
    )
    consumer.subscribe(topic, expression)
    consumer.register_listener(on_messages)
    begin = time.monotonic()
    await consumer.start()
    try:
        await asyncio.wait_for(done.wait(), timeout)
    except TimeoutError:
        pass
    finally:
        await consumer.shutdown()
    elapsed = time.monotonic() - begin
    console.print(
        f"received {received} message(s) from {topic} as {group} in {elapsed:.1f}s", style="bold"
    )
    return received


def consume(
    topic: Annotated[str, typer.Option("--topic", "-t", help="Topic to consume.")],
    group: Annotated[str, typer.Option("--group", "-g", help="Consumer group.")],
    namesrv: NamesrvOption = "127.0.0.1:9876",
    count: Annotated[
        int | None, typer.Option("--count", "-c", min=1, help="Stop after this many messages.")
    ] = None,
    timeout: Annotated[
        float,
        typer.Option(min=0.1, help="Stop after this many seconds (with --count: fail if short)."),
    ] = 30.0,
    tags: Annotated[str, typer.Option(help="Tag filter: '*' or 'TagA || TagB'.")] = "*",
    from_first: Annotated[
        bool, typer.Option("--from-first", help="A new group starts at the oldest message.")
    ] = False,
    broadcast: Annotated[bool, typer.Option(help="Broadcasting instead of clustering.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Only print the summary.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Receive messages of TOPIC as consumer group GROUP and print them."""
    try:
        check_topic(topic)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--topic") from None
    if not group.strip():
        raise typer.BadParameter("the consumer group is empty", param_hint="--group")
    addrs = namesrv_list(namesrv)
    received = run_client(
        _consume(addrs, topic, group, tags, count, timeout, from_first, broadcast, quiet),
        verbose=verbose,
    )
    if count is not None and received < count:
        console.print(
            f"[red]only {received} of {count} message(s) arrived within {timeout:g}s[/red]"
        )
        raise typer.Exit(1)
