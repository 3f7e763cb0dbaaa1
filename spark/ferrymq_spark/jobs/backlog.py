"""Backlog analysis: which consumer groups fall behind, since when, and who owns the lagging queues.

Input: a snapshot history (and optionally one broker's store files for exact time lag).
Output (``run``): ``queues.parquet`` (latest state per group/topic/queue with lag, time lag,
Burrow status and owners), ``lag_history.parquet`` (lag per snapshot per group/topic/queue),
``summary.json`` (per group and per group/topic: total lag, time lag, status; top lagging groups)
and ``report.html``. The decisions are the pure rules of :mod:`ferrymq_spark.rules`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from ferrymq_spark import rules
from ferrymq_spark.snapshot import SnapshotHistory

QUEUE_KEY = ["group", "topic", "brokerName", "queueId"]
DEFAULT_WINDOW = 10

_STATUS_SCHEMA = (
    "group string, topic string, brokerName string, queueId long, status string, samples long"
)


def lag_history(history: SnapshotHistory, spark: SparkSession) -> DataFrame:
    """Offsets of every snapshot with the message lag of each row."""
    offsets = history.table(spark, "offsets")
    return offsets.withColumn(
        "lag", F.greatest(F.col("brokerOffset") - F.col("consumerOffset"), F.lit(0))
    )


def live_owners(history: SnapshotHistory, spark: SparkSession) -> DataFrame:
    """Per queue of the latest snapshot: its reported owners and whether someone live consumes it.

    A queue has a live owner when a client of the latest snapshot reports owning it; for a group
    whose clients report no ownership at all (running info unavailable), any live client
    subscribed to the topic counts, since it would take the queue on its next rebalance.
    """
    sid = history.latest.snapshotId
    clients = history.table(spark, "clients").where(F.col("snapshotId") == sid)
    owners = (
        history.table(spark, "ownership")
        .where(F.col("snapshotId") == sid)
        .join(clients.select("group", "clientId"), ["group", "clientId"], "inner")
        .groupBy(*QUEUE_KEY)
        .agg(F.sort_array(F.collect_set("clientId")).alias("owners"))
    )
    reporting = (
        clients.where(F.col("runningInfo"))
        .select("group")
        .distinct()
        .withColumn("reports", F.lit(True))
    )
    subscribed = (
        history.table(spark, "subscriptions")
        .where(F.col("snapshotId") == sid)
        .join(clients.select("group", "clientId"), ["group", "clientId"], "inner")
        .select("group", "topic")
        .distinct()
        .withColumn("subscribed", F.lit(True))
    )
    latest = lag_history(history, spark).where(F.col("snapshotId") == sid).select(*QUEUE_KEY)
    return (
        latest.join(owners, QUEUE_KEY, "left")
        .join(reporting, ["group"], "left")
        .join(subscribed, ["group", "topic"], "left")
        .withColumn("owners", F.coalesce(F.col("owners"), F.array().cast("array<string>")))
        .withColumn(
            "liveOwner",
            (F.size("owners") > 0)
            | (F.col("reports").isNull() & F.coalesce(F.col("subscribed"), F.lit(False))),
        )
        .drop("reports", "subscribed")
    )


def _known_ms(value: Any) -> int | None:
    """A nullable long from pandas (None, NaN or pd.NA when unknown) as an int or None."""
    return None if value is None or pd.isna(value) else int(value)


def _evaluate_window(pdf: pd.DataFrame, min_samples: int, ok: rules.OkLimits) -> pd.DataFrame:
    """applyInPandas body: one queue's window -> its Burrow status (pure rule inside)."""
    pdf = pdf.sort_values("takenAt")
    window = [
        rules.Sample(int(t), int(c), int(b), _known_ms(m))
        for t, c, b, m in zip(
            pdf["takenAt"],
            pdf["consumerOffset"],
            pdf["brokerOffset"],
            pdf["timeLagMs"],
            strict=True,
        )
    ]
    status = rules.evaluate_queue(
        window, live_owner=bool(pdf["liveOwner"].iloc[-1]), min_samples=min_samples, ok=ok
    )
    first = pdf.iloc[0]
    return pd.DataFrame(
        [
            {
                "group": first["group"],
                "topic": first["topic"],
                "brokerName": first["brokerName"],
                "queueId": int(first["queueId"]),
                "status": status.value,
                "samples": len(window),
            }
        ]
    )


