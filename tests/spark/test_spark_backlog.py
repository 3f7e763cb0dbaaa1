"""Backlog job on crafted histories: exact lag figures, each Burrow status, owners, outputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ferrymq_spark import rules
from ferrymq_spark.jobs import backlog
from ferrymq_spark.snapshot import open_history
from spark_snapshot_factory import T0, Client, Spec, write_history

pytestmark = pytest.mark.spark

MIN = 60_000
# Burrow's statuses in their pure form: no lag counts as healthy (the OK band has its own tests)
STRICT = rules.OkLimits(lag=0, time_lag_ms=0)
Q = [("T", "b", i) for i in range(6)]


def crafted(tmp_path: Path) -> Path:
    """Six queues of topic T, one group g, four snapshots; each queue a different story.

    q0 OK (caught up), q1 WARN (advancing, lag growing), q2 STALL (stuck, owned by c1),
    q3 STOP (stuck, owned by nobody), q4 REWIND (offset went back), q5 OK (lag shrinking).
    A second group h reads q0 and is healthy.
    """
    stories = {  # (consumer offset, max offset) per snapshot
        0: [(5, 10), (20, 20), (30, 30), (40, 40)],
        1: [(10, 50), (20, 60), (30, 80), (40, 100)],
        2: [(10, 50), (10, 60), (10, 60), (10, 70)],
        3: [(10, 50), (10, 50), (10, 60), (10, 60)],
        4: [(40, 50), (45, 60), (20, 70), (30, 80)],
        5: [(10, 100), (40, 110), (70, 115), (100, 120)],
    }
    owners = {"c1": [Q[0], Q[1], Q[2]], "c2": [Q[4], Q[5]]}
    specs = []
    for i in range(4):
        specs.append(
            Spec(
                at=T0 + i * MIN,
                max_offsets={Q[q]: stories[q][i][1] for q in stories},
                offsets={("g", *Q[q]): stories[q][i][0] for q in stories}
                | {("h", *Q[0]): stories[0][i][1]},
                clients={
                    "g": [Client(c, owns=owners[c], subs={"T": "*"}) for c in ("c1", "c2")],
                    "h": [Client("c9", owns=[Q[0]], subs={"T": "*"})],
                },
                last_consumed_ts={("g", *Q[q]): T0 + i * MIN - 30_000 for q in stories},
            )
        )
    write_history(tmp_path / "snaps", specs)
    return tmp_path / "snaps"


def test_status_lag_and_owners(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    history = open_history(crafted(tmp_path))
    rows = {
        (r.group, r.queueId): r
        for r in backlog.latest_queues(history, spark, window=4, ok=STRICT).collect()
    }
    assert {q: rows[("g", q)].status for q in range(6)} == {
        0: "OK",
        1: "WARN",
        2: "STALL",
        3: "STOP",
        4: "REWIND",
        5: "OK",
    }
    assert rows[("h", 0)].status == "OK"
    assert {q: rows[("g", q)].lag for q in range(6)} == {0: 0, 1: 60, 2: 60, 3: 50, 4: 50, 5: 20}
    assert rows[("g", 2)].owners == ["c1"] and rows[("g", 3)].owners == []
    assert rows[("g", 1)].timeLagMs == 30_000 and rows[("g", 1)].timeLagSource == "last-consumed"
    assert rows[("g", 0)].timeLagMs == 0 and rows[("g", 0)].timeLagSource == "none"


def test_short_window_sees_only_recent_samples(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    history = open_history(crafted(tmp_path))
    rows = {
        r.queueId: r
        for r in backlog.queue_status(history, spark, window=2, ok=STRICT).collect()
        if r.group == "g"
    }
    # over the last two snapshots q4 advanced (20 -> 30) with a flat lag: OK (a flat lag is not
    # growth), and the rewind of the snapshot before is outside the window: not REWIND
    assert rows[4].status == "OK" and rows[4].samples == 2
    # q1's lag grew over the same two snapshots (50 -> 60): WARN
    assert rows[1].status == "WARN" and rows[1].samples == 2


def test_run_writes_parquet_summary_and_report(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    snaps = crafted(tmp_path)
    out = tmp_path / "out"
    steps: list[str] = []
    summary = backlog.run(
        spark, backlog.BacklogArgs(snapshots=snaps, out=out, window=4), steps.append
    )
    assert steps and steps[0] == "reading snapshot history"
    data = json.loads((out / "summary.json").read_text())
    groups = {g["group"]: g for g in data["groups"]}
    assert groups["g"]["lag"] == 240 and groups["g"]["status"] == "ERR"
    assert groups["h"]["lag"] == 0 and groups["h"]["status"] == "OK"
    topics = {(t["group"], t["topic"]): t for t in data["topics"]}
    assert topics[("g", "T")]["lag"] == 240 and topics[("g", "T")]["status"] == "STOP"
    assert topics[("g", "T")]["timeLagMs"] == 30_000
    assert [g["group"] for g in data["topLagging"]] == ["g"]
    # with the default OK band q1 (lag 40 -> 60, advancing) and q5 are healthy: counted, not listed
    assert sorted(q["queueId"] for q in data["laggingQueues"]) == [2, 3, 4]
    assert data["healthyLaggingQueues"] == 2 and data["okLag"] == 100
    q2 = next(q for q in data["laggingQueues"] if q["queueId"] == 2)
    assert (q2["lag"], q2["consumerOffset"], q2["brokerOffset"]) == (60, 10, 70)
    assert q2["lastConsumedAt"] == T0 + 3 * MIN - 30_000
    assert summary.snapshots == 4
    assert spark.read.parquet(str(out / "queues.parquet")).count() == 7
    assert spark.read.parquet(str(out / "lag_history.parquet")).count() == 28
    html = (out / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 2
    assert "http://" not in html and "https://" not in html  # self-contained
    assert "STALL" in html and "c1" in html
    assert "consumer offset" in html and "last consumed" in html


def test_time_lag_plot_when_store_times_are_collected(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Snapshots that carry the store time at the consumer offset give a time-lag plot and exact
    time lag in the status window (an old message on a quiet queue is STALL, not OK)."""
    specs = [
        Spec(
            at=T0 + i * MIN,
            max_offsets={Q[0]: 12},
            offsets={("g", *Q[0]): 10},
            clients={"g": [Client("c1", owns=[Q[0]], subs={"T": "*"})]},
            # the message at offset 10 was stored ten minutes before the first snapshot
            oldest_unconsumed_ts={("g", *Q[0]): T0 - 10 * MIN},
        )
        for i in range(3)
    ]
    write_history(tmp_path / "s", specs)
    out = tmp_path / "out"
    backlog.run(spark, backlog.BacklogArgs(snapshots=tmp_path / "s", out=out, window=3))
    data = json.loads((out / "summary.json").read_text())
    (queue,) = data["laggingQueues"]
    assert queue["status"] == "STALL" and queue["timeLagSource"] == "store"
    assert queue["timeLagMs"] == 12 * MIN
    html = (out / "report.html").read_text()
    assert "Time lag over time per group" in html


