"""``ferrymq admin``: topics, clusters, consumer progress and messages (an mqadmin subset)."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Annotated

import typer
from rich.console import Console
from rich.live import Live
from rich.table import Table

from ferrymq.cli.client_common import NamesrvOption, namesrv_list, run_client
from ferrymq.cli.output import (
    OutputFormat,
    OutputLongOption,
    OutputOption,
    emit_json,
    not_found,
    wants_json,
)
from ferrymq.client.admin import AdminClient, QueueProgress
from ferrymq.client.lag_watch import LagRow, LagWatcher, format_eta
from ferrymq.message import MessageExt
from ferrymq.remoting import bodies
from ferrymq.topic_validator import RETRY_GROUP_TOPIC_PREFIX, is_system_topic

console = Console()

admin_app = typer.Typer(
    help="Administration: topics, clusters, consumer progress.", no_args_is_help=True
)
topic_app = typer.Typer(help="Create, list, delete and inspect topics.", no_args_is_help=True)
cluster_app = typer.Typer(help="Inspect clusters and brokers.", no_args_is_help=True)
message_app = typer.Typer(help="Find messages by key or id.", no_args_is_help=True)
admin_app.add_typer(topic_app, name="topic")
admin_app.add_typer(cluster_app, name="cluster")
admin_app.add_typer(message_app, name="message")

Verbose = Annotated[bool, typer.Option("--verbose", "-v")]


def _ms(ts: int) -> str:
    if ts <= 0:
        return "-"
    return dt.datetime.fromtimestamp(ts / 1000).strftime("%Y-%m-%d %H:%M:%S")


@topic_app.command("create")
def topic_create(
    topic: Annotated[str, typer.Option("--topic", "-t")],
    namesrv: NamesrvOption = "127.0.0.1:9876",
    cluster: Annotated[
        str | None, typer.Option("--cluster", "-c", help="Create on every master of this cluster.")
    ] = None,
    broker: Annotated[
        str | None, typer.Option("--broker", "-b", help="Create on this broker address only.")
    ] = None,
    read_queues: Annotated[int, typer.Option("--read-queues", "-r", min=1, max=1024)] = 8,
    write_queues: Annotated[int, typer.Option("--write-queues", "-w", min=1, max=1024)] = 8,
    perm: Annotated[int, typer.Option(help="2 write, 4 read, 6 both.", min=0, max=7)] = 6,
    order: Annotated[bool, typer.Option(help="Mark as an ordered topic.")] = False,
    attributes: Annotated[
        str | None,
        typer.Option(
            "--attributes",
            "-a",
            help="Topic attributes as mqadmin takes them: +key=value to set, -key to remove, "
            "comma separated, e.g. +message.type=FIFO (NORMAL, FIFO, DELAY, TRANSACTION).",
        ),
    ] = None,
    verbose: Verbose = False,
) -> None:
    """Create or update a topic (UPDATE_AND_CREATE_TOPIC on each master)."""
    addrs = namesrv_list(namesrv)

    async def go() -> list[str]:
        async with AdminClient(addrs) as admin:
            return await admin.create_topic(
                topic,
                cluster=cluster,
                broker_addr=broker,
                read_queue_nums=read_queues,
                write_queue_nums=write_queues,
                perm=perm,
                order=order,
                attributes=attributes,
            )

    written = run_client(go(), verbose=verbose)
    for addr in written:
        console.print(f"create topic {topic} on {addr}: success")


@topic_app.command("list")
def topic_list(
    namesrv: NamesrvOption = "127.0.0.1:9876",
    system: Annotated[
        bool, typer.Option(help="Include system topics (TBW102, %RETRY%...).")
    ] = False,
    output: OutputOption = OutputFormat.TABLE,
    verbose: Verbose = False,
) -> None:
    """List the topics the NameServer knows."""
    addrs = namesrv_list(namesrv)

    async def go() -> list[str]:
        async with AdminClient(addrs) as admin:
            return await admin.topic_list()

    topics = [
        topic
        for topic in run_client(go(), verbose=verbose)
        if system or not (topic.startswith("%") or is_system_topic(topic))
    ]
    if wants_json(output):
        emit_json({"topicList": topics})
        return
    for topic in topics:
        console.print(topic, highlight=False)


@topic_app.command("delete")
def topic_delete(
    topic: Annotated[str, typer.Option("--topic", "-t")],
    namesrv: NamesrvOption = "127.0.0.1:9876",
    cluster: Annotated[str | None, typer.Option("--cluster", "-c")] = None,
    verbose: Verbose = False,
) -> None:
    """Delete a topic from every master of the cluster and from every NameServer."""
    addrs = namesrv_list(namesrv)

    async def go() -> list[str]:
        async with AdminClient(addrs) as admin:
            return await admin.delete_topic(topic, cluster=cluster)

    brokers = run_client(go(), verbose=verbose)
    console.print(
        f"delete topic {topic} from {', '.join(brokers) or 'no broker'} and the NameServer(s): success"
    )


@topic_app.command("route")
def topic_route(
    topic: Annotated[str, typer.Option("--topic", "-t")],
    namesrv: NamesrvOption = "127.0.0.1:9876",
    output: OutputOption = OutputFormat.TABLE,
    verbose: Verbose = False,
) -> None:
    """Show the topic's route: brokers and queue counts."""
    addrs = namesrv_list(namesrv)

    async def go() -> bodies.TopicRouteData:
        async with AdminClient(addrs) as admin:
            return await admin.topic_route(topic)

    route = run_client(go(), verbose=verbose)
    if wants_json(output):
        emit_json(route_json(route))
        return
    table = Table("broker", "addresses", "read", "write", "perm", title=f"route of {topic}")
    addrs_by_name = {bd.broker_name: bd.broker_addrs for bd in route.broker_datas}
    for qd in sorted(route.queue_datas, key=lambda q: q.broker_name):
        broker_addrs = addrs_by_name.get(qd.broker_name, {})
        shown = ", ".join(f"{bid}={addr}" for bid, addr in sorted(broker_addrs.items()))
        table.add_row(
            qd.broker_name, shown, str(qd.read_queue_nums), str(qd.write_queue_nums), str(qd.perm)
        )
    console.print(table)


