"""Rebalance audit: is every queue consumed by exactly one consumer of its group, and fairly?

For each snapshot and clustering group, the expected allocation is recomputed with the client's
own pure strategies (:mod:`ferrymq.client.allocate`, the code the consumers run) over the route's
readable queues and the group's connected clients, and compared with the queues each client
reports owning. Findings (:class:`ferrymq_spark.rules.Finding`): orphan queues, queues owned
twice, imbalance under AVG/AVG_BY_CIRCLE (max - min > 1), allocation mismatch, clients of a group
with different subscriptions or strategies or consumer lists, and allocation churn between
consecutive snapshots.

Spark gathers each group's rows of every table into one frame (a tagged union, ``kind`` column)
and ``applyInPandas`` runs the pure rules per group over its whole history.

Output (``run``): ``findings.parquet`` (every snapshot), ``summary.json`` (latest snapshot's
findings, churn across the history, what was audited, notes) and ``report.html``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from ferrymq_spark import rules
from ferrymq_spark.snapshot import SnapshotHistory

SEP = "\x01"  # joins a client's seen consumer list into one string column

_OUT_SCHEMA = (
    "record string, snapshotId string, takenAt long, group string, topic string, kind string, "
    "severity string, detail string, clients array<string>, queues array<string>, "
    "strategy string, nClients long, nQueues long"
)
OUT_COLUMNS = [c.strip().split(" ", 1)[0] for c in _OUT_SCHEMA.split(",")]


def normalize_strategy(name: str | None) -> str | None:
    """Upstream ``getName()`` of a strategy spelling, or the text as given if unknown."""
    if not name:
        return None
    from ferrymq.client.allocate import AllocateError, strategy_name

    try:
        return strategy_name(name)
    except AllocateError:
        return name


def client_allocate(
    strategy: str, group: str, cid: str, mq_all: list[rules.MQ], cid_all: list[str]
) -> list[rules.MQ]:
    """The client's allocation for ``cid`` (raises ValueError for CONFIG/MACHINE_ROOM: their
    configuration is not in a snapshot)."""
    from ferrymq.client.allocate import allocate

    return allocate(strategy, group, cid, mq_all, cid_all)


def gather(history: SnapshotHistory, spark: SparkSession) -> DataFrame:
    """One frame per group of client, subscription, ownership and route rows (``kind`` tags them).

    Broadcasting groups are left out: every consumer takes every queue there, nothing to allocate.
    """
    clients = history.table(spark, "clients").where(
        F.coalesce(F.upper(F.col("messageModel")), F.lit("CLUSTERING")) != "BROADCASTING"
    )
    keys = clients.select("snapshotId", "group", "clientId")
    subs = history.table(spark, "subscriptions").join(keys, ["snapshotId", "group", "clientId"])
    owns = history.table(spark, "ownership").join(keys, ["snapshotId", "group", "clientId"])
    group_topics = subs.select("snapshotId", "group", "topic").distinct()
    routes = history.table(spark, "routes").join(group_topics, ["snapshotId", "topic"])
    views = history.table(spark, "views").join(
        clients.select("snapshotId", "group").distinct(), ["snapshotId", "group"]
    )
    null_s, null_l = F.lit(None).cast("string"), F.lit(None).cast("long")

    def shape(df: DataFrame, kind: str, **cols: Any) -> DataFrame:
        base = {
            "snapshotId": F.col("snapshotId"),
            "takenAt": F.col("takenAt"),
            "group": F.col("group"),
            "kind": F.lit(kind),
            "clientId": null_s,
            "topic": null_s,
            "brokerName": null_s,
            "queueId": null_l,
            "num": null_l,
            "text": null_s,
            "text2": null_s,
        }
        base.update(cols)
        return df.select(*[v.alias(k) for k, v in base.items()])

    return (
        shape(
            clients,
            "client",
            clientId=F.col("clientId"),
            num=F.col("runningInfo").cast("long"),
            text=F.col("allocateStrategy"),
            text2=F.concat_ws(SEP, F.col("seenConsumerIds")),
            queueId=F.col("seenConsumerIds").isNotNull().cast("long"),
        )
        .unionByName(
            shape(
                subs,
                "sub",
                clientId=F.col("clientId"),
                topic=F.col("topic"),
                text=F.col("subString"),
            )
        )
        .unionByName(
            shape(
                owns,
                "own",
                clientId=F.col("clientId"),
                topic=F.col("topic"),
                brokerName=F.col("brokerName"),
                queueId=F.col("queueId"),
            )
        )
        .unionByName(
            shape(
                views,
                "view",
                text=F.col("brokerAddr"),
                text2=F.concat_ws(SEP, F.col("consumerIds")),
            )
        )
        .unionByName(
            shape(
                routes,
                "route",
                topic=F.col("topic"),
                brokerName=F.col("brokerName"),
                num=F.col("readQueueNums"),
                queueId=F.col("perm"),
            )
        )
    )


def _views(snap: pd.DataFrame) -> tuple[list[rules.TopicView], dict[str, Any]]:
    """TopicViews of one group in one snapshot, plus the group-wide client facts."""
    group = str(snap["group"].iloc[0])
    clients = snap[snap["kind"] == "client"]
    cid_all = tuple(sorted(set(clients["clientId"])))
    reporting = set(clients[clients["num"] == 1]["clientId"])
    strategies = {
        str(r.clientId): normalize_strategy(r.text if isinstance(r.text, str) else None)
        for r in clients.itertuples()
    }
    named = [s for s in strategies.values() if s]
    strategy = Counter(named).most_common(1)[0][0] if named else rules.DEFAULT_STRATEGY
    seen: dict[str, list[str] | None] = {
        str(r.clientId): ([c for c in str(r.text2).split(SEP) if c] if r.queueId == 1 else None)
        for r in clients.itertuples()
    }
    subs = snap[snap["kind"] == "sub"]
    subscriptions: dict[str, dict[str, str]] = {c: {} for c in cid_all}
    for r in subs.itertuples():
        subscriptions[str(r.clientId)][str(r.topic)] = str(r.text)
    owns = snap[snap["kind"] == "own"]
    routes = snap[snap["kind"] == "route"]
    views = []
    for topic in sorted(set(subs["topic"])):
        rt = routes[routes["topic"] == topic]
        mq_all = rules.readable_queues(
            topic, [(str(r.brokerName), int(r.num), int(r.queueId)) for r in rt.itertuples()]
        )
        ot = owns[owns["topic"] == topic]
        owned = {
            c: frozenset(
                rules.MQ(topic, str(r.brokerName), int(r.queueId))
                for r in ot[ot["clientId"] == c].itertuples()
            )
            for c in cid_all
            if c in reporting
        }
        # Upstream clients rebalance a topic over the group's whole consumer list, subscribed to
        # the topic or not: a client that does not subscribe still takes a share, which nobody
        # then consumes. So every reporting client counts, owning nothing here if not subscribed.
        views.append(rules.TopicView(group, topic, tuple(mq_all), cid_all, owned, strategy))
    broker_views = {
        str(r.text): [c for c in str(r.text2).split(SEP) if c]
        for r in snap[snap["kind"] == "view"].itertuples()
    }
    facts = {
        "broker_views": broker_views,
        "subscriptions": subscriptions,
        "strategies": strategies,
        "cid_all": cid_all,
        "seen": seen,
    }
    return views, facts


def _row(record: str, sid: str, at: int, group: str, **kw: Any) -> dict[str, Any]:
    row: dict[str, Any] = dict.fromkeys(OUT_COLUMNS)
    row.update(record=record, snapshotId=sid, takenAt=at, group=group, clients=[], queues=[])
    row.update(kw)
    return row


def _finding_row(sid: str, at: int, f: rules.AuditFinding) -> dict[str, Any]:
    return _row(
        "finding",
        sid,
        at,
        f.group,
        topic=f.topic,
        kind=f.kind.value,
        severity=f.severity.value,
        detail=f.detail,
        clients=list(f.clients),
        queues=list(f.queues),
    )


def audit_group(
    pdf: pd.DataFrame, allocate: rules.AllocateFn | None = client_allocate
) -> pd.DataFrame:
    """applyInPandas body: every snapshot of one group -> finding / audited / note rows."""
    out: list[dict[str, Any]] = []
    previous: dict[str, rules.TopicView] = {}
    for (sid, at), snap in pdf.sort_values("takenAt").groupby(
        ["snapshotId", "takenAt"], sort=False
    ):
        sid, at = str(sid), int(at)
        views, facts = _views(snap)
        group = str(snap["group"].iloc[0])
        for f in rules.audit_group_clients(
            group,
            facts["subscriptions"],
            facts["strategies"],
            facts["cid_all"],
            facts["seen"],
            facts["broker_views"],
        ):
            out.append(_finding_row(sid, at, f))
        for v in views:
            res = rules.audit_topic(v, allocate)
            out.extend(_finding_row(sid, at, f) for f in res.findings)
            out.extend(_row("note", sid, at, group, topic=v.topic, detail=n) for n in res.notes)
            out.append(
                _row(
                    "audited",
                    sid,
                    at,
                    group,
                    topic=v.topic,
                    strategy=v.strategy,
                    nClients=len(v.cid_all),
                    nQueues=len(v.mq_all),
                    kind=str(len(res.findings)),
                )
            )
            before = previous.get(v.topic)
            if before is not None:
                churn = rules.allocation_churn(before, v)
                if churn is not None:
                    out.append(_finding_row(sid, at, churn))
            previous[v.topic] = v
    frame = pd.DataFrame(out, columns=OUT_COLUMNS)
    return frame.astype({"takenAt": "int64"}) if not frame.empty else frame


def audit(history: SnapshotHistory, spark: SparkSession) -> DataFrame:
    """All audit rows (findings, notes, audited topics) of every snapshot of the history."""

    def per_group(pdf: pd.DataFrame) -> pd.DataFrame:
        # one parameter: applyInPandas passes the grouping key too to two-parameter functions
        return audit_group(pdf)

    return gather(history, spark).groupBy("group").applyInPandas(per_group, schema=_OUT_SCHEMA)


@dataclass
class AuditSummary:
    snapshotId: str
    takenAt: int
    snapshots: int
    findings: list[dict[str, Any]] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    churn: list[dict[str, Any]] = field(default_factory=list)
    audited: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    timeline: list[dict[str, Any]] = field(default_factory=list)


def _text(value: Any) -> str | None:
    """An optional string column's value: pandas 3 reads a missing string as NaN, never output."""
    if value is None or (not isinstance(value, str) and pd.isna(value)):
        return None
    return str(value)


