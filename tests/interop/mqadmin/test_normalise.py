"""The mqadmin normaliser hides only what must differ (addresses, ids, times, rates) and keeps
what a user reads: a queue offset off by one, a different code or remark still differ."""

from __future__ import annotations

from . import normalise as n

ADDRS = {"127.0.0.1:20001": "<NS>", "127.0.0.1:20011": "<BROKER>"}


def view(text: str) -> list[str]:
    return n.lines(n.substitute(text, ADDRS))


def test_what_must_differ_is_replaced() -> None:
    a = view(
        "broker-a  0  127.0.0.1:20011  V5_4_0  2026-11-28 15:00:01,123  1795878010033\n"
        "OffsetID: 7F000001000075F00000000000000C1F  CommitLog Offset:   3103\n"
        "Properties: {TRACE_ON=true, KEYS=k}  /tmp/x/store/commitlog"
    )
    b = view(
        "broker-a  0  127.0.0.1:20011  V4_9_4  2026-11-28 15:07:09,999  1795878999999\n"
        "OffsetID: 7F00000100004E2E0000000000000202  CommitLog Offset: 514\n"
        "Properties: {KEYS=k, TRACE_ON=true}  /root/y/commitlog"
    )
    assert a == b
    assert "<BROKER>" in a[0] and "<VERSION>" in a[0] and "<TIME>" in a[0]


def test_what_a_user_reads_still_differs() -> None:
    row = "MQA_T  broker-a  0  {broker}  {consumer}  {diff}  0  2026-11-28 15:00:01"
    good = view(row.format(broker=5, consumer=4, diff=1))
    off_by_one = view(row.format(broker=5, consumer=5, diff=0))
    assert good != off_by_one
    remark = "CODE: 17 DESC: No topic route info in name server for the topic: T"
    assert view(remark) != view(remark.replace("17", "1"))
    assert n.progress_view(good) != n.progress_view(off_by_one)
    assert n.without_rates(["Consume TPS: 0.60 lag 3"]) != n.without_rates(
        ["Consume TPS: 0.00 lag 2"]
    )


def test_progress_view_drops_only_empty_retry_rows() -> None:
    rows = [
        "%RETRY%g broker-a 0 0 0 127.0.0.1 0 0",
        "%RETRY%g broker-a 0 3 1 127.0.0.1 2 0",
        "T broker-a 0 0 0 127.0.0.1 0 0",
    ]
    kept = n.progress_view(rows)
    assert len(kept) == 2
    assert kept[0].startswith("%RETRY%g broker-a 0 3 1")
    assert kept[1].startswith("T broker-a 0 0 0")


def test_epoch_view_hides_offsets_and_order_not_epochs() -> None:
    a = ["#clusterName c", "#brokerId 0", "#Epoch: EpochEntry{epoch=1, startOffset=0, endOffset=9}"]
    b = ["#clusterName c", "#brokerId 2", "#Epoch: EpochEntry{epoch=1, startOffset=5, endOffset=7}"]
    assert n.epoch_view(a + b) == n.epoch_view(b + a)
    two = [*a, "#Epoch: EpochEntry{epoch=2, startOffset=9, endOffset=9}"]
    assert n.epoch_view(two + b) != n.epoch_view(a + b)
    assert n.epoch_view([ln.replace("epoch=1", "epoch=3") for ln in a]) != n.epoch_view(a)


def test_route_view_keeps_who_is_master_where() -> None:
    row = "DefaultCluster broker-a {bid} <REPLICA{r}> <VERSION> 0.00(0,0ms) x y z 0.79 {act}"
    before = [row.format(bid=0, r=1, act="true"), row.format(bid=2, r=2, act="false")]
    after = [row.format(bid=0, r=2, act="true"), row.format(bid=1, r=1, act="false")]
    assert n.route_view(before) == [
        "DefaultCluster broker-a 0 <REPLICA1> true",
        "DefaultCluster broker-a 2 <REPLICA2> false",
    ]
    assert n.route_view(before) != n.route_view(after)