def route_json(route: bodies.TopicRouteData) -> dict[str, object]:
    """TopicRouteData in upstream's field names (brokerDatas, queueDatas)."""
    return {
        "brokerDatas": [
            {
                "cluster": bd.cluster,
                "brokerName": bd.broker_name,
                "brokerAddrs": {str(k): v for k, v in sorted(bd.broker_addrs.items())},
            }
            for bd in sorted(route.broker_datas, key=lambda b: b.broker_name)
        ],
        "queueDatas": [
            {
                "brokerName": qd.broker_name,
                "readQueueNums": qd.read_queue_nums,
                "writeQueueNums": qd.write_queue_nums,
                "perm": qd.perm,
            }
            for qd in sorted(route.queue_datas, key=lambda q: q.broker_name)
        ],
    }


@cluster_app.command("list")
def cluster_list(
    namesrv: NamesrvOption = "127.0.0.1:9876",
    output: OutputOption = OutputFormat.TABLE,
    verbose: Verbose = False,
) -> None:
    """Clusters, broker groups and their addresses."""
    addrs = namesrv_list(namesrv)

    async def go() -> bodies.ClusterInfo:
        async with AdminClient(addrs) as admin:
            return await admin.cluster_info()

    info = run_client(go(), verbose=verbose)
    rows = [
        (cluster, name, bid, addr)
        for cluster, names in sorted(info.cluster_addr_table.items())
        for name in sorted(names)
        for bid, addr in sorted(_broker_addrs(info, name).items())
    ]
    if wants_json(output):
        keys = ("cluster", "brokerName", "brokerId", "address")
        emit_json([dict(zip(keys, row, strict=True)) for row in rows])
        return
    table = Table("cluster", "broker", "id", "address")
    for cluster, name, bid, addr in rows:
        table.add_row(cluster, name, str(bid), addr)
    console.print(table)


def _broker_addrs(info: bodies.ClusterInfo, name: str) -> dict[int, str]:
    data = info.broker_addr_table.get(name)
    return dict(data.broker_addrs) if data else {}


def progress_table(group: str, rows: list[QueueProgress]) -> Table:
    table = Table(
        "topic",
        "broker",
        "queue",
        "broker offset",
        "consumer offset",
        "diff",
        "last time",
        title=f"consumer progress of {group}",
    )
    for r in rows:
        table.add_row(
            r.queue.topic,
            r.queue.broker_name,
            str(r.queue.queue_id),
            str(r.broker_offset),
            str(r.consumer_offset),
            str(r.diff),
            _ms(r.last_timestamp),
        )
    return table


