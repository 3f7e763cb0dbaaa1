"""Collect one cluster snapshot through the admin API (``ferrymq admin snapshot``); no Spark.

What each table comes from (upstream request codes):

* routes, queues: GET_ROUTEINFO_BY_TOPIC (105) per topic of GET_ALL_TOPIC_LIST_FROM_NAMESERVER,
  then GET_MIN_OFFSET (31) / GET_MAX_OFFSET (30) per readable queue;
* offsets: GET_CONSUME_STATS (208) per group; groups are those with offsets on any master
  (GET_ALL_CONSUMER_OFFSET, 43) plus those with a ``%RETRY%<group>`` topic;
* clients, subscriptions: GET_CONSUMER_CONNECTION_LIST (203) per group;
* views: GET_CONSUMER_LIST_BY_GROUP (38) from each broker of the group (what clients rebalance on);
* ownership, per-client subscriptions and strategy: GET_CONSUMER_RUNNING_INFO (307), sent to the
  group's broker, which relays it to the client. When the broker does not relay it (a 3
  REQUEST_CODE_NOT_SUPPORTED or an error) the snapshot says so in ``meta.notes``, ``runningInfo``
  stays false, and the subscriptions of every client are the group's merged ones.

Failures on one group or queue are recorded as notes and the rest is still collected: a snapshot
with holes that says where they are is more useful to a backlog history than none.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from ferrymq.client.admin import AdminClient
from ferrymq.client.allocate import MessageQueue
from ferrymq.client.errors import MQClientError
from ferrymq.remoting import fastjson
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.errors import RemotingError
from ferrymq.snapshot.schema import (
    ClientRow,
    ConsumerViewRow,
    OffsetRow,
    OwnershipRow,
    QueueRow,
    RouteRow,
    SnapshotMeta,
    SubscriptionRow,
)
from ferrymq.snapshot.writer import snapshot_id_for, write_snapshot
from ferrymq.topic_validator import (
    AUTO_CREATE_TOPIC_KEY_TOPIC,
    DLQ_GROUP_TOPIC_PREFIX,
    OFFSET_MOVED_EVENT,
    RETRY_GROUP_TOPIC_PREFIX,
    RMQ_SYS_TRACE_TOPIC,
    SCHEDULE_TOPIC,
)

# Topics no consumer group rebalances over: the default-topic template, delay and trace topics
# (narrower than TopicValidator's system set: transaction topics are recorded like any other).
UNCOLLECTED_TOPICS = frozenset(
    {AUTO_CREATE_TOPIC_KEY_TOPIC, SCHEDULE_TOPIC, RMQ_SYS_TRACE_TOPIC, OFFSET_MOVED_EVENT}
)
PERM_READ = 4
MAX_CONCURRENCY = 16
RELAY_TIMEOUT_S = 5.0  # the broker waits on the client in turn

T = TypeVar("T")


def is_collected_topic(topic: str) -> bool:
    """Topics whose queues a snapshot records (retry topics are consumed and rebalanced too)."""
    return topic not in UNCOLLECTED_TOPICS and not topic.startswith(DLQ_GROUP_TOPIC_PREFIX)


def groups_from(offset_keys: Iterable[str], topics: Iterable[str]) -> set[str]:
    """Consumer groups named by ``topic@group`` offset keys and by ``%RETRY%<group>`` topics."""
    groups = {k.rsplit("@", 1)[1] for k in offset_keys if "@" in k}
    groups |= {
        t[len(RETRY_GROUP_TOPIC_PREFIX) :] for t in topics if t.startswith(RETRY_GROUP_TOPIC_PREFIX)
    }
    return {g for g in groups if g}


@dataclass
class RunningInfo:
    """The parts of an upstream ConsumerRunningInfo the audit uses."""

    strategy: str | None
    message_model: str | None
    subscriptions: list[tuple[str, str, str, int | None]]  # topic, subString, type, version
    owned: list[tuple[str, str, int]]  # topic, brokerName, queueId


def parse_running_info(body: Any) -> RunningInfo:
    """Decode a GET_CONSUMER_RUNNING_INFO body (fastjson; mqTable keys are objects)."""
    if not isinstance(body, dict):
        raise ValueError("running info body is not an object")
    props = body.get("properties") or {}
    subs = []
    for s in body.get("subscriptionSet") or []:
        subs.append(
            (
                str(s["topic"]),
                str(s.get("subString", "*")),
                str(s.get("expressionType", "TAG")),
                int(s["subVersion"]) if s.get("subVersion") is not None else None,
            )
        )
    owned = []
    for key in body.get("mqTable") or {}:
        mq = dict(key) if isinstance(key, tuple) else key
        if not isinstance(mq, dict):
            raise ValueError(f"mqTable key {key!r} is not a MessageQueue")
        owned.append((str(mq["topic"]), str(mq["brokerName"]), int(mq["queueId"])))
    strategy = props.get("allocateMessageQueueStrategy")
    return RunningInfo(
        strategy=str(strategy) if strategy else None,
        message_model=props.get("messageModel"),
        subscriptions=subs,
        owned=sorted(owned),
    )


@dataclass
class Collected:
    meta: SnapshotMeta
    tables: dict[str, list[BaseModel]] = field(default_factory=dict)


async def _bounded(limit: asyncio.Semaphore, coro: Awaitable[T]) -> T:
    async with limit:
        return await coro


async def _none() -> None:
    return None


async def oldest_unconsumed(
    admin: AdminClient, mq: MessageQueue, consumer_offset: int, notes: list[str]
) -> int | None:
    """Store time of the message at a lagging consumer's offset: what makes time lag exact."""
    try:
        return await admin.store_time_at(mq, max(consumer_offset, 0))
    except MQClientError as exc:
        notes.append(
            f"store time at {mq.topic}/{mq.broker_name}/{mq.queue_id}@{consumer_offset}: {exc}"
        )
        return None


