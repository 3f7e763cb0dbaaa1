"""The pure Burrow-style rules and the ETA, without I/O (see ferrymq.broker.lag.status)."""

from __future__ import annotations

from pathlib import Path

import pytest
from ferrymq.broker.broker_conf import load_broker_conf
from ferrymq.broker.lag.status import (
    NOT_CLEARING,
    LagStatus,
    Sample,
    eta_seconds,
    evaluate_group,
    evaluate_queue,
)
from ferrymq.properties import ConfigError


def window(
    commits: list[int], maxes: list[int], latencies: list[int] | None = None
) -> list[Sample]:
    lat = latencies or [0] * len(commits)
    return [
        Sample(at_ms=i * 1000, commit_offset=c, max_offset=m, latency_ms=lat_ms)
        for i, (c, m, lat_ms) in enumerate(zip(commits, maxes, lat, strict=True))
    ]


def test_no_samples_is_notfound_and_no_lag_is_ok() -> None:
    assert evaluate_queue([], consumer_online=True) is LagStatus.NOTFOUND
    assert evaluate_queue(window([0, 5, 10], [10, 10, 10]), consumer_online=False) is LagStatus.OK


def test_small_steady_lag_of_a_busy_group_is_ok() -> None:
    # commits trail the max by a pull batch that changes size: never zero, never growing
    commits = [100 * i for i in range(10)]
    maxes = [
        c + lag for c, lag in zip(commits, [32, 20, 40, 31, 25, 38, 30, 33, 29, 35], strict=True)
    ]
    assert evaluate_queue(window(commits, maxes, [50] * 10), consumer_online=True) is LagStatus.OK


def test_growing_lag_while_consuming_is_warn() -> None:
    commits = [10 * i for i in range(6)]
    maxes = [c + 100 * i for i, c in enumerate(commits)]
    assert evaluate_queue(window(commits, maxes), consumer_online=True) is LagStatus.WARN


def test_growing_time_lag_is_warn_even_with_flat_count() -> None:
    commits = [10 * i for i in range(6)]
    maxes = [c + 50 for c in commits]
    latencies = [1000 * i for i in range(6)]
    assert evaluate_queue(window(commits, maxes, latencies), consumer_online=True) is LagStatus.WARN


def test_growth_below_tolerance_is_noise() -> None:
    commits = [10 * i for i in range(6)]
    maxes = [c + 10 + i for i, c in enumerate(commits)]
    assert evaluate_queue(window(commits, maxes), consumer_online=True) is LagStatus.OK


def test_offset_not_moving_with_lag_is_stop_or_stall() -> None:
    samples = window([5, 5, 5, 5], [9, 9, 12, 12])
    assert evaluate_queue(samples, consumer_online=False) is LagStatus.STOP
    assert evaluate_queue(samples, consumer_online=True) is LagStatus.STALL


def test_too_few_samples_accuse_nobody() -> None:
    assert evaluate_queue(window([5, 5], [9, 9]), consumer_online=False) is LagStatus.OK


def test_offset_going_back_is_rewind() -> None:
    samples = window([50, 60, 10, 12], [100, 100, 100, 100])
    assert evaluate_queue(samples, consumer_online=True) is LagStatus.REWIND


def test_group_status_is_burrows() -> None:
    assert evaluate_group([]) is LagStatus.NOTFOUND
    assert evaluate_group([LagStatus.OK, LagStatus.OK]) is LagStatus.OK
    assert evaluate_group([LagStatus.OK, LagStatus.WARN]) is LagStatus.WARN
    for bad in (LagStatus.STOP, LagStatus.STALL, LagStatus.REWIND):
        assert evaluate_group([LagStatus.WARN, bad, LagStatus.OK]) is LagStatus.ERR


def test_eta() -> None:
    assert eta_seconds([]) == 0.0
    # 1000 -> 800 in 4 s: 50 msg/s net, 800 left: 16 s
    draining = window([0, 50, 100, 150, 200], [1000] * 5)
    assert eta_seconds(draining) == 16.0
    assert eta_seconds(window([0, 10], [10, 10])) == 0.0
    growing = window([0, 10, 20], [100, 200, 300])
    assert eta_seconds(growing) == NOT_CLEARING
    assert eta_seconds(window([0], [10])) == NOT_CLEARING


def test_lag_settings_from_broker_conf_and_environment(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("consumerLagWindow=60000\nconsumerLagPerQueueMetrics=true\n")
    cfg = load_broker_conf(conf, env={"FERRYMQ_consumerLagSampleInterval": "2000"}).lag
    assert cfg.consumer_lag_window == 60_000
    assert cfg.consumer_lag_per_queue_metrics is True
    assert cfg.consumer_lag_sample_interval == 2000


def test_bad_lag_settings_name_the_key(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("consumerLagWindow=1000\nconsumerLagSampleInterval=1000\n")
    with pytest.raises(ConfigError, match="consumerLagWindow"):
        load_broker_conf(conf, env={})
    conf.write_text("consumerLagSampleInterval=soon\n")
    with pytest.raises(ConfigError, match="consumerLagSampleInterval"):
        load_broker_conf(conf, env={})