@admin_app.command("consumer-progress")
def consumer_progress(
    group: Annotated[str, typer.Option("--group", "-g")],
    namesrv: NamesrvOption = "127.0.0.1:9876",
    topic: Annotated[str | None, typer.Option("--topic", "-t", help="Only this topic.")] = None,
    show_retry: Annotated[bool, typer.Option(help="Include the group's %RETRY% queues.")] = False,
    output: OutputOption = OutputFormat.TABLE,
    verbose: Verbose = False,
) -> None:
    """Per queue: broker offset, consumer offset, diff (lag) and last consume time."""
    addrs = namesrv_list(namesrv)

    async def go() -> tuple[list[QueueProgress], float]:
        async with AdminClient(addrs) as admin:
            stats = await admin.consume_stats(group, topic)
            return await admin.consumer_progress(group, topic), stats.consume_tps

    rows, tps = run_client(go(), verbose=verbose)
    if not rows:
        # as mqadmin: "Not found the consumer group consume stats, because return offset table
        # is empty, maybe the consumer not consume any message"
        raise not_found(
            f"consumer group {group!r}"
            + (f" on topic {topic!r}" if topic else "")
            + ": no broker holds offsets of it (unknown group, or it never consumed)"
        )
    if not show_retry:
        rows = [r for r in rows if not r.queue.topic.startswith(RETRY_GROUP_TOPIC_PREFIX)]
    if wants_json(output):
        emit_json(
            {
                "consumeTps": tps,
                "diffTotal": sum(r.diff for r in rows),
                "offsetTable": [
                    {
                        "topic": r.queue.topic,
                        "brokerName": r.queue.broker_name,
                        "queueId": r.queue.queue_id,
                        "brokerOffset": r.broker_offset,
                        "consumerOffset": r.consumer_offset,
                        "diff": r.diff,
                        "lastTimestamp": r.last_timestamp,
                    }
                    for r in rows
                ],
            }
        )
        return
    console.print(progress_table(group, rows))
    console.print(f"consume TPS: {tps:.2f}   diff total: {sum(r.diff for r in rows)}")


def _message_table(msgs: list[MessageExt]) -> Table:
    table = Table("msgId", "offsetMsgId", "queue", "offset", "tags", "keys", "stored", "body")
    for m in msgs:
        table.add_row(
            m.msg_id,
            m.offset_msg_id,
            str(m.queue_id),
            str(m.queue_offset),
            m.tags or "-",
            " ".join(m.keys) or "-",
            _ms(m.store_timestamp),
            m.body[:40].decode("utf-8", "replace"),
        )
    return table


def message_json(m: MessageExt) -> dict[str, object]:
    return {
        "msgId": m.msg_id,
        "offsetMsgId": m.offset_msg_id,
        "topic": m.topic,
        "queueId": m.queue_id,
        "queueOffset": m.queue_offset,
        "tags": m.tags,
        "keys": list(m.keys),
        "storeTimestamp": m.store_timestamp,
        "properties": dict(sorted(m.properties.items())),
        "body": m.body.decode("utf-8", "replace"),
    }


@message_app.command("query")
def message_query(
    topic: Annotated[str, typer.Option("--topic", "-t")],
    key: Annotated[str, typer.Option("--key", "-k")],
    namesrv: NamesrvOption = "127.0.0.1:9876",
    max_num: Annotated[int, typer.Option(min=1, max=64000)] = 64,
    output: OutputOption = OutputFormat.TABLE,
    verbose: Verbose = False,
) -> None:
    """Messages of TOPIC whose keys contain KEY."""
    addrs = namesrv_list(namesrv)

    async def go() -> list[MessageExt]:
        async with AdminClient(addrs) as admin:
            return await admin.query_message_by_key(topic, key, max_num)

    msgs = run_client(go(), verbose=verbose)
    if wants_json(output):
        emit_json([message_json(m) for m in msgs])
    else:
        console.print(_message_table(msgs))
    if not msgs:
        raise typer.Exit(1)


@message_app.command("view")
def message_view(
    msg_id: Annotated[
        str, typer.Option("--id", "-i", help="Broker (offset) or client message id.")
    ],
    namesrv: NamesrvOption = "127.0.0.1:9876",
    topic: Annotated[
        str | None, typer.Option("--topic", "-t", help="Needed for a client id.")
    ] = None,
    output: OutputOption = OutputFormat.TABLE,
    verbose: Verbose = False,
) -> None:
    """One message by id, with its properties."""
    addrs = namesrv_list(namesrv)

    async def go() -> MessageExt:
        async with AdminClient(addrs) as admin:
            return await admin.view_message(msg_id, topic)

    msg = run_client(go(), verbose=verbose)
    if wants_json(output):
        emit_json(message_json(msg))
        return
    console.print(_message_table([msg]))
    for name, value in sorted(msg.properties.items()):
        console.print(f"  {name} = {value}", highlight=False)


# --- issue 18: offsets, consumer status, topic stats, live lag --------------------------------


