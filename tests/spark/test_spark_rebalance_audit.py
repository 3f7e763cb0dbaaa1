"""Rebalance audit on crafted snapshots: each finding from its own snapshot, none when healthy."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ferrymq_spark.jobs import rebalance_audit
from ferrymq_spark.snapshot import open_history
from spark_snapshot_factory import T0, Client, Spec, write_history

pytestmark = pytest.mark.spark

MIN = 60_000
QS = [("T", "b", i) for i in range(4)]
MAX = dict.fromkeys(QS, 10)


def healthy_clients() -> list[Client]:
    # AVG over 4 queues and [c1, c2]: c1 gets 0,1 and c2 gets 2,3
    return [
        Client("c1", owns=QS[:2], subs={"T": "*"}, seen=["c1", "c2"]),
        Client("c2", owns=QS[2:], subs={"T": "*"}, seen=["c1", "c2"]),
    ]


def run_audit(spark, tmp_path: Path, specs: list[Spec]) -> list:  # type: ignore[no-untyped-def]
    write_history(tmp_path / "s", specs)
    rows = rebalance_audit.audit(open_history(tmp_path / "s"), spark).toPandas()
    return [r for r in rows.itertuples() if r.record == "finding"]


def test_healthy_history_has_no_finding(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    specs = [
        Spec(at=T0 + i * MIN, max_offsets=MAX, clients={"g": healthy_clients()}) for i in range(3)
    ]
    assert run_audit(spark, tmp_path, specs) == []


CASES = {
    "ORPHAN_QUEUE": [
        Client("c1", owns=QS[:2], subs={"T": "*"}),
        Client("c2", owns=QS[2:3], subs={"T": "*"}),
    ],
    "DUPLICATE_OWNER": [
        Client("c1", owns=QS[:3], subs={"T": "*"}),
        Client("c2", owns=QS[2:], subs={"T": "*"}),
    ],
    "IMBALANCE": [Client("c1", owns=QS, subs={"T": "*"}), Client("c2", owns=[], subs={"T": "*"})],
    "ALLOCATION_MISMATCH": [
        Client("c1", owns=QS[2:], subs={"T": "*"}),
        Client("c2", owns=QS[:2], subs={"T": "*"}),
    ],
    "SUBSCRIPTION_MISMATCH": [
        Client("c1", owns=QS[:2], subs={"T": "*"}),
        Client("c2", owns=QS[2:], subs={"T": "TagA"}),
        Client("c3", owns=[], subs={"T": "*"}),
    ],
    "STRATEGY_MISMATCH": [
        Client("c1", owns=QS[:2], subs={"T": "*"}, strategy="AVG"),
        Client(
            "c2", owns=QS[2:], subs={"T": "*"}, strategy="AllocateMessageQueueAveragelyByCircle"
        ),
    ],
    "CONSUMER_VIEW_MISMATCH": [
        Client("c1", owns=QS[:2], subs={"T": "*"}, seen=["c1", "c2"]),
        Client("c2", owns=QS[2:], subs={"T": "*"}, seen=["c2"]),
    ],
}


def test_each_finding_from_a_crafted_snapshot(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """One group per case in one snapshot (groups are audited independently), plus a healthy one."""
    clients = {f"g-{kind}": cl for kind, cl in CASES.items()} | {
        "g-healthy": healthy_clients(),
        "g-split-brokers": healthy_clients(),
    }
    views = {
        "g-healthy": {"b1:1": ["c1", "c2"], "b2:1": ["c1", "c2"]},
        "g-split-brokers": {"b1:1": ["c1", "c2"], "b2:1": ["c2"]},
    }
    found = run_audit(spark, tmp_path, [Spec(at=T0, max_offsets=MAX, clients=clients, views=views)])
    by_group: dict[str, set[str]] = {}
    for f in found:
        by_group.setdefault(f.group, set()).add(f.kind)
    for kind in CASES:
        assert kind in by_group.get(f"g-{kind}", set()), (kind, by_group)
    assert "g-healthy" not in by_group
    # the precise cases raise nothing else
    assert by_group["g-DUPLICATE_OWNER"] == {"DUPLICATE_OWNER", "ALLOCATION_MISMATCH"}
    assert by_group["g-CONSUMER_VIEW_MISMATCH"] == {"CONSUMER_VIEW_MISMATCH"}
    assert by_group["g-STRATEGY_MISMATCH"] == {"STRATEGY_MISMATCH"}
    assert by_group["g-split-brokers"] == {"CONSUMER_VIEW_MISMATCH"}


def test_subscription_gap_leaves_orphans(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A client not subscribing to T still takes its AVG share of T: those queues are orphans."""
    clients = [Client("c1", owns=QS[:2], subs={"T": "*"}), Client("c2", owns=[], subs={"U": "*"})]
    found = run_audit(
        spark, tmp_path, [Spec(at=T0, max_offsets=MAX | {("U", "b", 0): 1}, clients={"g": clients})]
    )
    kinds = {(f.kind, f.topic if isinstance(f.topic, str) else None) for f in found}
    assert ("ORPHAN_QUEUE", "T") in kinds and ("SUBSCRIPTION_MISMATCH", None) in kinds
    orphan = next(f for f in found if f.kind == "ORPHAN_QUEUE" and f.topic == "T")
    assert list(orphan.queues) == ["b:2", "b:3"]


