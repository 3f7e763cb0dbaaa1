"""A replica outside its group's SyncStateSet is visible: seconds outside, one warning past the
bound, the Prometheus series (issue 34, item 1)."""

from __future__ import annotations

import logging

import pytest
from ferrymq.broker.sync_state_watch import SyncStateCollector, SyncStateWatch
from ferrymq.controller.protocol import ReplicaInfo
from prometheus_client import CollectorRegistry, generate_latest


def info(*members: int) -> ReplicaInfo:
    return ReplicaInfo(1, "127.0.0.1:1", "127.0.0.1:2", 1, frozenset(members))


def test_time_outside_the_set_the_warning_and_the_series(caplog: pytest.LogCaptureFixture) -> None:
    now = [100.0]
    watch = SyncStateWatch("broker-a", 3, bound_s=30, clock=lambda: now[0])
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SyncStateCollector({"cluster": "c", "broker": "broker-a"}, watch.figures))
    caplog.set_level(logging.WARNING, "ferrymq.broker.sync_state_watch")
    now[0] = 110.0
    watch.observe(info(1, 2), detail="HA client not connected to no address")
    assert watch.figures().out_of_sync_seconds == 10.0  # outside since it started
    now[0] = 131.0
    watch.observe(info(1, 2))
    now[0] = 140.0
    watch.observe(info(1, 2))
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "replica 3 of broker-a" in warnings[0]
    assert "one copy less" in warnings[0]
    text = generate_latest(registry).decode()
    assert (
        'ferrymq_controller_replica_out_of_sync_state_set_seconds{broker="broker-a",'
        'cluster="c",replica="3"} 40.0' in text
    )
    assert 'ferrymq_controller_replica_in_sync_state_set{broker="broker-a",cluster="c",' in text
    now[0] = 150.0
    watch.observe(info(1, 2, 3))
    figures = watch.figures()
    assert figures.in_sync_state_set and figures.out_of_sync_seconds == 0.0
    assert "again after 50.0 s outside" in caplog.records[-1].getMessage()