@admin_app.command("reset-offset")
def reset_offset(
    group: Annotated[str, typer.Option("--group", "-g")],
    topic: Annotated[str, typer.Option("--topic", "-t")],
    namesrv: NamesrvOption = "127.0.0.1:9876",
    timestamp: Annotated[
        str | None,
        typer.Option(
            "--timestamp",
            "-s",
            help="Epoch ms, 'now', or yyyy-MM-dd#HH:mm:ss:SSS (mqadmin resetOffsetByTime).",
        ),
    ] = None,
    offset: Annotated[
        int | None, typer.Option("--offset", "-o", min=0, help="Move every queue to this offset.")
    ] = None,
    force: Annotated[
        bool, typer.Option(help="Also move forward (--no-force: only ever move back).")
    ] = True,
    output: OutputLongOption = OutputFormat.TABLE,
    verbose: Verbose = False,
) -> None:
    """Move a consumer group's offsets on a topic to a time or an offset. Online consumers move at
    once (INVOKE_BROKER_TO_RESET_OFFSET); with none online the offsets are committed on the
    brokers for when the group comes back."""
    if (timestamp is None) == (offset is None):
        raise typer.BadParameter("give exactly one of --timestamp and --offset")
    at_ms = -1
    if timestamp is not None:
        at_ms = parse_timestamp(timestamp)
        if at_ms > int(dt.datetime.now().timestamp() * 1000):
            console.print(
                "[yellow]warning:[/yellow] the timestamp is in the future: every queue moves to "
                "its end (the backlog is skipped)"
            )
    addrs = namesrv_list(namesrv)

    async def go() -> dict[bodies.MessageQueue, int]:
        async with AdminClient(addrs) as admin:
            return await admin.reset_offset(
                group, topic, timestamp=at_ms, offset=offset, force=force
            )

    moved = sorted(run_client(go(), verbose=verbose).items())
    if wants_json(output):
        emit_json([{**queue_json(mq), "offset": new} for mq, new in moved])
        return
    table = Table("topic", "broker", "queue", "new offset", title=f"reset-offset of {group}")
    for mq, new in moved:
        table.add_row(mq.topic, mq.broker_name, str(mq.queue_id), str(new))
    console.print(table)


def queue_json(mq: bodies.MessageQueue) -> dict[str, object]:
    """A MessageQueue in upstream's field names."""
    return {"topic": mq.topic, "brokerName": mq.broker_name, "queueId": mq.queue_id}


def parse_timestamp(text: str) -> int:
    """Epoch ms, 'now', or mqadmin's ``yyyy-MM-dd#HH:mm:ss:SSS`` (local time)."""
    if text == "now":
        return int(dt.datetime.now().timestamp() * 1000)
    if text.isdigit():
        return int(text)
    try:
        parsed = dt.datetime.strptime(text, "%Y-%m-%d#%H:%M:%S:%f")
    except ValueError:
        raise typer.BadParameter(
            f"{text!r} is not epoch ms, 'now' or yyyy-MM-dd#HH:mm:ss:SSS", param_hint="--timestamp"
        ) from None
    return int(parsed.timestamp() * 1000)


@admin_app.command("consumer-status")
def consumer_status(
    group: Annotated[str, typer.Option("--group", "-g")],
    topic: Annotated[str, typer.Option("--topic", "-t")],
    namesrv: NamesrvOption = "127.0.0.1:9876",
    client_id: Annotated[str | None, typer.Option("--client-id", "-i")] = None,
    output: OutputOption = OutputFormat.TABLE,
    verbose: Verbose = False,
) -> None:
    """The offsets each online consumer of the group holds (INVOKE_BROKER_TO_GET_CONSUMER_STATUS)."""
    addrs = namesrv_list(namesrv)

    async def go() -> dict[str, dict[bodies.MessageQueue, int]]:
        async with AdminClient(addrs) as admin:
            return await admin.consumer_status(group, topic, client_id)

    status = sorted(run_client(go(), verbose=verbose).items())
    if wants_json(output):
        emit_json(
            {
                client: [{**queue_json(mq), "offset": v} for mq, v in sorted(offsets.items())]
                for client, offsets in status
            }
        )
        return
    table = Table("client", "broker", "queue", "offset", title=f"consumer status of {group}")
    for client, offsets in status:
        for mq, value in sorted(offsets.items()):
            table.add_row(client, mq.broker_name, str(mq.queue_id), str(value))
    console.print(table)