def test_churn_between_snapshots(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    flapped = [
        Client("c1", owns=[QS[0], QS[2]], subs={"T": "*"}),
        Client("c2", owns=[QS[1], QS[3]], subs={"T": "*"}),
    ]
    specs = [
        Spec(at=T0, max_offsets=MAX, clients={"g": healthy_clients()}),
        Spec(at=T0 + MIN, max_offsets=MAX, clients={"g": flapped}),
    ]
    churn = [f for f in run_audit(spark, tmp_path, specs) if f.kind == "ALLOCATION_CHURN"]
    assert (
        len(churn) == 1 and churn[0].severity == "WARN" and list(churn[0].queues) == ["b:1", "b:2"]
    )


def test_broadcasting_groups_are_not_audited(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from ferrymq.snapshot.writer import read_snapshot  # noqa: F401  (schema sanity import)

    specs = [Spec(at=T0, max_offsets=MAX, clients={"g": CASES["DUPLICATE_OWNER"]})]
    (d,) = write_history(tmp_path / "s", specs)
    text = (d / "clients.jsonl").read_text().replace('"CLUSTERING"', '"BROADCASTING"')
    (d / "clients.jsonl").write_text(text)
    rows = rebalance_audit.audit(open_history(tmp_path / "s"), spark).toPandas()
    assert rows.empty


def test_run_writes_outputs(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    offline = {("z", "T", "b", 0): 3}  # group z has committed offsets and no client
    specs = [
        Spec(at=T0, max_offsets=MAX, clients={"g": healthy_clients()}),
        Spec(at=T0 + MIN, max_offsets=MAX, clients={"g": CASES["ORPHAN_QUEUE"]}),
        Spec(at=T0 + 2 * MIN, max_offsets=MAX, offsets=offline, clients={"g": healthy_clients()}),
    ]
    write_history(tmp_path / "s", specs)
    summary = rebalance_audit.run(
        spark, rebalance_audit.AuditArgs(snapshots=tmp_path / "s", out=tmp_path / "o")
    )
    data = json.loads((tmp_path / "o" / "summary.json").read_text())
    # the latest snapshot is healthy again (only the churn back); the orphan of the snapshot
    # before stays on record
    assert [f["kind"] for f in data["findings"]] == ["ALLOCATION_CHURN"]
    assert "ORPHAN_QUEUE" not in data["counts"] and summary.counts == data["counts"]
    orphan = next(f for f in data["timeline"] if f["kind"] == "ORPHAN_QUEUE")
    assert (orphan["firstSeen"], orphan["lastSeen"]) == (T0 + MIN, T0 + MIN)
    assert orphan["snapshots"] == 1 and orphan["current"] is False
    audited = {a["group"]: a for a in data["audited"]}
    assert audited["g"] == {
        "group": "g",
        "topic": "T",
        "strategy": "AVG",
        "clients": 2,
        "queues": 4,
        "findings": 0,
        "note": None,
    }
    assert audited["z"]["clients"] == 0 and "no consumer online" in audited["z"]["note"]
    assert [c["changed"] for c in data["churn"]] == [1, 1]
    findings = spark.read.parquet(str(tmp_path / "o" / "findings.parquet"))
    assert findings.where("kind = 'ORPHAN_QUEUE'").count() == 1
    html = (tmp_path / "o" / "report.html").read_text()
    assert "ORPHAN_QUEUE" in html and "cleared" in html
    assert html.count("data:image/png;base64,") == 2


def test_a_nan_topic_never_reaches_the_summary(tmp_path: Path) -> None:
    """pandas 3 reads a group-level finding's missing topic back as NaN (float): the summary and
    the CLI table must show no topic, not 'nan' (and rich cannot render a float at all)."""
    import math

    import pandas as pd

    write_history(tmp_path / "s", [Spec(at=T0, max_offsets=MAX, offsets={})])
    history = open_history(tmp_path / "s")
    sid = history.latest.snapshotId
    row = dict.fromkeys(rebalance_audit.OUT_COLUMNS)
    row.update(
        record="finding",
        snapshotId=sid,
        takenAt=T0,
        group="g",
        topic=math.nan,
        kind="SUBSCRIPTION_MISMATCH",
        severity="ERROR",
        detail="clients subscribe differently",
        clients=["c1", "c2"],
        queues=[],
    )
    summary = rebalance_audit.summarize(pd.DataFrame([row]), history)
    assert [f["topic"] for f in summary.findings] == [None]
    assert json.dumps(summary.findings)  # plain JSON: no float NaN left