async def collect(
    admin: AdminClient,
    namesrv: str,
    *,
    groups: Iterable[str] | None = None,
    clock: Callable[[], float] = time.time,
    progress: Callable[[str], None] | None = None,
) -> Collected:
    """Collect one snapshot with a started :class:`ferrymq.client.admin.AdminClient`."""
    step = progress or (lambda _m: None)
    taken = int(clock() * 1000)
    sid = snapshot_id_for(taken)
    base = {"snapshotId": sid, "takenAt": taken}
    notes: list[str] = []
    limit = asyncio.Semaphore(MAX_CONCURRENCY)
    routes: list[BaseModel] = []
    queues: list[BaseModel] = []
    step("listing topics")
    topics = sorted(t for t in await admin.topic_list() if is_collected_topic(t))
    masters: dict[str, str] = {}

    async def one_topic(topic: str) -> None:
        try:
            route = await admin.topic_route(topic)
        except MQClientError as exc:
            notes.append(f"route of {topic}: {exc}")
            return
        addrs = {bd.broker_name: bd.broker_addrs.get(0) for bd in route.broker_datas}
        clusters = {bd.broker_name: bd.cluster for bd in route.broker_datas}
        for qd in route.queue_datas:
            if addrs.get(qd.broker_name):
                masters[qd.broker_name] = str(addrs[qd.broker_name])
            routes.append(
                RouteRow(
                    **base,
                    topic=topic,
                    brokerName=qd.broker_name,
                    cluster=clusters.get(qd.broker_name),
                    brokerAddr=addrs.get(qd.broker_name),
                    readQueueNums=qd.read_queue_nums,
                    writeQueueNums=qd.write_queue_nums,
                    perm=qd.perm,
                )
            )
            if not qd.perm & PERM_READ:
                continue
            for qid in range(qd.read_queue_nums):
                mq = MessageQueue(topic, qd.broker_name, qid)
                try:
                    lo, hi = await asyncio.gather(admin.min_offset(mq), admin.max_offset(mq))
                except MQClientError as exc:
                    notes.append(f"offsets of {topic}/{qd.broker_name}/{qid}: {exc}")
                    continue
                queues.append(
                    QueueRow(
                        **base,
                        topic=topic,
                        brokerName=qd.broker_name,
                        queueId=qid,
                        minOffset=max(lo, 0),
                        maxOffset=max(hi, 0),
                    )
                )

    step(f"reading routes and offsets of {len(topics)} topics")
    await asyncio.gather(*(_bounded(limit, one_topic(t)) for t in topics))

    if groups is None:
        keys: set[str] = set()
        for addr in sorted(set(masters.values())):
            try:
                wrapper = await admin.all_consumer_offsets(addr)
                keys |= set(wrapper.offset_table)
            except MQClientError as exc:
                notes.append(f"consumer offsets of {addr}: {exc}")
        group_list = sorted(groups_from(keys, await admin.topic_list()))
    else:
        group_list = sorted(set(groups))

    offsets: list[BaseModel] = []
    clients: list[BaseModel] = []
    subscriptions: list[BaseModel] = []
    ownership: list[BaseModel] = []
    views: list[BaseModel] = []
    relay_refused: list[str] = []

    async def one_group(group: str) -> None:
        try:
            stats = await admin.consume_stats(group)
        except MQClientError as exc:
            notes.append(f"consume stats of {group}: {exc}")
            stats = None
        if stats is not None:
            table = sorted(stats.offset_table.items())
            oldest = await asyncio.gather(
                *(
                    _bounded(
                        limit,
                        oldest_unconsumed(
                            admin,
                            MessageQueue(mq.topic, mq.broker_name, mq.queue_id),
                            w.consumer_offset,
                            notes,
                        ),
                    )
                    if w.consumer_offset < w.broker_offset
                    else _none()
                    for mq, w in table
                )
            )
            for (mq, w), oldest_ts in zip(table, oldest, strict=True):
                offsets.append(
                    OffsetRow(
                        **base,
                        group=group,
                        topic=mq.topic,
                        brokerName=mq.broker_name,
                        queueId=mq.queue_id,
                        brokerOffset=max(w.broker_offset, 0),
                        consumerOffset=max(w.consumer_offset, 0),
                        lastTimestamp=max(w.last_timestamp, 0),
                        oldestUnconsumedTimestamp=oldest_ts,
                    )
                )
        try:
            conn = await admin.consumer_connection(group)
        except MQClientError:
            return  # offline group: its offsets above still make its backlog
        for addr in await group_broker_addrs(admin, group):
            try:
                ids = await admin.instance.broker.get_consumer_id_list(addr, group)
            except MQClientError:
                ids = []  # a client asking this broker gets no list and skips its rebalance
            views.append(
                ConsumerViewRow(**base, group=group, brokerAddr=addr, consumerIds=sorted(ids))
            )
        model = conn.message_model.value if conn.message_model is not None else None
        for c in sorted(conn.connection_set, key=lambda c: c.client_id):
            info = await running_info(admin, group, c.client_id, relay_refused)
            clients.append(
                ClientRow(
                    **base,
                    group=group,
                    clientId=c.client_id,
                    clientAddr=c.client_addr,
                    language=c.language,
                    version=c.version,
                    consumeType=conn.consume_type.value if conn.consume_type else None,
                    messageModel=(info.message_model if info and info.message_model else model),
                    consumeFromWhere=(
                        conn.consume_from_where.value if conn.consume_from_where else None
                    ),
                    allocateStrategy=info.strategy if info else None,
                    runningInfo=info is not None,
                )
            )
            subs = (
                info.subscriptions
                if info is not None
                else [
                    (s.topic, s.sub_string, s.expression_type, s.sub_version)
                    for s in conn.subscription_table.values()
                ]
            )
            for topic, sub, kind, version in subs:
                subscriptions.append(
                    SubscriptionRow(
                        **base,
                        group=group,
                        clientId=c.client_id,
                        topic=topic,
                        subString=sub,
                        expressionType=kind,
                        subVersion=version,
                    )
                )
            for topic, broker, qid in info.owned if info is not None else []:
                ownership.append(
                    OwnershipRow(
                        **base,
                        group=group,
                        clientId=c.client_id,
                        topic=topic,
                        brokerName=broker,
                        queueId=qid,
                    )
                )

    step(f"reading {len(group_list)} consumer groups")
    await asyncio.gather(*(_bounded(limit, one_group(g)) for g in group_list))
    if relay_refused:
        notes.append(
            "GET_CONSUMER_RUNNING_INFO (307) not relayed for "
            f"{len(relay_refused)} client(s) ({relay_refused[0]}); their owned queues are unknown "
            "and their subscriptions are the group's merged ones"
        )
    meta = SnapshotMeta(
        snapshotId=sid,
        takenAt=taken,
        finishedAt=int(clock() * 1000),
        namesrv=namesrv,
        notes=sorted(notes),
    )
    return Collected(
        meta,
        {
            "routes": sorted(routes, key=_key),
            "queues": sorted(queues, key=_key),
            "offsets": sorted(offsets, key=_key),
            "clients": sorted(clients, key=_key),
            "subscriptions": sorted(subscriptions, key=_key),
            "ownership": sorted(ownership, key=_key),
            "views": sorted(views, key=_key),
        },
    )


