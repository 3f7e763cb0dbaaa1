"""Allocation strategies: upstream examples, exact Java golden vectors, and hypothesis invariants."""

from __future__ import annotations

from collections import Counter
from typing import NamedTuple

import pytest
from ferrymq.client.allocate import (
    AllocateError,
    MessageQueue,
    allocate,
    allocate_all,
    allocate_averagely,
    allocate_averagely_by_circle,
    allocate_by_config,
    allocate_by_machine_room,
    allocate_consistent_hash,
    md5_hash,
    queue_key,
    strategy_name,
)
from hypothesis import given
from hypothesis import strategies as st


def queues(
    n: int, brokers: tuple[str, ...] = ("broker-a",), topic: str = "T"
) -> list[MessageQueue]:
    return sorted(MessageQueue(topic, b, q) for b in brokers for q in range(n))


CIDS3 = ["c1", "c2", "c3"]


def test_averagely_matches_digest_example() -> None:
    mqs = queues(8)
    got = {cid: [mq.queue_id for mq in allocate_averagely("g", cid, mqs, CIDS3)] for cid in CIDS3}
    assert got == {"c1": [0, 1, 2], "c2": [3, 4, 5], "c3": [6, 7]}


def test_by_circle_matches_digest_example() -> None:
    mqs = queues(8)
    got = {
        cid: [mq.queue_id for mq in allocate_averagely_by_circle("g", cid, mqs, CIDS3)]
        for cid in CIDS3
    }
    assert got == {"c1": [0, 3, 6], "c2": [1, 4, 7], "c3": [2, 5]}


def test_averagely_more_consumers_than_queues_leaves_extras_idle() -> None:
    mqs = queues(2)
    cids = ["a", "b", "c", "d"]
    got = {cid: allocate_averagely("g", cid, mqs, cids) for cid in cids}
    assert got == {"a": [mqs[0]], "b": [mqs[1]], "c": [], "d": []}


# Computed by the upstream algorithm in Java 17 (ConsistentHashRouter + MD5Hash, 10 virtual nodes,
# String.getBytes, TreeMap.tailMap) for clients 127.0.0.1@1001..1003 and TopicTest on two brokers.
JAVA_RING_OWNERS = {
    ("broker-a", 0): "127.0.0.1@1001",
    ("broker-a", 1): "127.0.0.1@1001",
    ("broker-a", 2): "127.0.0.1@1003",
    ("broker-a", 3): "127.0.0.1@1002",
    ("broker-a", 4): "127.0.0.1@1003",
    ("broker-a", 5): "127.0.0.1@1002",
    ("broker-a", 6): "127.0.0.1@1003",
    ("broker-a", 7): "127.0.0.1@1001",
    ("broker-b", 0): "127.0.0.1@1001",
    ("broker-b", 1): "127.0.0.1@1002",
    ("broker-b", 2): "127.0.0.1@1002",
    ("broker-b", 3): "127.0.0.1@1001",
    ("broker-b", 4): "127.0.0.1@1003",
    ("broker-b", 5): "127.0.0.1@1003",
    ("broker-b", 6): "127.0.0.1@1003",
    ("broker-b", 7): "127.0.0.1@1002",
}


def test_consistent_hash_matches_java_golden_vectors() -> None:
    assert md5_hash("MessageQueue [topic=TopicTest, brokerName=broker-a, queueId=0]") == 1987926524
    assert md5_hash("MessageQueue [topic=TopicTest, brokerName=broker-b, queueId=7]") == 173348582
    mqs = queues(8, ("broker-a", "broker-b"), topic="TopicTest")
    cids = ["127.0.0.1@1001", "127.0.0.1@1002", "127.0.0.1@1003"]
    owners = {
        (mq.broker_name, mq.queue_id): cid
        for cid, owned in allocate_all("CONSISTENT_HASH", "g", mqs, cids).items()
        for mq in owned
    }
    assert owners == JAVA_RING_OWNERS


def test_queue_key_is_upstream_to_string() -> None:
    mq = MessageQueue("T", "b", 3)
    assert str(mq) == queue_key(mq) == "MessageQueue [topic=T, brokerName=b, queueId=3]"


def test_machine_room() -> None:
    mqs = sorted(
        [
            MessageQueue("T", f"{room}@b{i}", q)
            for room in ("hz", "sh")
            for i in (1, 2)
            for q in range(2)
        ]
    )
    got = allocate_all("MACHINE_ROOM", "g", mqs, ["c1", "c2", "c3"], machine_rooms={"hz"})
    hz = [mq for mq in mqs if mq.broker_name.startswith("hz@")]
    # 4 eligible queues, 3 clients: one each in a block, the remainder to the first client.
    assert got == {"c1": [hz[0], hz[3]], "c2": [hz[1]], "c3": [hz[2]]}
    plain = [MessageQueue("T", "broker-a", 0), MessageQueue("T", "hz@", 0)]
    assert allocate_by_machine_room("g", "c1", plain, ["c1"], machine_rooms={"hz", ""}) == []


def test_by_config_returns_configured_list() -> None:
    configured = [MessageQueue("T", "x", 9)]
    assert allocate_by_config("g", "c1", queues(2), ["c2"], config_queues=configured) == configured
    assert allocate("CONFIG", "g", "c1", queues(2), ["c1"], config_queues=configured) == configured


