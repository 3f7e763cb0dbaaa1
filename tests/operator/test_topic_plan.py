"""Pure decisions of the Topic/ConsumerGroup reconciler: names, duplicates, shrink, drift text,
status conditions."""

from __future__ import annotations

import pytest
from ferrymq_operator.topics import conditions, plan
from ferrymq_operator.topics import models as tm


def test_managed_name_defaults_to_metadata_name_and_refuses_what_brokers_refuse() -> None:
    assert plan.managed_name(None, "orders", "topic") == "orders"
    assert plan.managed_name("Order_Events", "orders", "topic") == "Order_Events"
    with pytest.raises(ValueError, match=r"set spec\.name"):
        plan.managed_name(None, "orders.v2", "topic")  # a dot: fine for Kubernetes, not RocketMQ
    with pytest.raises(ValueError, match="reserved"):
        plan.managed_name("%RETRY%billing", "x", "topic")
    with pytest.raises(ValueError, match=r"set spec\.name"):
        plan.managed_name(None, "a.b", "consumer group")


@pytest.mark.parametrize(
    "name", ["%RETRY%g", "%DLQ%g", "rmq_sys_x", "RMQ_SYS_TRACE_TOPIC", "RMQ_SYS_x", "TBW102"]
)
@pytest.mark.parametrize("kind", ["topic", "consumer group"])
def test_managed_name_refuses_the_brokers_system_names(name: str, kind: str) -> None:
    with pytest.raises(ValueError, match="reserved"):
        plan.managed_name(name, "x", kind)


def claim(resource: str, created: str, name: str = "orders", broker: str = "b") -> plan.Claim:
    return plan.Claim(resource, broker, name, created)


def test_the_older_claim_wins_and_the_later_changes_nothing() -> None:
    first = claim("first", "2026-11-24T10:00:00Z")
    second = claim("second", "2026-11-24T10:05:00Z")
    assert plan.earlier_claim(second, [first, second]) == first
    assert plan.earlier_claim(first, [first, second]) is None
    # same second: the smaller metadata.name wins, on both sides
    a, b = claim("a", "2026-11-24T10:00:00Z"), claim("b", "2026-11-24T10:00:00Z")
    assert plan.earlier_claim(b, [a]) == a and plan.earlier_claim(a, [b]) is None
    # another Broker or another name is no duplicate
    assert plan.earlier_claim(second, [claim("x", "2000-01-01T00:00:00Z", broker="c")]) is None
    assert plan.earlier_claim(second, [claim("x", "2000-01-01T00:00:00Z", name="other")]) is None


def test_claim_of_reads_the_spec_name_or_the_metadata_name() -> None:
    item = {
        "metadata": {"name": "t", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"brokerRef": {"name": "b"}, "name": "Real_Name"},
    }
    assert plan.claim_of(item) == plan.Claim("t", "b", "Real_Name", "2026-01-01T00:00:00Z")
    assert plan.claim_of({"metadata": {"name": "t"}, "spec": {}}) is None


def state(read: int, write: int, **kw: object) -> plan.TopicState:
    return plan.TopicState(read, write, 6, False, {"message.type": "NORMAL"}, **kw)  # type: ignore[arg-type]


def test_desired_topic_from_spec() -> None:
    spec = tm.parse_topic_spec(
        {"brokerRef": {"name": "b"}, "readQueueNums": 4, "writeQueueNums": 2, "order": True}
    )
    assert plan.desired_topic(spec) == plan.TopicState(4, 2, 6, True, {"message.type": "NORMAL"})


def test_grow_is_applied_at_once() -> None:
    desired, actual = state(8, 8), state(4, 4)
    assert plan.removed_read_queues(desired, actual) == range(0)
    assert plan.target_topic(desired, actual, drained=False) == desired
    assert plan.differences(desired, actual) == ["readQueueNums 4 -> 8", "writeQueueNums 4 -> 8"]