def queue_status(
    history: SnapshotHistory,
    spark: SparkSession,
    *,
    window: int = DEFAULT_WINDOW,
    min_samples: int = 2,
    owners: DataFrame | None = None,
    ok: rules.OkLimits = rules.OkLimits(),  # frozen: one shared default is safe
) -> DataFrame:
    """Burrow-style status of every queue of the latest snapshot over the last ``window`` snapshots."""
    if window < 1:
        raise ValueError(f"window must be >= 1 snapshot, got {window}")
    ids = [m.snapshotId for m in history.metas[-window:]]
    if owners is None:
        owners = live_owners(history, spark)
    samples = (
        lag_history(history, spark)
        .where(F.col("snapshotId").isin(ids))
        .join(owners.select(*QUEUE_KEY, "liveOwner"), QUEUE_KEY, "inner")
        .withColumn("timeLagMs", _sample_time_lag())
        .select(*QUEUE_KEY, "takenAt", "consumerOffset", "brokerOffset", "timeLagMs", "liveOwner")
    )

    def evaluate(pdf: pd.DataFrame) -> pd.DataFrame:
        return _evaluate_window(pdf, min_samples, ok)

    return samples.groupBy(*QUEUE_KEY).applyInPandas(evaluate, schema=_STATUS_SCHEMA)


def _sample_time_lag() -> Any:
    """Exact time lag of a history row, when its snapshot collected the oldest unconsumed time."""
    oldest = F.col("oldestUnconsumedTimestamp")
    return (
        F.when(F.col("lag") <= 0, F.lit(0).cast("long"))
        .when(oldest > 0, F.greatest(F.col("takenAt") - oldest, F.lit(0)))
        .otherwise(F.lit(None).cast("long"))
    )


STORE_TIMES_SCHEMA = "topic string, queueId int, queueOffset long, storeTimestamp long"


def store_times(store: DataFrame, broker_name: str) -> DataFrame:
    """``(brokerName, topic, queueId, queueOffset, storeTimestamp)`` from a commitlog scan."""
    return store.select(
        F.lit(broker_name).alias("brokerName"), "topic", "queueId", "queueOffset", "storeTimestamp"
    )


def latest_queues(
    history: SnapshotHistory,
    spark: SparkSession,
    *,
    store: DataFrame | None = None,
    window: int = DEFAULT_WINDOW,
    ok: rules.OkLimits = rules.OkLimits(),  # frozen: one shared default is safe
) -> DataFrame:
    """The latest snapshot's queues with lag, time lag (and its source), status and owners."""
    meta = history.latest
    latest = lag_history(history, spark).where(F.col("snapshotId") == meta.snapshotId)
    if store is not None:
        at_offset = store.withColumnRenamed("queueOffset", "consumerOffset").withColumnRenamed(
            "storeTimestamp", "storeTsAtOffset"
        )
        latest = latest.join(
            at_offset, ["brokerName", "topic", "queueId", "consumerOffset"], "left"
        )
    else:
        latest = latest.withColumn("storeTsAtOffset", F.lit(None).cast("long"))
    oldest = F.coalesce(F.col("oldestUnconsumedTimestamp"), F.col("storeTsAtOffset"))
    taken = F.col("takenAt")
    latest = (
        latest.withColumn(
            "timeLagSource",
            F.when(F.col("lag") <= 0, F.lit("none"))
            .when(oldest > 0, F.lit("store"))
            .when(F.col("lastTimestamp") > 0, F.lit("last-consumed"))
            .otherwise(F.lit("unknown")),
        )
        .withColumn(
            "timeLagMs",
            F.when(F.col("lag") <= 0, F.lit(0).cast("long"))
            .when(oldest > 0, F.greatest(taken - oldest, F.lit(0)))
            .when(F.col("lastTimestamp") > 0, F.greatest(taken - F.col("lastTimestamp"), F.lit(0)))
            .otherwise(F.lit(None).cast("long")),
        )
        .drop("storeTsAtOffset")
    )
    owners = live_owners(history, spark).cache()
    status = queue_status(history, spark, window=window, owners=owners, ok=ok)
    return (
        latest.join(status, QUEUE_KEY, "left")
        .join(owners, QUEUE_KEY, "left")
        .withColumn("status", F.coalesce(F.col("status"), F.lit(rules.QueueStatus.OK.value)))
        .select(
            "snapshotId",
            "takenAt",
            *QUEUE_KEY,
            "brokerOffset",
            "consumerOffset",
            "lag",
            "timeLagMs",
            "timeLagSource",
            "status",
            "samples",
            "owners",
            "liveOwner",
            "lastTimestamp",
        )
    )


