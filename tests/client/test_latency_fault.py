"""Latency fault tolerance: the digest's tables, isolation after failures, retries avoiding a broker."""

from __future__ import annotations

import itertools

import pytest
from ferrymq.client.allocate import MessageQueue
from ferrymq.client.latency_fault import (
    LatencyFaultTolerance,
    MQFaultStrategy,
    compute_not_available_duration,
    select_round_robin,
)


@pytest.mark.parametrize(
    ("latency", "duration"),
    [
        (0, 0),
        (49, 0),
        (50, 0),
        (100, 0),
        (549, 0),
        (550, 30000),
        (999, 30000),
        (1000, 60000),
        (2000, 120000),
        (3000, 180000),
        (14999, 180000),
        (15000, 600000),
        (30000, 600000),
    ],
)
def test_not_available_duration_table(latency: int, duration: int) -> None:
    assert compute_not_available_duration(latency) == duration


def queues() -> list[MessageQueue]:
    return [MessageQueue("T", b, q) for b in ("broker-a", "broker-b") for q in range(4)]


def counter() -> itertools.count[int]:
    return itertools.count()


def test_round_robin_without_fault_tolerance() -> None:
    c = counter()
    qs = queues()
    picked = [select_round_robin(qs, lambda: next(c), None) for _ in range(8)]
    assert picked == qs


def test_retry_avoids_last_broker_when_another_exists() -> None:
    c = counter()
    qs = queues()
    for _ in range(20):
        assert select_round_robin(qs, lambda: next(c), "broker-a").broker_name == "broker-b"
    single = [MessageQueue("T", "broker-a", q) for q in range(2)]
    assert select_round_robin(single, lambda: next(c), "broker-a").broker_name == "broker-a"


def test_failed_send_isolates_broker_for_ten_minutes() -> None:
    strategy = MQFaultStrategy(send_latency_fault_enable=True)
    c = counter()
    now = 1_000_000
    strategy.update_fault_item("broker-a", 3000, isolation=True, now=now)
    for t in (now, now + 599_999):
        for _ in range(8):
            assert (
                strategy.select_queue(queues(), lambda: next(c), None, t).broker_name == "broker-b"
            )
    later = now + 600_000
    seen = {
        strategy.select_queue(queues(), lambda: next(c), None, later).broker_name for _ in range(8)
    }
    assert seen == {"broker-a", "broker-b"}


def test_slow_send_isolation_by_latency_bucket() -> None:
    strategy = MQFaultStrategy(send_latency_fault_enable=True)
    strategy.update_fault_item("broker-a", 700, isolation=False, now=0)
    assert not strategy.tolerance.is_available("broker-a", 29_999)
    assert strategy.tolerance.is_available("broker-a", 30_000)
    strategy.update_fault_item("broker-b", 40, isolation=False, now=0)
    assert strategy.tolerance.is_available("broker-b", 0)


def test_disabled_strategy_records_nothing() -> None:
    strategy = MQFaultStrategy(send_latency_fault_enable=False)
    strategy.update_fault_item("broker-a", 3000, isolation=True, now=0)
    assert strategy.tolerance.items == {}


def test_all_brokers_isolated_falls_back_to_least_bad() -> None:
    strategy = MQFaultStrategy(send_latency_fault_enable=True)
    strategy.update_fault_item("broker-a", 3000, isolation=True, now=0)  # 600 s
    strategy.update_fault_item("broker-b", 700, isolation=False, now=0)  # 30 s
    c = counter()
    picked = strategy.select_queue(queues(), lambda: next(c), None, 1000)
    # with two faulty brokers the better half is broker-b alone (lower latency)
    assert picked.broker_name == "broker-b"


def test_pick_one_at_least_ignores_brokers_gone_from_route() -> None:
    strategy = MQFaultStrategy(send_latency_fault_enable=True)
    strategy.update_fault_item("broker-x", 3000, isolation=True, now=0)
    strategy.update_fault_item("broker-a", 3000, isolation=True, now=0)
    strategy.update_fault_item("broker-b", 3000, isolation=True, now=0)
    c = counter()
    for _ in range(6):
        mq = strategy.select_queue(queues(), lambda: next(c), None, 10)
        assert mq.broker_name in {"broker-a", "broker-b"}


def test_pick_one_at_least_rotates_over_better_half() -> None:
    tol = LatencyFaultTolerance()
    for i, name in enumerate(["a", "b", "c", "d"]):
        tol.update(name, 100 * (i + 1), 10_000, now=0)
    picks = [tol.pick_one_at_least(now=1) for _ in range(4)]
    assert picks == ["a", "b", "a", "b"]
    assert LatencyFaultTolerance().pick_one_at_least(0) is None