def test_lookup_by_upstream_names() -> None:
    assert strategy_name("AVG") == "AVG"
    assert strategy_name("AllocateMessageQueueAveragelyByCircle") == "AVG_BY_CIRCLE"
    assert (
        strategy_name(
            "org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueConsistentHash"
        )
        == "CONSISTENT_HASH"
    )
    with pytest.raises(AllocateError, match="unknown allocation strategy 'ROUND'"):
        strategy_name("ROUND")
    with pytest.raises(AllocateError, match="config_queues"):
        allocate("CONFIG", "g", "c1", queues(2), ["c1"])
    with pytest.raises(AllocateError, match="machine_rooms"):
        allocate("MACHINE_ROOM", "g", "c1", queues(2), ["c1"])


@pytest.mark.parametrize("strategy", ["AVG", "AVG_BY_CIRCLE", "CONSISTENT_HASH"])
def test_illegal_arguments(strategy: str) -> None:
    with pytest.raises(AllocateError, match="currentCID is empty"):
        allocate(strategy, "g", "", queues(2), ["c1"])
    with pytest.raises(AllocateError, match="mqAll"):
        allocate(strategy, "g", "c1", [], ["c1"])
    with pytest.raises(AllocateError, match="cidAll"):
        allocate(strategy, "g", "c1", queues(2), [])
    # Not (yet) known to the broker: own nothing rather than steal a queue.
    assert allocate(strategy, "g", "c9", queues(2), ["c1"]) == []


def test_negative_virtual_nodes_rejected() -> None:
    with pytest.raises(AllocateError, match="virtualNodeCnt"):
        allocate_consistent_hash("g", "c1", queues(2), ["c1"], virtual_nodes=-1)


class SparkStyleMQ(NamedTuple):
    """Another caller's queue type with the same field order (the Spark audit has one)."""

    topic: str
    brokerName: str
    queueId: int


def test_accepts_other_queue_tuples_and_returns_them() -> None:
    mqs = [SparkStyleMQ("T", "b", i) for i in range(4)]
    got = allocate("CONSISTENT_HASH", "g", "c1", mqs, ["c1"])
    assert got == mqs and all(isinstance(mq, SparkStyleMQ) for mq in got)


mq_lists = st.lists(
    st.tuples(
        st.sampled_from(["T", "U"]),
        st.sampled_from(["broker-a", "broker-b", "broker-c"]),
        st.integers(0, 31),
    ),
    min_size=1,
    max_size=64,
    unique=True,
).map(lambda items: sorted(MessageQueue(*i) for i in items))
cid_lists = st.lists(
    st.from_regex(r"10\.0\.0\.[0-9]{1,3}@[0-9]{1,5}", fullmatch=True),
    min_size=1,
    max_size=12,
    unique=True,
).map(sorted)


@given(
    mqs=mq_lists,
    cids=cid_lists,
    strategy=st.sampled_from(["AVG", "AVG_BY_CIRCLE", "CONSISTENT_HASH"]),
)
def test_every_queue_owned_exactly_once(
    mqs: list[MessageQueue], cids: list[str], strategy: str
) -> None:
    owned = Counter(mq for part in allocate_all(strategy, "g", mqs, cids).values() for mq in part)
    assert set(owned) == set(mqs)
    assert all(n == 1 for n in owned.values())


@given(mqs=mq_lists, cids=cid_lists, strategy=st.sampled_from(["AVG", "AVG_BY_CIRCLE"]))
def test_average_strategies_are_balanced(
    mqs: list[MessageQueue], cids: list[str], strategy: str
) -> None:
    sizes = [len(part) for part in allocate_all(strategy, "g", mqs, cids).values()]
    assert max(sizes) - min(sizes) <= 1
    assert max(sizes) == -(-len(mqs) // len(cids))


@given(
    mqs=mq_lists,
    cids=cid_lists,
    strategy=st.sampled_from(["AVG", "AVG_BY_CIRCLE", "CONSISTENT_HASH"]),
    data=st.data(),
)
def test_deterministic_across_clients(
    mqs: list[MessageQueue], cids: list[str], strategy: str, data: st.DataObject
) -> None:
    """Each client computes alone from fresh copies of the same sorted view: same answer every time."""
    me = data.draw(st.sampled_from(cids))
    first = allocate(strategy, "g", me, list(mqs), list(cids))
    second = allocate(strategy, "g2", me, tuple(reversed(list(reversed(mqs)))), tuple(cids))
    assert first == second


@given(mqs=mq_lists, cids=cid_lists, rooms=st.sets(st.sampled_from(["hz", "sh", "bj"]), max_size=3))
def test_machine_room_owns_each_eligible_queue_once(
    mqs: list[MessageQueue], cids: list[str], rooms: set[str]
) -> None:
    roomed = sorted(
        MessageQueue(mq.topic, f"{room}@{mq.broker_name}", mq.queue_id)
        for mq in mqs
        for room in ("hz", "sh")
    )
    owned = Counter(
        mq
        for part in allocate_all("MACHINE_ROOM", "g", roomed, cids, machine_rooms=rooms).values()
        for mq in part
    )
    eligible = {mq for mq in roomed if mq.broker_name.split("@")[0] in rooms}
    assert set(owned) == eligible
    assert all(n == 1 for n in owned.values())


@given(mqs=mq_lists, cids=cid_lists.filter(lambda c: len(c) >= 2))
def test_consistent_hash_moves_only_the_leavers_queues(
    mqs: list[MessageQueue], cids: list[str]
) -> None:
    """The reason to pick the ring: when one client leaves, queues of the others stay put."""
    before = allocate_all("CONSISTENT_HASH", "g", mqs, cids)
    leaver = cids[0]
    after = allocate_all("CONSISTENT_HASH", "g", mqs, cids[1:])
    for cid in cids[1:]:
        assert set(before[cid]) <= set(after[cid])
    assert {mq for part in after.values() for mq in part} == set(mqs)
    assert leaver not in after
