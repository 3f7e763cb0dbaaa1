"""Consumer lag on a live broker's /metrics, scraped by a real Prometheus server: the backlog,
the lag latency, Burrow-style statuses and the ETA, as an SRE's queries see them."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest
from ferrymq.broker.lag.config import LagConfig
from ferrymq.broker.lag.status import LagStatus
from ferrymq.client import Message, Producer

from .obs_helpers import Consumer, ObsCluster, produce, wait_for
from .prometheus import Prometheus

pytestmark = pytest.mark.timeout(180)

OK, WARN, ERR = int(LagStatus.OK), int(LagStatus.WARN), int(LagStatus.ERR)


def sel(group: str, topic: str) -> str:
    return f'{{consumer_group="{group}",topic="{topic}"}}'


async def prom_equals(prom: Prometheus, promql: str, want: float, timeout: float = 20.0) -> None:
    await wait_for(lambda: prom.value(promql) == want, timeout=timeout, what=f"{promql} == {want}")


async def test_backlog_latency_and_a_stopped_group(
    obs_cluster: ObsCluster, prometheus: Prometheus
) -> None:
    topic, group = "LagT", "lag-g"
    await obs_cluster.create_topic(topic, queues=4)
    async with Producer("lag-p", obs_cluster.namesrv_addr) as producer:
        await produce(producer, topic, 40, "warm")
        consumer = Consumer(obs_cluster, group, topic)
        await consumer.start()
        await wait_for(lambda: consumer.count >= 40, what="warm-up consumed")
        # caught up: no lag, OK
        await prom_equals(prometheus, f"rocketmq_consumer_lag_messages{sel(group, topic)}", 0)
        await prom_equals(prometheus, f"ferrymq_consumer_lag_status{sel(group, topic)}", OK)
        await consumer.stop()

        # a known backlog: the first message's store time is between these two clocks
        before = time.time()
        await produce(producer, topic, 1, "first")
        after_first = time.time()
        await produce(producer, topic, 149, "rest")

    q = f"rocketmq_consumer_lag_messages{sel(group, topic)}"
    await prom_equals(prometheus, q, 150)
    assert prometheus.value(f"rocketmq_consumer_ready_messages{sel(group, topic)}") == 150
    assert prometheus.value(f"rocketmq_consumer_inflight_messages{sel(group, topic)}") == 0

    # lag latency = sample time - store time of the oldest unconsumed message; the scrape comes
    # at most one sample interval (+ scrape delay) after the sample
    sample = prometheus.sample(f"rocketmq_consumer_lag_latency{sel(group, topic)}")
    assert sample is not None
    scraped_at, latency_ms = sample
    assert latency_ms > 0
    oldest = scraped_at - latency_ms / 1000
    assert before - 0.01 <= oldest <= after_first + 0.25 + 0.6, (before, oldest, after_first)

    # nobody consumes: every lagging queue goes STOP, the group ERR; the backlog does not clear
    await prom_equals(prometheus, f"ferrymq_consumer_group_status{{consumer_group='{group}'}}", ERR)
    stopped = prometheus.query(
        f"ferrymq_consumer_queue_status{sel(group, topic)} == {int(LagStatus.STOP)}"
    )
    assert len(stopped) == 4
    assert prometheus.value(f"ferrymq_consumer_lag_eta_seconds{sel(group, topic)}") == -1
    assert prometheus.value(f"sum(rocketmq_messages_in_total{{topic='{topic}'}})") == 190
    assert prometheus.value(f"sum(rocketmq_throughput_in_total{{topic='{topic}'}})") > 190 * 91
    assert prometheus.value(f"rocketmq_messages_out_total{sel(group, topic)}") == 40


async def _paced_send(producer: Producer, topic: str, rate: float, seconds: float) -> int:
    """Send at about ``rate`` msg/s for ``seconds`` (load generation, bounded in count and time)."""
    count = int(rate * seconds)
    start = time.monotonic()
    for i in range(count):
        await producer.send(Message(topic, f"p-{i}".encode()))
        ahead = start + (i + 1) / rate - time.monotonic()
        if ahead > 0:
            await asyncio.sleep(ahead)  # pacing the load, not synchronisation
    return count


async def test_busy_healthy_group_stays_ok(
    obs_cluster: ObsCluster, prometheus: Prometheus, lag_config: LagConfig
) -> None:
    await _busy_group_stays_ok(obs_cluster, prometheus, lag_config)


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize(
    "lag_config",
    [
        LagConfig(
            consumer_lag_sample_interval=5_000,
            consumer_lag_window=100_000,
            consumer_lag_eta_window=30_000,
        )
    ],
)
async def test_busy_healthy_group_stays_ok_for_5_minutes(
    obs_cluster: ObsCluster, prometheus: Prometheus, lag_config: LagConfig
) -> None:
    # three windows of 100 s: five minutes of busy traffic
    await _busy_group_stays_ok(obs_cluster, prometheus, lag_config)


async def _busy_group_stays_ok(
    obs_cluster: ObsCluster, prometheus: Prometheus, lag_config: LagConfig
) -> None:
    topic, group = "BusyT", "busy-g"
    await obs_cluster.create_topic(topic, queues=4)
    consumer = Consumer(obs_cluster, group, topic)
    await consumer.start()
    window_s = lag_config.consumer_lag_window / 1000
    try:
        async with Producer("busy-p", obs_cluster.namesrv_addr) as producer:
            await produce(producer, topic, 8, "warm")
            await wait_for(lambda: consumer.count >= 8, what="consumer running")
            started = time.time()
            sent = await _paced_send(producer, topic, 150, 3 * window_s)
            ended = time.time()
        await wait_for(lambda: consumer.count >= sent + 8, what="all consumed")
    finally:
        await consumer.stop()
    # after the first window, every evaluation of the busy group (lag > 0 at times) is OK
    series = prometheus.query_range(
        f"ferrymq_consumer_lag_status{sel(group, topic)}", started + window_s, ended, 0.25
    )
    assert len(series) == 1
    values = [float(v) for _, v in series[0]["values"]]
    assert len(values) >= 2 * window_s * 3  # the whole busy period was scraped
    assert set(values) == {OK}, values
    lags = prometheus.query_range(
        f"max_over_time(rocketmq_consumer_lag_messages{sel(group, topic)}[1s])",
        started + window_s,
        ended,
        0.5,
    )
    # busy: it was not lag-free all along (else this would not test the RocketMQ tuning)
    assert max(float(v) for _, v in lags[0]["values"]) > 0


async def test_slow_group_goes_warn(obs_cluster: ObsCluster, prometheus: Prometheus) -> None:
    topic, group = "SlowT", "slow-g"
    await obs_cluster.create_topic(topic, queues=2)
    consumer = Consumer(obs_cluster, group, topic, delay=0.03)  # ~30 msg/s
    await consumer.start()
    try:
        async with Producer("slow-p", obs_cluster.namesrv_addr) as producer:
            sender = asyncio.create_task(_paced_send(producer, topic, 120, 25))
            try:
                await prom_equals(
                    prometheus, f"ferrymq_consumer_lag_status{sel(group, topic)}", WARN, 25
                )
                # it is consuming, only too slowly: WARN, not STALL/STOP, and not clearing
                assert consumer.count > 0
                assert (
                    prometheus.value(f"ferrymq_consumer_lag_eta_seconds{sel(group, topic)}") == -1
                )
            finally:
                sender.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await sender
    finally:
        await consumer.stop()


async def test_eta_of_a_draining_group(obs_cluster: ObsCluster, prometheus: Prometheus) -> None:
    topic, group = "DrainT", "drain-g"
    await obs_cluster.create_topic(topic, queues=2)
    backlog = 1200
    async with Producer("drain-p", obs_cluster.namesrv_addr) as producer:
        await produce(producer, topic, backlog, "b")
    consumer = Consumer(obs_cluster, group, topic, delay=0.008)
    await consumer.start()
    try:
        # let the ETA window fill with draining samples
        await wait_for(lambda: consumer.count >= 450, timeout=30, what="draining for a while")
        sample = prometheus.sample(f"ferrymq_consumer_lag_eta_seconds{sel(group, topic)}")
        assert sample is not None
        at, eta = sample
        assert eta > 0
        await wait_for(lambda: consumer.count >= backlog, timeout=60, what="backlog drained")
        actual = time.time() - at
    finally:
        await consumer.stop()
    print(f"ETA {eta:.2f} s, actual {actual:.2f} s")
    assert abs(eta - actual) <= 0.2 * actual, (eta, actual)
