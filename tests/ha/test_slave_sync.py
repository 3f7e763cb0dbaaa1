"""Slave metadata synchronisation (ferrymq.ha.slave_sync) over real remoting sockets.

The master here is a RemotingServer answering the four GET_ALL_* codes with upstream bodies (a
stand-in for the broker's admin processors, which have their own tests); the slave side is the
real SlaveSynchronize with a recording target, driven by rounds or by the master's metadata
notices (as the HA client hands them over).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest
from ferrymq.ha.protocol import MetadataVersions
from ferrymq.ha.slave_sync import OFFSETS_MIN_INTERVAL_S, SlaveSynchronize
from ferrymq.remoting.bodies import (
    ConsumerOffsetSerializeWrapper,
    DataVersion,
    SubscriptionGroupConfig,
    SubscriptionGroupWrapper,
    TopicConfig,
    TopicConfigSerializeWrapper,
)
from ferrymq.remoting.channel import Channel
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.server import RemotingServer


class Recorder:
    def __init__(self) -> None:
        self.topics: list[TopicConfigSerializeWrapper] = []
        self.offsets: list[ConsumerOffsetSerializeWrapper] = []
        self.delay: list[bytes] = []
        self.groups: list[SubscriptionGroupWrapper] = []

    def replace_topic_configs(self, wrapper: TopicConfigSerializeWrapper) -> None:
        self.topics.append(wrapper)

    def merge_consumer_offsets(self, wrapper: ConsumerOffsetSerializeWrapper) -> None:
        self.offsets.append(wrapper)

    def replace_delay_offsets(self, raw_json: bytes) -> None:
        self.delay.append(raw_json)

    def replace_subscription_groups(self, wrapper: SubscriptionGroupWrapper) -> None:
        self.groups.append(wrapper)


class MasterState:
    def __init__(self) -> None:
        self.topic_version = DataVersion(timestamp=1, counter=1)
        self.fail_offsets = False


@pytest.fixture
async def master() -> AsyncIterator[tuple[RemotingServer, MasterState]]:
    state = MasterState()
    server = RemotingServer("127.0.0.1", 0, name="stand-in-master")

    def topics(_: Channel, req: RemotingCommand) -> RemotingCommand:
        wrapper = TopicConfigSerializeWrapper(
            topic_config_table={"T1": TopicConfig(topic_name="T1", read_queue_nums=4)},
            data_version=state.topic_version,
        )
        return req.response(body=wrapper.encode())

    def offsets(_: Channel, req: RemotingCommand) -> RemotingCommand:
        if state.fail_offsets:
            return req.response(ResponseCode.SYSTEM_ERROR, "disk on fire")
        return req.response(body=b'{"offsetTable":{"T1@g":{0:5,1:7}}}')

    def delay(_: Channel, req: RemotingCommand) -> RemotingCommand:
        return req.response(body=b'{"offsetTable":{1:10}}')

    def groups(_: Channel, req: RemotingCommand) -> RemotingCommand:
        wrapper = SubscriptionGroupWrapper(
            subscription_group_table={"g": SubscriptionGroupConfig(group_name="g")},
            data_version=DataVersion(timestamp=3, counter=9),
        )
        return req.response(body=wrapper.encode())

    server.register(RequestCode.GET_ALL_TOPIC_CONFIG, topics)
    server.register(RequestCode.GET_ALL_CONSUMER_OFFSET, offsets)
    server.register(RequestCode.GET_ALL_DELAY_OFFSET, delay)
    server.register(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, groups)
    await server.start()
    try:
        yield server, state
    finally:
        await server.stop()


async def test_sync_copies_all_four_and_skips_unchanged_versions(
    master: tuple[RemotingServer, MasterState],
) -> None:
    server, state = master
    rec = Recorder()
    sync = SlaveSynchronize(RemotingClient(), rec, master_addr=f"127.0.0.1:{server.port}")
    report = await sync.sync_all()
    assert report.errors == {}
    assert sorted(report.applied) == [
        "consumerOffset",
        "delayOffset",
        "subscriptionGroup",
        "topicConfig",
    ]
    assert rec.topics[0].topic_config_table["T1"].read_queue_nums == 4
    assert rec.offsets[0].offset_table == {"T1@g": {0: 5, 1: 7}}
    assert rec.delay == [b'{"offsetTable":{1:10}}']
    assert "g" in rec.groups[0].subscription_group_table

    # same data versions: topic config and groups are not re-applied; offsets always are
    report = await sync.sync_all()
    assert sorted(report.unchanged) == ["subscriptionGroup", "topicConfig"]
    assert len(rec.topics) == 1 and len(rec.offsets) == 2

    state.topic_version = DataVersion(timestamp=2, counter=2)
    report = await sync.sync_all()
    assert "topicConfig" in report.applied and len(rec.topics) == 2


async def test_one_failing_item_does_not_stop_the_others(
    master: tuple[RemotingServer, MasterState],
) -> None:
    server, state = master
    state.fail_offsets = True
    rec = Recorder()
    sync = SlaveSynchronize(RemotingClient(), rec, master_addr=f"127.0.0.1:{server.port}")
    report = await sync.sync_all()
    assert "disk on fire" in report.errors["consumerOffset"]
    assert len(rec.topics) == 1 and len(rec.groups) == 1 and rec.offsets == []


async def test_unreachable_master_is_reported_not_raised() -> None:
    rec = Recorder()
    sync = SlaveSynchronize(RemotingClient(connect_timeout=0.5), rec, master_addr="127.0.0.1:1")
    report = await sync.sync_all()
    assert set(report.errors) == {
        "topicConfig",
        "consumerOffset",
        "delayOffset",
        "subscriptionGroup",
    }
    sync.set_master_addr(None)
    report = await sync.sync_all()
    assert "no master address" in report.errors["topicConfig"]


async def _wait(cond: Callable[[], bool], what: str, timeout: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not cond():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


async def test_notices_copy_what_moved_at_once_and_offsets_at_most_every_interval(
    master: tuple[RemotingServer, MasterState],
) -> None:
    server, state = master
    rec = Recorder()
    client = RemotingClient()
    # the periodic round is an hour away: only notices can make copies here
    sync = SlaveSynchronize(client, rec, interval_s=3600)
    sync.start()
    try:
        # a notice before the master's address is known waits for it; the address starts the
        # first round
        sync.on_master_versions(MetadataVersions(1, 1, 1))
        sync.set_master_addr(f"127.0.0.1:{server.port}")
        await _wait(lambda: sync.rounds == 1, "the first round")
        assert (len(rec.topics), len(rec.offsets), len(rec.groups)) == (1, 1, 1)

        state.topic_version = DataVersion(timestamp=2, counter=2)
        sync.on_master_versions(MetadataVersions(2, 1, 1))  # only the topic config moved
        await _wait(lambda: len(rec.topics) == 2, "the topic config copy")
        assert (len(rec.offsets), len(rec.groups)) == (1, 1)

        sync.on_master_versions(MetadataVersions(2, 1, 2))
        await _wait(lambda: len(rec.offsets) == 2, "the offsets copy")
        copied_at = asyncio.get_running_loop().time()
        # offsets moving again at once are copied once the minimum interval has passed, not lost
        sync.on_master_versions(MetadataVersions(2, 1, 3))
        sync.on_master_versions(MetadataVersions(2, 1, 4))
        await _wait(lambda: len(rec.offsets) == 3, "the deferred offsets copy")
        assert asyncio.get_running_loop().time() - copied_at >= OFFSETS_MIN_INTERVAL_S * 0.9
        assert sync.offsets_interval_s >= OFFSETS_MIN_INTERVAL_S
        assert sync.rounds == 1 and len(rec.groups) == 1 and rec.delay == [rec.delay[0]]
    finally:
        await sync.shutdown()
        await client.close()
