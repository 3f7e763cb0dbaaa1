"""Latency fault tolerance: the digest's tables, isolation after failures, retries avoiding a
broker, and one table shared by many threads."""

from __future__ import annotations

import itertools
import sys
import threading
import time
from collections.abc import Callable

import pytest
from ferrymq.client.allocate import MessageQueue
from ferrymq.client.latency_fault import (
    FaultItem,
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


def test_fault_table_from_many_threads_stays_consistent() -> None:
    """Writers, removers and readers share one table, as the threads of a SyncProducer do.

    Every write stores latency == not-available duration at ``now=0``, so an entry whose
    ``start_timestamp`` differs from its ``current_latency`` was torn by a concurrent update.
    A tiny switch interval makes the interpreter change threads between almost every bytecode.
    """
    tol = LatencyFaultTolerance()
    strategy = MQFaultStrategy(send_latency_fault_enable=True, tolerance=tol)
    names = [f"broker-{i}" for i in range(8)]
    mqs = [MessageQueue("T", name, q) for name in names for q in range(2)]
    errors: list[BaseException] = []
    torn: list[FaultItem] = []
    rounds = 20_000
    deadline = time.monotonic() + 30.0
    writing = threading.Event()
    writing.set()
    # every thread waits for all: the writes overlap the reads
    together = threading.Barrier(8, timeout=30.0)

    def writer(seed: int) -> None:
        together.wait()
        for i in range(rounds):
            if time.monotonic() > deadline:
                return
            name = names[(seed + i) % len(names)]
            latency = seed * 100_000 + i
            tol.update(name, latency, latency, now=0)
            if i % 7 == 0:
                tol.remove(names[(seed * 3 + i) % len(names)])

    def reader(seed: int) -> None:
        # reads as long as any writer writes
        index = itertools.count(seed)
        i = 0
        together.wait()
        while writing.is_set() and time.monotonic() < deadline:
            i += 1
            picked = tol.pick_one_at_least(now=i)
            assert picked is None or picked in names
            mq = strategy.select_queue(mqs, lambda: next(index), names[seed], now=i)
            assert mq in mqs
            for _ in range(8):
                for key, item in tol.snapshot().items():
                    if key != item.name or item.start_timestamp != item.current_latency:
                        torn.append(item)

    def guarded(fn: Callable[[int], None], seed: int) -> Callable[[], None]:
        def run() -> None:
            try:
                fn(seed)
            except BaseException as exc:  # reported by the test thread below
                errors.append(exc)

        return run

    writers = [threading.Thread(target=guarded(writer, s)) for s in range(4)]
    readers = [threading.Thread(target=guarded(reader, s)) for s in range(4)]
    threads = writers + readers
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for t in threads:
            t.start()
        for t in writers:
            t.join(timeout=60.0)
        writing.clear()
        for t in readers:
            t.join(timeout=60.0)
    finally:
        sys.setswitchinterval(interval)
    assert not any(t.is_alive() for t in threads), "a thread is stuck on the fault table"
    assert errors == []
    assert torn == []
    # the table holds only what was written, each entry under its own name
    final = tol.snapshot()
    assert set(final) <= set(names)
    assert all(item.start_timestamp == item.current_latency for item in final.values())