@dataclass
class BacklogSummary:
    """The JSON summary: plain values, ready for ``orjson.dumps``."""

    snapshotId: str
    takenAt: int
    snapshots: int
    window: int
    groups: list[dict[str, Any]] = field(default_factory=list)
    topics: list[dict[str, Any]] = field(default_factory=list)
    topLagging: list[dict[str, Any]] = field(default_factory=list)
    laggingQueues: list[dict[str, Any]] = field(default_factory=list)
    okLag: int = rules.DEFAULT_OK_LAG
    healthyLaggingQueues: int = 0


def summarize(
    queues: pd.DataFrame,
    history: SnapshotHistory,
    window: int,
    top: int = 10,
    ok_lag: int = rules.DEFAULT_OK_LAG,
) -> BacklogSummary:
    """Per group/topic and per group roll-up of the latest queue table (small: done in pandas).

    ``laggingQueues`` lists the queues that are not OK or lag more than ``ok_lag`` messages; the
    small healthy lags of busy groups are only counted (``healthyLaggingQueues``).
    """
    meta = history.latest
    out = BacklogSummary(meta.snapshotId, meta.takenAt, len(history.metas), window, okLag=ok_lag)
    if queues.empty:
        return out

    def time_lag_max(series: pd.Series) -> int | None:
        values = [int(v) for v in series.dropna()]
        return max(values) if values else None

    for (group, topic), part in queues.groupby(["group", "topic"], sort=True):
        statuses = [rules.QueueStatus(s) for s in part["status"]]
        out.topics.append(
            {
                "group": group,
                "topic": topic,
                "lag": int(part["lag"].sum()),
                "timeLagMs": time_lag_max(part["timeLagMs"]),
                "status": rules.worst_queue_status(statuses).value,
                "groupStatus": rules.group_status(statuses).value,
                "queues": len(part),
                "laggingQueues": int((part["lag"] > 0).sum()),
            }
        )
    for group, part in queues.groupby("group", sort=True):
        statuses = [rules.QueueStatus(s) for s in part["status"]]
        out.groups.append(
            {
                "group": group,
                "lag": int(part["lag"].sum()),
                "timeLagMs": time_lag_max(part["timeLagMs"]),
                "status": rules.group_status(statuses).value,
                "topics": sorted(set(part["topic"])),
            }
        )
    ranked = sorted(out.groups, key=lambda g: (-g["lag"], g["group"]))
    out.topLagging = [
        {"group": g["group"], "lag": g["lag"], "timeLagMs": g["timeLagMs"], "status": g["status"]}
        for g in ranked[:top]
        if g["lag"] > 0
    ]
    behind = queues[queues["lag"] > 0]
    notable = (behind["status"] != rules.QueueStatus.OK.value) | (behind["lag"] > ok_lag)
    out.healthyLaggingQueues = int((~notable).sum())
    lagging = behind[notable].sort_values(["lag", "group"], ascending=[False, True])
    for row in lagging.itertuples(index=False):
        out.laggingQueues.append(
            {
                "group": row.group,
                "topic": row.topic,
                "brokerName": row.brokerName,
                "queueId": int(row.queueId),
                "lag": int(row.lag),
                "consumerOffset": int(row.consumerOffset),
                "brokerOffset": int(row.brokerOffset),
                "lastConsumedAt": _known_ms(row.lastTimestamp) or None,
                "timeLagMs": None if pd.isna(row.timeLagMs) else int(row.timeLagMs),
                "timeLagSource": row.timeLagSource,
                "status": row.status,
                "owners": list(row.owners) if row.owners is not None else [],
            }
        )
    return out