def finding_timeline(rows: pd.DataFrame, latest_sid: str) -> list[dict[str, Any]]:
    """Every finding of the whole history, once per (kind, severity, group, topic): when it was
    first and last seen, in how many snapshots, and whether the latest snapshot still has it.

    Findings that cleared stay visible here (an ORPHAN_QUEUE an hour ago is worth knowing).
    """
    found = rows[rows["record"] == "finding"]
    out = []
    keys = ["kind", "severity", "group", "topic"]
    for key, part in found.groupby(keys, dropna=False, sort=False):
        kind, severity, group, topic = key
        out.append(
            {
                "kind": kind,
                "severity": severity,
                "group": group,
                "topic": _text(topic),
                "firstSeen": int(part["takenAt"].min()),
                "lastSeen": int(part["takenAt"].max()),
                "snapshots": int(part["snapshotId"].nunique()),
                "current": bool((part["snapshotId"] == latest_sid).any()),
                "detail": str(part.sort_values("takenAt")["detail"].iloc[-1]),
            }
        )
    return sorted(out, key=lambda f: (-f["lastSeen"], f["group"], f["kind"], f["topic"] or ""))


def summarize(
    rows: pd.DataFrame, history: SnapshotHistory, offline_groups: Sequence[str] = ()
) -> AuditSummary:
    """``offline_groups``: groups of the latest snapshot with committed offsets but no client."""
    meta = history.latest
    out = AuditSummary(meta.snapshotId, meta.takenAt, len(history.metas))
    out.audited = [_offline(g) for g in sorted(offline_groups)]
    if rows.empty:
        return out
    out.timeline = finding_timeline(rows, meta.snapshotId)
    latest = rows[rows["snapshotId"] == meta.snapshotId]
    findings = latest[latest["record"] == "finding"].sort_values(
        ["group", "topic", "kind"], na_position="first"
    )
    for r in findings.itertuples(index=False):
        out.findings.append(
            {
                "snapshotId": r.snapshotId,
                "kind": r.kind,
                "severity": r.severity,
                "group": r.group,
                "topic": _text(r.topic),
                "detail": r.detail,
                "clients": list(r.clients),
                "queues": list(r.queues),
            }
        )
    out.counts = dict(sorted(Counter(f["kind"] for f in out.findings).items()))
    churn = rows[(rows["record"] == "finding") & (rows["kind"] == rules.Finding.ALLOCATION_CHURN)]
    for r in churn.sort_values("takenAt").itertuples(index=False):
        out.churn.append(
            {
                "snapshotId": r.snapshotId,
                "takenAt": int(r.takenAt),
                "group": r.group,
                "topic": _text(r.topic),
                "changed": len(r.queues),
                "severity": r.severity,
            }
        )
    for r in latest[latest["record"] == "audited"].sort_values(["group", "topic"]).itertuples():
        out.audited.append(
            {
                "group": r.group,
                "topic": _text(r.topic),
                "strategy": _text(r.strategy),
                "clients": int(r.nClients),
                "queues": int(r.nQueues),
                "findings": int(r.kind),
                "note": None,
            }
        )
    out.audited.sort(key=lambda a: (a["group"], a["topic"] or ""))
    out.notes = sorted(set(latest[latest["record"] == "note"]["detail"]))
    return out