def test_store_broker_must_be_named_when_ambiguous(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    snaps = tmp_path / "s"
    write_history(snaps, [Spec(at=T0, max_offsets={("T", "a", 0): 1, ("T", "b", 0): 1})])
    store = tmp_path / "store"
    store.mkdir()
    with pytest.raises(ValueError, match="--store-broker"):
        backlog.run(spark, backlog.BacklogArgs(snapshots=snaps, out=tmp_path / "o", store=store))


def test_time_lag_from_the_store(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """With --store, time lag is the age of the message at the consumer offset, exactly."""
    from spark_store_factory import write_store

    puts = write_store(tmp_path / "store", [("T", i % 2, 100) for i in range(20)])
    by_q = {(p.queue_id, p.queue_offset): p for p in puts}
    taken = max(p.store_timestamp for p in puts) + 5_000
    write_history(
        tmp_path / "snaps",
        [
            Spec(
                at=taken,
                max_offsets={("T", "b", 0): 10, ("T", "b", 1): 10},
                offsets={("g", "T", "b", 0): 4, ("g", "T", "b", 1): 10},
                clients={"g": [Client("c1", owns=[("T", "b", 0), ("T", "b", 1)], subs={"T": "*"})]},
                last_consumed_ts={("g", "T", "b", 0): 1},
            )
        ],
    )
    summary = backlog.run(
        spark,
        backlog.BacklogArgs(
            snapshots=tmp_path / "snaps",
            out=tmp_path / "out",
            store=tmp_path / "store",
            ok_lag=0,  # list every lagging queue: the point here is its exact time lag
        ),
    )
    (q,) = summary.laggingQueues
    assert (q["queueId"], q["lag"], q["timeLagSource"]) == (0, 6, "store")
    assert q["timeLagMs"] == taken - by_q[(0, 4)].store_timestamp
    assert q["owners"] == ["c1"]