@dataclass(frozen=True)
class BacklogArgs:
    snapshots: Path
    out: Path
    store: Path | None = None
    store_broker: str | None = None
    window: int = DEFAULT_WINDOW
    top: int = 10
    ok_lag: int = rules.DEFAULT_OK_LAG
    ok_time_lag_ms: int = rules.DEFAULT_OK_TIME_LAG_MS
    last: int | None = None


Progress = Callable[[str], None]


def _resolve_store_broker(args: BacklogArgs, queues_brokers: list[str]) -> str:
    if args.store_broker:
        return args.store_broker
    if len(queues_brokers) == 1:
        return queues_brokers[0]
    raise ValueError(
        "--store holds one broker's files but the snapshots name brokers "
        f"{queues_brokers}; pass --store-broker to say which one it is"
    )


def run(spark: SparkSession, args: BacklogArgs, progress: Progress | None = None) -> BacklogSummary:
    """Run the backlog analysis and write its outputs under ``args.out``."""
    from ferrymq_spark import report
    from ferrymq_spark.snapshot import open_history

    step = progress or (lambda _msg: None)
    step("reading snapshot history")
    history = open_history(args.snapshots, limit=args.last)
    store_df = None
    if args.store is not None:
        step("scanning store files")
        brokers = sorted(
            {
                r.brokerName
                for r in history.table(spark, "queues").select("brokerName").distinct().collect()
            }
            | {
                r.brokerName
                for r in history.table(spark, "offsets").select("brokerName").distinct().collect()
            }
        )
        broker = _resolve_store_broker(args, brokers)
        # Only the columns store_times uses: a Python data source gets no column pruning.
        scan = (
            spark.read.format("ferrymq-commitlog").schema(STORE_TIMES_SCHEMA).load(str(args.store))
        )
        store_df = store_times(scan, broker)
    step("evaluating queues")
    # computed once, then both collected for the summary and written as Parquet
    ok = rules.OkLimits(args.ok_lag, args.ok_time_lag_ms)
    queues_df = latest_queues(history, spark, store=store_df, window=args.window, ok=ok).cache()
    args.out.mkdir(parents=True, exist_ok=True)
    queues_pdf = queues_df.toPandas()
    queues_df.write.mode("overwrite").parquet(str(args.out / "queues.parquet"))
    step("building lag history")
    hist_df = (
        lag_history(history, spark)
        .withColumn("timeLagMs", _sample_time_lag())
        .select("snapshotId", "takenAt", *QUEUE_KEY, "lag", "timeLagMs")
        .cache()
    )
    hist_df.write.mode("overwrite").parquet(str(args.out / "lag_history.parquet"))
    hist_pdf = hist_df.toPandas()
    step("writing summary and report")
    summary = summarize(queues_pdf, history, args.window, args.top, args.ok_lag)
    (args.out / "summary.json").write_bytes(
        orjson.dumps(asdict(summary), option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS)
    )
    (args.out / "report.html").write_text(
        report.render_backlog(asdict(summary), hist_pdf, queues_pdf), encoding="utf-8"
    )
    queues_df.unpersist()
    hist_df.unpersist()
    history.release()
    return summary
