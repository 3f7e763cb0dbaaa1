"""Crafting snapshot histories for the job tests: compact specs -> real snapshot directories."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

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

T0 = 1_790_000_000_000  # a fixed epoch ms so ids and times are reproducible


@dataclass
class Client:
    cid: str
    owns: Sequence[tuple[str, str, int]] | None = ()  # (topic, broker, qid); None = no report
    subs: dict[str, str] = field(default_factory=dict)  # topic -> subString
    strategy: str | None = "AVG"
    seen: Sequence[str] | None = None


@dataclass
class Spec:
    """One snapshot: queue max offsets, group consumer offsets, group clients."""

    at: int
    max_offsets: dict[tuple[str, str, int], int]  # (topic, broker, qid) -> max offset
    offsets: dict[tuple[str, str, str, int], int] = field(default_factory=dict)  # group,... -> off
    clients: dict[str, list[Client]] = field(default_factory=dict)  # group -> clients
    routes: dict[str, list[tuple[str, int, int]]] | None = None  # topic -> (broker, nums, perm)
    last_consumed_ts: dict[tuple[str, str, str, int], int] = field(default_factory=dict)
    # store time of the message at the consumer offset (the collector's oldestUnconsumedTimestamp)
    oldest_unconsumed_ts: dict[tuple[str, str, str, int], int] = field(default_factory=dict)
    views: dict[str, dict[str, list[str]]] = field(default_factory=dict)  # group -> broker -> ids


def write_history(root: Path, specs: Iterable[Spec]) -> list[Path]:
    out = []
    for spec in specs:
        sid = snapshot_id_for(spec.at)
        base = {"snapshotId": sid, "takenAt": spec.at}
        routes_spec = spec.routes
        if routes_spec is None:
            per: dict[str, dict[str, int]] = {}
            for topic, broker, qid in spec.max_offsets:
                per.setdefault(topic, {})
                per[topic][broker] = max(per[topic].get(broker, 0), qid + 1)
            routes_spec = {t: [(b, n, 6) for b, n in sorted(bs.items())] for t, bs in per.items()}
        routes = [
            RouteRow(**base, topic=t, brokerName=b, readQueueNums=n, writeQueueNums=n, perm=p)
            for t, rs in routes_spec.items()
            for b, n, p in rs
        ]
        queues = [
            QueueRow(
                **base,
                topic=t,
                brokerName=b,
                queueId=q,
                minOffset=0,
                maxOffset=m,
                lastStoreTimestamp=spec.at - 1,
            )
            for (t, b, q), m in sorted(spec.max_offsets.items())
        ]
        offsets = [
            OffsetRow(
                **base,
                group=g,
                topic=t,
                brokerName=b,
                queueId=q,
                brokerOffset=spec.max_offsets[(t, b, q)],
                consumerOffset=o,
                lastTimestamp=spec.last_consumed_ts.get((g, t, b, q), 0),
                oldestUnconsumedTimestamp=spec.oldest_unconsumed_ts.get((g, t, b, q)),
            )
            for (g, t, b, q), o in sorted(spec.offsets.items())
        ]
        clients, subs, owns = [], [], []
        for g, cl in sorted(spec.clients.items()):
            for c in cl:
                clients.append(
                    ClientRow(
                        **base,
                        group=g,
                        clientId=c.cid,
                        messageModel="CLUSTERING",
                        allocateStrategy=c.strategy,
                        seenConsumerIds=list(c.seen) if c.seen is not None else None,
                        runningInfo=c.owns is not None,
                    )
                )
                subs.extend(
                    SubscriptionRow(**base, group=g, clientId=c.cid, topic=t, subString=s)
                    for t, s in sorted(c.subs.items())
                )
                owns.extend(
                    OwnershipRow(**base, group=g, clientId=c.cid, topic=t, brokerName=b, queueId=q)
                    for t, b, q in (c.owns or ())
                )
        views = [
            ConsumerViewRow(**base, group=g, brokerAddr=b, consumerIds=ids)
            for g, per in sorted(spec.views.items())
            for b, ids in sorted(per.items())
        ]
        meta = SnapshotMeta(
            snapshotId=sid, takenAt=spec.at, finishedAt=spec.at + 5, namesrv="127.0.0.1:9876"
        )
        out.append(
            write_snapshot(
                root,
                meta,
                {
                    "routes": routes,
                    "queues": queues,
                    "offsets": offsets,
                    "clients": clients,
                    "subscriptions": subs,
                    "ownership": owns,
                    "views": views,
                },
            )
        )
    return out