def _offline(group: str) -> dict[str, Any]:
    return {
        "group": group,
        "topic": None,
        "strategy": None,
        "clients": 0,
        "queues": 0,
        "findings": 0,
        "note": "no consumer online: nothing to audit, its queues wait for a consumer",
    }


def offline_groups(history: SnapshotHistory, spark: SparkSession) -> list[str]:
    """Groups with offsets in the latest snapshot and no connected client there."""
    sid = history.latest.snapshotId

    def groups(table: str) -> set[str]:
        frame = history.table(spark, table).where(F.col("snapshotId") == sid)
        return {str(r.group) for r in frame.select("group").distinct().collect()}

    return sorted(groups("offsets") - groups("clients"))


def queue_shares(history: SnapshotHistory, spark: SparkSession) -> DataFrame:
    """Queues owned per client per group/topic in the latest snapshot (for the report)."""
    sid = history.latest.snapshotId
    return (
        history.table(spark, "ownership")
        .where(F.col("snapshotId") == sid)
        .groupBy("group", "topic", "clientId")
        .agg(F.count("*").alias("queues"))
        .orderBy("group", "topic", "clientId")
    )


@dataclass(frozen=True)
class AuditArgs:
    snapshots: Path
    out: Path
    last: int | None = None


def run(
    spark: SparkSession, args: AuditArgs, progress: Callable[[str], None] | None = None
) -> AuditSummary:
    """Run the rebalance audit and write its outputs under ``args.out``."""
    from ferrymq_spark import report
    from ferrymq_spark.snapshot import open_history

    step = progress or (lambda _msg: None)
    step("reading snapshot history")
    history = open_history(args.snapshots, limit=args.last)
    step("auditing allocations")
    rows_df = audit(history, spark).cache()  # collected for the summary and written as Parquet
    args.out.mkdir(parents=True, exist_ok=True)
    rows = rows_df.toPandas()
    findings = rows_df.where(F.col("record") == "finding").drop(
        "record", "strategy", "nClients", "nQueues"
    )
    findings.write.mode("overwrite").parquet(str(args.out / "findings.parquet"))
    step("writing summary and report")
    summary = summarize(rows, history, offline_groups(history, spark))
    (args.out / "summary.json").write_bytes(
        orjson.dumps(asdict(summary), option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS)
    )
    shares = queue_shares(history, spark).toPandas()
    churn = pd.DataFrame(summary.churn, columns=["takenAt", "group", "changed"])
    (args.out / "report.html").write_text(
        report.render_audit(asdict(summary), shares, churn), encoding="utf-8"
    )
    rows_df.unpersist()
    history.release()
    return summary