@admin_app.command("topic-stats")
def topic_stats(
    topic: Annotated[str, typer.Option("--topic", "-t")],
    namesrv: NamesrvOption = "127.0.0.1:9876",
    output: OutputOption = OutputFormat.TABLE,
    verbose: Verbose = False,
) -> None:
    """Per queue: min and max offset and the last store time (mqadmin topicStatus)."""
    addrs = namesrv_list(namesrv)

    async def go() -> bodies.TopicStatsTable:
        async with AdminClient(addrs) as admin:
            return await admin.topic_stats(topic)

    stats = run_client(go(), verbose=verbose)
    if not stats.offset_table:
        raise not_found(f"topic {topic!r}: no broker has queues of it")
    if wants_json(output):
        emit_json(
            {
                "offsetTable": [
                    {
                        **queue_json(mq),
                        "minOffset": off.min_offset,
                        "maxOffset": off.max_offset,
                        "lastUpdateTimestamp": off.last_update_timestamp,
                    }
                    for mq, off in sorted(stats.offset_table.items())
                ]
            }
        )
        return
    table = Table("broker", "queue", "min offset", "max offset", "last updated", title=topic)
    for mq, off in sorted(stats.offset_table.items()):
        table.add_row(
            mq.broker_name,
            str(mq.queue_id),
            str(off.min_offset),
            str(off.max_offset),
            _ms(off.last_update_timestamp),
        )
    console.print(table)
    console.print(
        f"messages stored: {sum(o.max_offset - o.min_offset for o in stats.offset_table.values())}"
    )


_STATUS_STYLE = {
    "OK": "green",
    "WARN": "yellow",
    "ERR": "bold red",
    "NOTFOUND": "dim",
}


def lag_table(rows: list[LagRow], title: str) -> Table:
    table = Table("group", "topic", "lag", "lag latency", "status", "ETA", "online", title=title)
    for r in rows:
        style = _STATUS_STYLE.get(r.status.name, "")
        table.add_row(
            r.group,
            r.topic,
            str(r.lag),
            f"{r.latency_ms / 1000:.1f}s",
            f"[{style}]{r.status.name}[/{style}]" if style else r.status.name,
            format_eta(r.eta_s),
            "yes" if r.online else "no",
        )
    return table


@admin_app.command("lag")
def lag(
    namesrv: NamesrvOption = "127.0.0.1:9876",
    group: Annotated[str | None, typer.Option("--group", "-g", help="Only this group.")] = None,
    watch: Annotated[bool, typer.Option("--watch", "-w", help="Refresh in place.")] = False,
    interval: Annotated[float, typer.Option(min=0.2, help="Seconds between samples.")] = 2.0,
    window: Annotated[float, typer.Option(min=1.0, help="Status window, seconds.")] = 60.0,
    count: Annotated[
        int, typer.Option(min=0, help="Stop after this many refreshes (0: until Ctrl-C).")
    ] = 0,
    output: OutputOption = OutputFormat.TABLE,
    verbose: Verbose = False,
) -> None:
    """Consumer lag per group and topic with a Burrow-style status (OK, WARN, ERR) and the time
    until the backlog clears. Without --watch: three samples, one table."""
    if watch and wants_json(output):
        raise typer.BadParameter("--watch redraws a table; use it without -o json", param_hint="-o")
    addrs = namesrv_list(namesrv)
    samples = count or (0 if watch else 3)

    async def go() -> list[LagRow]:
        async with AdminClient(addrs) as admin:
            watcher = LagWatcher(
                admin, group=group, window_s=window, eta_window_s=min(window, 30.0)
            )
            rows = await watcher.sample()
            done = 1
            if not watch:
                while done < samples:
                    await asyncio.sleep(interval)  # the sampling cadence
                    rows = await watcher.sample()
                    done += 1
                return rows
            with Live(lag_table(rows, "consumer lag"), console=console, auto_refresh=False) as live:
                while samples == 0 or done < samples:
                    await asyncio.sleep(interval)  # the refresh cadence
                    rows = await watcher.sample()
                    done += 1
                    live.update(lag_table(rows, "consumer lag"), refresh=True)
            return rows

    rows = run_client(go(), verbose=verbose)
    if group is not None and not rows:
        raise not_found(f"consumer group {group!r}: no broker holds offsets of it")
    if watch:
        return
    if wants_json(output):
        emit_json(
            [
                {
                    "group": r.group,
                    "topic": r.topic,
                    "lag": r.lag,
                    "lagLatencyMs": r.latency_ms,
                    "status": r.status.name,
                    "etaSeconds": r.eta_s,
                    "online": r.online,
                }
                for r in rows
            ]
        )
        return
    console.print(lag_table(rows, "consumer lag"))
