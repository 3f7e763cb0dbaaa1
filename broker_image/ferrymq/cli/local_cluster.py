"""``ferrymq local-cluster --data-dir DIR [--groups 2] [--demo]``: one NameServer and broker groups as
local child processes, stopped cleanly (children by PID) on Ctrl-C or SIGTERM."""

from __future__ import annotations

import asyncio
import signal
import threading
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ferrymq.broker.controller_cluster import ControllerLocalCluster
from ferrymq.broker.local_cluster import (
    LOCAL_COMMITLOG_FILE_SIZE,
    ClusterStartError,
    LocalCluster,
    parse_size,
)
from ferrymq.remoting.eventloop import run

console = Console(stderr=True)


def _commitlog_file_size(value: str) -> int:
    try:
        return parse_size(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


def local_cluster(
    data_dir: Annotated[Path, typer.Option("--data-dir", help="where stores, configs and logs go")],
    groups: Annotated[int, typer.Option("--groups", min=1, max=26, help="broker groups")] = 2,
    slaves: Annotated[
        int, typer.Option("--slaves", min=0, max=4, help="slaves per broker group (0 = none)")
    ] = 1,
    namesrv_port: Annotated[int, typer.Option("--namesrv-port", help="0 = any free port")] = 9876,
    broker_port: Annotated[
        int,
        typer.Option(
            "--broker-port",
            help="first master port; +10 per group (+20 with 2+ slaves), slave n at +4n; 0 = any",
        ),
    ] = 10911,
    host: Annotated[str, typer.Option("--host", help="address to bind and publish")] = "127.0.0.1",
    flush_disk_type: Annotated[
        str, typer.Option("--flush-disk-type", help="ASYNC_FLUSH or SYNC_FLUSH")
    ] = "ASYNC_FLUSH",
    demo: Annotated[
        bool, typer.Option("--demo", help="send and consume demo messages once the cluster is up")
    ] = False,
    demo_messages: Annotated[int, typer.Option("--demo-messages", min=1)] = 1000,
    commitlog_file_size: Annotated[
        int,
        typer.Option(
            "--commitlog-file-size",
            parser=_commitlog_file_size,
            metavar="SIZE",
            help="size of each CommitLog file (broker.conf mappedFileSizeCommitLog), bytes or "
            "with K/M/G. A broker reserves each file's full size on disk (posix_fallocate) when it "
            "first writes to it, so the local default is 128M; a broker run on its own keeps "
            "upstream's 1G. A message must fit in one file.",
        ),
    ] = f"{LOCAL_COMMITLOG_FILE_SIZE // (1024 * 1024)}M",  # type: ignore[assignment]
    controller: Annotated[
        bool,
        typer.Option(
            "--controller",
            help="controller mode: also start a controller; each group's replicas (brokerId "
            "1..slaves+1, free ports) elect their master and fail over automatically",
        ),
    ] = False,
) -> None:
    """Run a NameServer and GROUPS broker groups locally until Ctrl-C."""
    if flush_disk_type not in ("ASYNC_FLUSH", "SYNC_FLUSH"):
        console.print(
            f"[red]error:[/] --flush-disk-type must be ASYNC_FLUSH or SYNC_FLUSH, got {flush_disk_type}"
        )
        raise typer.Exit(2)
    cluster_cls = ControllerLocalCluster if controller else LocalCluster
    cluster = cluster_cls(
        data_dir,
        groups=groups,
        slaves=slaves,
        host=host,
        namesrv_port=namesrv_port,
        broker_port=broker_port,
        flush_disk_type=flush_disk_type,
        mapped_file_size_commit_log=commitlog_file_size,
    )
    stop = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        with console.status("starting NameServer and brokers..."):
            cluster.start()
        console.print(
            f"NameServer  [bold]{cluster.namesrv_addr}[/]  (pid {cluster.namesrv.pid if cluster.namesrv else '?'})"
        )
        if isinstance(cluster, ControllerLocalCluster) and cluster.controller is not None:
            console.print(
                f"Controller  [bold]{cluster.controller_addr}[/]  (pid {cluster.controller.pid})"
            )
        for child, addr in zip(cluster.brokers, cluster.broker_addrs, strict=True):
            console.print(f"Broker      [bold]{child.name}[/] at {addr}  (pid {child.pid})")
        console.print(f"data and logs under {cluster.data_dir}")
        console.print(f"clients: namesrvAddr={cluster.namesrv_addr}   (Ctrl-C stops everything)")
        if demo and not stop.is_set():
            run(run_demo(cluster.namesrv_addr, demo_messages, stop))
        while not stop.wait(0.5):
            dead = [c for c in cluster.children if not c.alive()]
            if dead:
                for child in dead:
                    console.print(
                        f"[red]{child.name} exited ({child.proc.returncode}):[/]\n{child.log_tail()}"
                    )
                raise typer.Exit(1)
    except ClusterStartError as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(1) from None
    finally:
        console.print("stopping the cluster...")
        cluster.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        console.print("stopped")


async def run_demo(namesrv_addr: str, count: int, stop: threading.Event) -> None:
    """Send ``count`` messages with tags and keys, consume them with a push consumer, show progress."""
    from ferrymq.client import ConsumeFromWhere, Message, Producer, PushConsumer
    from ferrymq.message import MessageExt

    topic, group = "DemoTopic", "demo_consumer_group"
    received: set[str] = set()
    done = asyncio.Event()

    def listener(msgs: list[MessageExt], context: object) -> None:
        for msg in msgs:
            received.add(msg.body.decode(errors="replace"))
        if len(received) >= count:
            done.set()

    producer = Producer("demo_producer_group", namesrv_addr)
    consumer = PushConsumer(
        group, namesrv_addr, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
    )
    consumer.subscribe(topic, "TagA || TagB")
    consumer.register_listener(listener)
    await producer.start()
    try:
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
        ) as progress:
            sending = progress.add_task("sent", total=count)
            for i in range(count):
                if stop.is_set():
                    return
                msg = Message(topic, f"demo message {i}".encode())
                msg.tags = "TagA" if i % 2 == 0 else "TagB"
                msg.keys = [f"demo-key-{i}"]
                await producer.send(msg)
                progress.advance(sending)
            await consumer.start()
            consuming = progress.add_task("consumed", total=count)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 120
            while not done.is_set() and not stop.is_set() and loop.time() < deadline:
                progress.update(consuming, completed=len(received))
                await asyncio.sleep(0.2)  # progress refresh cadence
            progress.update(consuming, completed=len(received))
        if len(received) >= count:
            console.print(f"[green]demo: {count} messages sent and consumed[/]")
        else:
            console.print(f"[yellow]demo: consumed {len(received)} of {count}[/]")
    finally:
        await consumer.shutdown() if consumer.listener is not None else None
        await producer.shutdown()