def _key(row: BaseModel) -> tuple[str, ...]:
    return tuple(str(v) for v in row.model_dump().values())


async def group_broker_addrs(admin: AdminClient, group: str) -> list[str]:
    """Masters serving the group's retry topic (every master when it has none yet)."""
    try:
        route = await admin.topic_route(RETRY_GROUP_TOPIC_PREFIX + group)
        addrs = {bd.broker_addrs[0] for bd in route.broker_datas if 0 in bd.broker_addrs}
    except MQClientError:
        addrs = set()
    if not addrs:
        addrs = set((await admin.master_addrs()).values())
    return sorted(addrs)


async def running_info(
    admin: AdminClient, group: str, client_id: str, refused: list[str]
) -> RunningInfo | None:
    """Ask the group's broker to relay GET_CONSUMER_RUNNING_INFO to ``client_id``; None if not."""
    addrs = await group_broker_addrs(admin, group)
    for addr in addrs:
        request = RemotingCommand.request(
            RequestCode.GET_CONSUMER_RUNNING_INFO,
            {"consumerGroup": group, "clientId": client_id, "jstackEnable": "false"},
        )
        try:
            response = await admin.instance.broker.remoting.invoke(addr, request, RELAY_TIMEOUT_S)
        except (RemotingError, ValueError):
            continue
        if response.code != ResponseCode.SUCCESS:
            refused.append(
                f"{client_id} via {addr}: code {response.code} {response.remark or ''}".strip()
            )
            return None
        try:
            return parse_running_info(fastjson.loads(response.body_bytes()))
        except (ValueError, KeyError, TypeError) as exc:
            refused.append(f"{client_id}: unreadable running info ({exc})")
            return None
    refused.append(f"{client_id}: no broker reachable")
    return None


async def collect_to(
    admin: Any,
    namesrv: str,
    out: Path,
    *,
    groups: Iterable[str] | None = None,
    progress: Callable[[str], None] | None = None,
) -> tuple[Path, Collected]:
    """Collect and write one snapshot under ``out`` (the fsyncs run in a thread)."""
    got = await collect(admin, namesrv, groups=groups, progress=progress)
    path = await asyncio.to_thread(write_snapshot, out, got.meta, got.tables)
    return path, got
