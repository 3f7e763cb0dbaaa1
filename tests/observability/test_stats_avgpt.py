"""VIEW_BROKER_STATS_DATA (315) ``avgpt`` as upstream's StatsItem: value per request over the
window. The stats manager alone with a stepped clock, then a live broker answering the admin code
after a known number of sends of known batch sizes, pulls of known sizes and send-backs."""

from __future__ import annotations

import pytest
from ferrymq.broker.stats_manager import BrokerStatsManager, compute_stats
from ferrymq.client import Message, Producer
from ferrymq.client.admin import AdminClient
from ferrymq.client.broker_api import BrokerApi, PullStatus
from ferrymq.message import MessageExt
from ferrymq.remoting import headers
from ferrymq.remoting.bodies import BrokerStatsData
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand

from .obs_helpers import ObsCluster

pytestmark = pytest.mark.timeout(120)

BATCHES = (1, 3, 5, 7)  # 16 messages in 4 send requests: avgpt 4.0
PULL_SIZE = 5  # 16 messages in pulls of 5, 5, 5, 1: 4 pulls, avgpt 4.0
TOPIC = "AvgptTopic"
GROUP = "avgpt_group"


def test_compute_stats_is_sum_per_request() -> None:
    snap = compute_stats((100.0, 10, 2), 110.0, 40, 8)
    assert (snap.sum, snap.tps, snap.avgpt) == (30, 3.0, 5.0)
    assert compute_stats((100.0, 10, 2), 110.0, 10, 2).avgpt == 0.0  # no requests: 0, not NaN


def test_windows_and_keys_born_between_recordings() -> None:
    now = [1_000.0]
    table: dict[str, tuple[int, int]] = {}
    manager = BrokerStatsManager(
        put_total=lambda: 0,
        get_transferred=lambda: 0,
        get_found=lambda: 0,
        get_miss=lambda: 0,
        items={"TOPIC_PUT_NUMS": lambda: table},
        clock=lambda: now[0],
    )
    manager.sample()  # the first recording: the key does not exist yet
    assert manager.stats_item("TOPIC_PUT_NUMS", "t") is None
    now[0] += 4
    table["t"] = (12, 3)  # born after that recording: counted from zero at it
    minute, hour, day = manager.stats_item("TOPIC_PUT_NUMS", "t") or ()
    assert (minute.sum, minute.avgpt, minute.tps) == (12, 4.0, 3.0)
    assert (hour.sum, hour.avgpt) == (day.sum, day.avgpt) == (12, 4.0)
    for _ in range(7):  # 70 s of recordings every 10 s; then 30 messages in 3 requests
        now[0] += 10
        manager.sample()
    table["t"] = (42, 6)
    minute, hour, day = manager.stats_item("TOPIC_PUT_NUMS", "t") or ()
    # the minute window starts at a recording that already had the first 12 in 3 requests
    assert (minute.sum, minute.avgpt) == (30, 10.0)
    assert (hour.sum, hour.avgpt) == (day.sum, day.avgpt) == (42, 7.0)


async def _view(admin: AdminClient, addr: str, name: str, key: str) -> BrokerStatsData:
    data = await admin.view_broker_stats(addr, name, key)
    # the three windows agree: everything happened within the last minute
    assert data.stats_minute == data.stats_hour == data.stats_day, data
    return data


async def test_view_broker_stats_avgpt_on_a_live_broker(obs_cluster: ObsCluster) -> None:
    await obs_cluster.create_topic(TOPIC, queues=1)
    addr = obs_cluster.broker.addr
    client = RemotingClient(name="avgpt-test")
    admin = AdminClient(obs_cluster.namesrv_addr)
    await admin.start()
    api = BrokerApi(client)
    try:
        async with Producer("avgpt_pg", obs_cluster.namesrv_addr) as producer:
            for i, size in enumerate(BATCHES):
                batch = [Message(TOPIC, f"{i}-{j}".encode() * (j + 1)) for j in range(size)]
                await producer.send_batch(batch)
        total = sum(BATCHES)

        nums = (await _view(admin, addr, "TOPIC_PUT_NUMS", TOPIC)).stats_minute
        assert (nums.sum, nums.avgpt) == (total, total / len(BATCHES))
        size = (await _view(admin, addr, "TOPIC_PUT_SIZE", TOPIC)).stats_minute
        store = obs_cluster.broker.store
        assert store is not None
        # only this topic's records were stored: its bytes are the CommitLog's
        assert size.sum == store.commit_log.max_offset
        assert size.avgpt == size.sum / len(BATCHES)

        pulled: list[MessageExt] = []
        offset = 0
        pulls = 0
        while True:
            header = headers.PullMessageRequestHeader(
                consumer_group=GROUP,
                topic=TOPIC,
                queue_id=0,
                queue_offset=offset,
                max_msg_nums=PULL_SIZE,
                sys_flag=4,
                subscription="*",
                expression_type="TAG",
            )
            result = await api.pull_message(addr, header, 5.0)
            if result.status is not PullStatus.FOUND:
                break
            pulls += 1
            pulled.extend(result.messages)
            offset = result.next_begin_offset
        assert (len(pulled), pulls) == (total, 4)
        got = (await _view(admin, addr, "GROUP_GET_NUMS", f"{TOPIC}@{GROUP}")).stats_minute
        assert (got.sum, got.avgpt) == (total, total / pulls)
        got_size = (await _view(admin, addr, "GROUP_GET_SIZE", f"{TOPIC}@{GROUP}")).stats_minute
        assert got_size.sum == store.commit_log.max_offset
        assert got_size.avgpt == got_size.sum / pulls

        for msg in pulled[:2]:
            reply = await client.invoke(
                addr,
                RemotingCommand.request(
                    RequestCode.CONSUMER_SEND_MSG_BACK,
                    {
                        "offset": str(msg.commit_log_offset),
                        "group": GROUP,
                        "delayLevel": "1",
                        "originMsgId": msg.msg_id,
                        "originTopic": TOPIC,
                    },
                ),
            )
            assert reply.code == ResponseCode.SUCCESS, reply.remark
        back = (await _view(admin, addr, "SNDBCK_PUT_NUMS", f"{TOPIC}@{GROUP}")).stats_minute
        assert (back.sum, back.avgpt) == (2, 1.0)

        cluster = obs_cluster.broker.config.broker_cluster_name
        broker_put = (await _view(admin, addr, "BROKER_PUT_NUMS", cluster)).stats_minute
        assert (broker_put.sum, broker_put.avgpt) == (total, total / len(BATCHES))
        broker_get = (await _view(admin, addr, "BROKER_GET_NUMS", cluster)).stats_minute
        assert (broker_get.sum, broker_get.avgpt) == (total, total / pulls)
    finally:
        await admin.shutdown()
        await client.close()