def test_shrink_stops_writes_first_and_removes_read_queues_only_when_drained() -> None:
    desired, actual = state(2, 2), state(4, 4)
    assert plan.removed_read_queues(desired, actual) == range(2, 4)
    held = plan.target_topic(desired, actual, drained=False)
    assert (held.read_queue_nums, held.write_queue_nums) == (4, 2)
    assert plan.target_topic(desired, actual, drained=True) == desired


def test_backlog_of_removed_queues() -> None:
    consumed = plan.QueueBacklog(2, max_offset=10, min_offset=0, committed={"g1": 10, "g2": 7})
    empty = plan.QueueBacklog(3, max_offset=5, min_offset=5)  # expired, no group ever read it
    unread = plan.QueueBacklog(3, max_offset=5, min_offset=2)
    assert plan.undrained([consumed, empty]) == {"g2": 3}
    assert plan.undrained([plan.QueueBacklog(2, 10, 0, {"g1": 10}), empty]) == {}
    assert plan.undrained([unread]) == {"(no consumer group)": 3}
    message = plan.shrink_message("b-broker-0", range(2, 4), {"g2": 3})
    assert "queues 2..3" in message and "g2 (3 left)" in message and "stays 4" in message


def test_attribute_drift_is_named() -> None:
    desired = state(4, 4)
    actual = plan.TopicState(4, 4, 6, False, {"message.type": "FIFO"})
    assert plan.differences(desired, actual) == [
        "attributes {'message.type': 'FIFO'} -> {'message.type': 'NORMAL'}"
    ]


def test_group_differences_use_upstream_field_names() -> None:
    desired = plan.desired_group(tm.parse_group_spec({"brokerRef": {"name": "b"}}))
    actual = {**desired, "retry_max_times": 3}
    assert plan.group_differences(desired, actual) == ["retryMaxTimes 3 -> 16"]
    assert plan.group_differences(desired, desired) == []


def test_status_conditions() -> None:
    previous = tm.ObjectStatus()
    ready = conditions.build(previous, 3, conditions.Outcome("ok"), "t0", queues="8/8")
    by_type = {c["type"]: c for c in ready["conditions"]}
    assert by_type["Ready"]["status"] == "True" and by_type["ReconcileFailed"]["status"] == "False"
    assert all(c["observedGeneration"] == 3 for c in ready["conditions"])
    assert ready["queues"] == "8/8" and ready["observedGeneration"] == 3

    dup = conditions.build(
        tm.ObjectStatus.model_validate(ready), 3, conditions.Outcome("taken", "DuplicateName"), "t1"
    )
    by_type = {c["type"]: c for c in dup["conditions"]}
    assert (by_type["Ready"]["status"], by_type["Ready"]["reason"]) == ("False", "DuplicateName")
    assert by_type["ReconcileFailed"]["status"] == "True"
    assert by_type["Ready"]["lastTransitionTime"] == "t1"

    shrink = conditions.build(previous, 4, conditions.Outcome("wait", "ShrinkPending"), "t2")
    by_type = {c["type"]: c for c in shrink["conditions"]}
    assert by_type["Ready"]["reason"] == "ShrinkPending"
    assert by_type["ReconcileFailed"]["status"] == "False"  # waiting, not failing


def test_unmanaged_count_leaves_out_system_and_managed_names() -> None:
    from ferrymq_operator.topics.unmanaged import Inventory, count

    inventories = [
        Inventory(
            "b-broker-0",
            "b",
            frozenset({"TBW102", "b", "b-broker-0", "%RETRY%g", "orders", "legacy"}),
            frozenset({"TOOLS_CONSUMER", "billing", "old"}),
        ),
        Inventory("b-broker-1", "b", frozenset({"b-broker-1", "legacy", "x"}), frozenset()),
    ]
    assert count(inventories, ["orders"], ["billing"]) == {"topics": 2, "groups": 1}
    assert count(inventories, [], []) == {"topics": 3, "groups": 2}
