"""HA metrics on the broker's real /metrics endpoint: a SYNC_MASTER + SLAVE pair in this process
(real NameServer, sockets and stores on 127.0.0.1), scraped over HTTP."""

from __future__ import annotations

import asyncio
import urllib.request
from pathlib import Path

import pytest
from ferrymq.broker.app import BrokerApp
from ferrymq.broker.local_cluster import pick_free_port
from ferrymq.client.producer import Producer
from ferrymq.ha.metrics import HACollector, HAFigures, SlaveLag, slave_lag
from ferrymq.ha.sync_wait import GroupTransferService
from ferrymq.message import Message
from ferrymq.namesrv.app import NamesrvApp
from ferrymq.namesrv.config import NamesrvConfig
from ferrymq.store.config import BrokerRole
from ferrymq.store.results import PutMessageStatus
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from .ha_helpers import wait_until
from .test_broker_ha import make_broker

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: str) -> Samples:
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = tuple(
                sorted((k, v) for k, v in s.labels.items() if k not in ("cluster", "broker"))
            )
            out[(s.name, labels)] = s.value
    return out


async def scrape(port: int) -> Samples:
    def get() -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
            return resp.read().decode()

    return parse(await asyncio.to_thread(get))


def one(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def with_metrics(app: BrokerApp) -> BrokerApp:
    app.config.metrics_port = pick_free_port("127.0.0.1")
    return app


async def test_master_and_slave_metrics_over_http(tmp_path: Path) -> None:
    namesrv = NamesrvApp(
        NamesrvConfig(listen_port=0, bind_address="127.0.0.1", kv_config_path=tmp_path / "kv.json")
    )
    await namesrv.start()
    master = with_metrics(make_broker(tmp_path / "m", namesrv.addr, 0, BrokerRole.SYNC_MASTER))
    slave = with_metrics(make_broker(tmp_path / "s", namesrv.addr, 1, BrokerRole.SLAVE))
    producer = Producer("ha-metrics-producer", namesrv.addr, body_transform=None)
    try:
        await master.start()
        await slave.start()
        assert master.ha is not None and master.metrics and slave.metrics and master.store
        await wait_until(
            lambda: master.ha is not None and master.ha.service.connection_count == 1, 10, "slave"
        )
        await producer.start()
        for i in range(20):
            result = await producer.send(Message("HaMetricsT", b"x" * (100 + i)))
            assert result.status.name == "SEND_OK", result

        m = await scrape(master.metrics.port)
        assert one(m, "ferrymq_ha_role", role="SYNC_MASTER") == 1
        assert one(m, "ferrymq_ha_connected_slaves") == 1
        end = master.store.max_phy_offset
        assert one(m, "ferrymq_ha_commitlog_max_offset") == end > 0
        lags = {k: v for k, v in m.items() if k[0] == "ferrymq_ha_slave_lag_bytes"}
        assert list(lags.values()) == [0.0], lags  # SYNC_MASTER: every ack came after the slave's
        assert one(m, "ferrymq_ha_push2slave_max_offset") == end
        assert one(m, "ferrymq_ha_sync_waits_total", result="ok") >= 20
        assert one(m, "ferrymq_ha_sync_waits_total", result="flush_slave_timeout") == 0
        assert one(m, "ferrymq_ha_sync_waits_pending") == 0
        assert m[("ferrymq_broker_put_messages_total", ())] >= 20  # the broker's own still there

        s = await scrape(slave.metrics.port)
        ha_addr = master.ha.ha_server_addr()
        assert ha_addr is not None
        assert one(s, "ferrymq_ha_role", role="SLAVE") == 1
        assert one(s, "ferrymq_ha_master_connected", master=ha_addr) == 1
        assert one(s, "ferrymq_ha_slave_fetched_offset") == end
        assert one(s, "ferrymq_ha_slave_received_bytes_total") >= end
        assert one(s, "ferrymq_ha_slave_connects_total") >= 1
        assert ("ferrymq_ha_connected_slaves", ()) not in s

        # the slave goes away: the master says so and counts the puts it cannot replicate
        await slave.stop()
        await wait_until(
            lambda: master.ha is not None and master.ha.service.connection_count == 0,
            10,
            "disconnect",
        )
        result = await producer.send(Message("HaMetricsT", b"alone"))
        assert result.status.name == "SLAVE_NOT_AVAILABLE", result
        m = await scrape(master.metrics.port)
        assert one(m, "ferrymq_ha_connected_slaves") == 0
        assert not [k for k in m if k[0] == "ferrymq_ha_slave_lag_bytes"]
        assert one(m, "ferrymq_ha_sync_waits_total", result="slave_not_available") == 1
    finally:
        await producer.shutdown()
        await slave.stop()
        await master.stop()
        await namesrv.stop()


def test_collector_formats_lag_and_timeouts() -> None:
    assert slave_lag(1000, 400) == 600 and slave_lag(1000, -1) == 1000 and slave_lag(5, 9) == 0
    figures = HAFigures(
        role="SYNC_MASTER",
        local_max_offset=1000,
        slaves=[SlaveLag("127.0.0.1:5", 400, 600)],
        sync_waits_ok=3,
        sync_waits_timeout=2,
    )
    registry = CollectorRegistry()
    registry.register(HACollector({"cluster": "c", "broker": "b"}, lambda: figures))
    samples = parse(generate_latest(registry).decode())
    assert one(samples, "ferrymq_ha_slave_lag_bytes", slave="127.0.0.1:5") == 600
    assert one(samples, "ferrymq_ha_slave_ack_offset", slave="127.0.0.1:5") == 400
    assert one(samples, "ferrymq_ha_sync_waits_total", result="flush_slave_timeout") == 2


async def test_transfer_counts_every_wait() -> None:
    svc = GroupTransferService(timeout_s=0.05, max_gap=1 << 20, connection_count=lambda: 1)
    assert await svc.wait_for_replica(10) is not None  # times out: nobody acks
    svc.notify_transfer_some(20)
    await svc.wait_for_replica(15)  # already acked
    assert (svc.waits, svc.timeouts, svc.not_available, svc.pending) == (2, 1, 0, 0)


async def test_transfer_counts_a_cancelled_wait_apart_from_acks() -> None:
    """A put whose task is cancelled mid-wait is neither an ack nor a timeout."""
    svc = GroupTransferService(timeout_s=30, max_gap=1 << 20, connection_count=lambda: 1)
    waiter = asyncio.create_task(svc.wait_for_replica(10))
    while svc.pending == 0:
        await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    svc.notify_transfer_some(20)
    assert await svc.wait_for_replica(15) is PutMessageStatus.PUT_OK
    assert (svc.waits, svc.acked, svc.timeouts, svc.cancelled, svc.pending) == (2, 1, 0, 1, 0)
