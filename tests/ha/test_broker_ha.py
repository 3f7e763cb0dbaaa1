"""Master + slave brokers in this process (real NameServer, real sockets on 127.0.0.1, real stores).

Must-shows covered here: after N mixed-size messages the slave's CommitLog is byte-identical to the
master's and its ConsumeQueues serve the same records; SYNC_MASTER acks only replicated messages;
the slave refuses writes; the slave copies topic configs and consumer offsets from the master.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from ferrymq.broker.app import BrokerApp
from ferrymq.broker.config import BrokerConfig
from ferrymq.client.producer import Producer
from ferrymq.ha.config import HASettings
from ferrymq.message import Message
from ferrymq.namesrv.app import NamesrvApp
from ferrymq.namesrv.config import NamesrvConfig
from ferrymq.remoting.bodies import SubscriptionGroupConfig
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.store.config import BrokerRole, FlushDiskType, MessageStoreConfig

from .ha_helpers import file_bytes, wait_until

TOPIC = "HaBrokerTopic"
FILE_SIZE = 256 * 1024


def make_broker(
    root: Path, namesrv_addr: str, broker_id: int, role: BrokerRole, **store_extra: object
) -> BrokerApp:
    cfg = BrokerConfig(
        broker_cluster_name="HaCluster",
        broker_name="broker-ha",
        broker_id=broker_id,
        broker_ip1="127.0.0.1",
        bind_address="127.0.0.1",
        listen_port=0,
        namesrv_addr=namesrv_addr,
    )
    store = MessageStoreConfig(
        store_path_root_dir=root,
        mapped_file_size_commit_log=FILE_SIZE,
        mapped_file_size_consume_queue=20 * 1000,
        broker_role=role,
        flush_disk_type=FlushDiskType.SYNC_FLUSH,
        **store_extra,  # type: ignore[arg-type]
    )
    settings = HASettings(ha_listen_port=0, ha_slave_sync_interval=200)
    return BrokerApp(cfg, store, ha_settings=settings)


@pytest.fixture
async def pair(tmp_path: Path) -> AsyncIterator[tuple[NamesrvApp, BrokerApp, BrokerApp]]:
    namesrv = NamesrvApp(
        NamesrvConfig(listen_port=0, bind_address="127.0.0.1", kv_config_path=tmp_path / "kv.json")
    )
    await namesrv.start()
    master = make_broker(tmp_path / "master", namesrv.addr, 0, BrokerRole.SYNC_MASTER)
    await master.start()
    slave = make_broker(tmp_path / "slave", namesrv.addr, 1, BrokerRole.SLAVE)
    await slave.start()
    try:
        yield namesrv, master, slave
    finally:
        await slave.stop()
        await master.stop()
        await namesrv.stop()


async def test_sync_master_and_slave_hold_identical_data(
    pair: tuple[NamesrvApp, BrokerApp, BrokerApp], tmp_path: Path
) -> None:
    namesrv, master, slave = pair
    assert master.ha is not None and slave.ha is not None
    # the slave found its master through its registration answer
    await wait_until(
        lambda: master.ha is not None and master.ha.service.connection_count == 1, 10, "the slave"
    )

    rng = random.Random(42)
    sizes = [rng.choice([1, 100, 1000, 3000, 20_000]) for _ in range(150)]
    producer = Producer("ha-producer", namesrv.addr, body_transform=None)
    await producer.start()
    try:
        for i, size in enumerate(sizes):
            body = (f"{i}:".encode() + bytes([i % 256]) * size)[:size]
            result = await producer.send(Message(TOPIC, body, properties={"KEYS": f"k{i}"}))
            assert result.status.name == "SEND_OK", result
            # SYNC_MASTER: acknowledged means the slave already has it
            assert slave.store is not None and slave.store.max_phy_offset > 0
    finally:
        await producer.shutdown()

    m_store, s_store = master.store, slave.store
    assert m_store is not None and s_store is not None
    assert s_store.max_phy_offset == m_store.max_phy_offset
    assert m_store.max_phy_offset > 2 * FILE_SIZE  # several files, blank end records included
    m_files = file_bytes(m_store.config.commit_log_dir)
    assert file_bytes(s_store.config.commit_log_dir) == m_files

    # the slave's own dispatcher built ConsumeQueues that serve the very same records
    await wait_until(lambda: s_store.dispatch_behind_bytes() == 0, 10, "slave dispatch")
    total = 0
    for queue_id in range(8):
        max_offset = m_store.get_max_offset_in_queue(TOPIC, queue_id)
        assert s_store.get_max_offset_in_queue(TOPIC, queue_id) == max_offset
        offset = 0
        while offset < max_offset:
            with (
                m_store.get_message("g", TOPIC, queue_id, offset, 32) as got_m,
                s_store.get_message("g", TOPIC, queue_id, offset, 32) as got_s,
            ):
                assert got_s.body() == got_m.body()
                assert got_s.message_count == got_m.message_count > 0
                offset = got_m.next_begin_offset
                total += got_m.message_count
    assert total == len(sizes)


async def test_slave_refuses_writes_and_copies_metadata(
    pair: tuple[NamesrvApp, BrokerApp, BrokerApp],
) -> None:
    _, master, slave = pair
    await wait_until(
        lambda: master.ha is not None and master.ha.service.connection_count == 1, 10, "the slave"
    )
    client = RemotingClient()
    try:
        # a topic and a committed offset on the master reach the slave by slave sync
        create = RemotingCommand.request(
            RequestCode.UPDATE_AND_CREATE_TOPIC,
            {
                "topic": "SyncedTopic",
                "defaultTopic": "TBW102",
                "readQueueNums": 2,
                "writeQueueNums": 2,
                "perm": 6,
                "topicFilterType": "SINGLE_TAG",
            },
        )
        reply = await client.invoke(master.addr, create)
        assert reply.code == ResponseCode.SUCCESS, reply.remark
        master.offsets.commit_offset("g1", "SyncedTopic", 1, 42)
        master.groups.update(SubscriptionGroupConfig(group_name="synced_group", retry_max_times=3))
        assert master.semantics is not None and slave.semantics is not None
        master.semantics.schedule.offsets[3] = 17
        await wait_until(
            lambda: getattr(slave.groups.table.get("synced_group"), "retry_max_times", 0) == 3,
            10,
            "group sync",
        )
        await wait_until(
            lambda: slave.semantics is not None and slave.semantics.schedule.offsets.get(3) == 17,
            10,
            "delay offset sync",
        )
        await wait_until(lambda: slave.topics.get("SyncedTopic") is not None, 10, "topic sync")
        await wait_until(
            lambda: slave.offsets.query_offset("g1", "SyncedTopic", 1) == 42, 10, "offset sync"
        )

        send = RemotingCommand.request(
            RequestCode.SEND_MESSAGE_V2,
            {
                "a": "pg",
                "b": "SyncedTopic",
                "c": "TBW102",
                "d": 4,
                "e": 0,
                "f": 0,
                "g": 0,
                "h": 0,
                "i": "",
                "j": 0,
                "k": False,
                "m": False,
            },
            b"not on a slave",
        )
        reply = await client.invoke(slave.addr, send)
        assert reply.code != ResponseCode.SUCCESS
        assert slave.store is not None and slave.store.max_phy_offset == master.store.max_phy_offset  # type: ignore[union-attr]
        info = slave.ha.runtime_info() if slave.ha else {}
        assert info["brokerRole"] == "SLAVE" and info["haConnected"] == "true"
    finally:
        await client.close()


async def _send(namesrv_addr: str, prefix: str, count: int, size: int = 2000) -> None:
    producer = Producer(f"ha-{prefix}", namesrv_addr, body_transform=None)
    await producer.start()
    try:
        for i in range(count):
            body = f"{prefix}{i}:".encode().ljust(size, b".")
            result = await producer.send(Message(TOPIC, body, properties={"KEYS": f"{prefix}{i}"}))
            assert result.status.name == "SEND_OK", result
    finally:
        await producer.shutdown()


def _same_queues(master: BrokerApp, slave: BrokerApp) -> int:
    """Every queue offset the slave holds serves the master's record; returns records compared."""
    m_store, s_store = master.store, slave.store
    assert m_store is not None and s_store is not None
    compared = 0
    for queue_id in range(4):
        max_offset = m_store.get_max_offset_in_queue(TOPIC, queue_id)
        assert s_store.get_max_offset_in_queue(TOPIC, queue_id) == max_offset
        offset = max(s_store.get_min_offset_in_queue(TOPIC, queue_id), 0)
        while offset < max_offset:
            with (
                m_store.get_message("g", TOPIC, queue_id, offset, 32) as got_m,
                s_store.get_message("g", TOPIC, queue_id, offset, 32) as got_s,
            ):
                assert got_s.message_count > 0, (queue_id, offset, got_s.status)
                assert got_s.body() == got_m.body()[: len(got_s.body())]
                offset = got_s.next_begin_offset
                compared += got_s.message_count
    return compared


async def test_slave_restart_and_late_joining_slave_catch_up(tmp_path: Path) -> None:
    namesrv = NamesrvApp(
        NamesrvConfig(listen_port=0, bind_address="127.0.0.1", kv_config_path=tmp_path / "kv.json")
    )
    await namesrv.start()
    master = make_broker(tmp_path / "master", namesrv.addr, 0, BrokerRole.ASYNC_MASTER)
    await master.start()
    started: list[BrokerApp] = []
    try:
        # late joiner: the master already holds several files; a new slave starts at its last
        await _send(namesrv.addr, "early", 300)
        assert master.store is not None
        m_store = master.store
        assert m_store.max_phy_offset > 2 * FILE_SIZE
        slave = make_broker(tmp_path / "slave", namesrv.addr, 1, BrokerRole.SLAVE)
        await slave.start()
        started.append(slave)
        assert slave.store is not None
        s_store = slave.store
        await wait_until(lambda: s_store.max_phy_offset == m_store.max_phy_offset, 20, "catch-up")
        last_file = m_store.max_phy_offset - m_store.max_phy_offset % FILE_SIZE
        assert s_store.min_phy_offset == last_file
        await wait_until(lambda: s_store.dispatch_behind_bytes() == 0, 10, "slave dispatch")
        assert _same_queues(master, slave) > 0

        # the slave's index serves key queries for what it holds
        newest = "early299"
        found = s_store.query_message(TOPIC, newest, 4, 0, 2**62)
        assert len(found.phy_offsets) == 1

        # slave restart: it stops, the master moves on, a new slave process resumes
        await slave.stop()
        started.remove(slave)
        await _send(namesrv.addr, "late", 150)
        slave = make_broker(tmp_path / "slave", namesrv.addr, 1, BrokerRole.SLAVE)
        await slave.start()
        started.append(slave)
        assert slave.store is not None
        s_store = slave.store
        await wait_until(lambda: s_store.max_phy_offset == m_store.max_phy_offset, 20, "catch-up")
        await wait_until(lambda: s_store.dispatch_behind_bytes() == 0, 10, "slave dispatch")
        assert _same_queues(master, slave) > 150
        m_files = file_bytes(m_store.config.commit_log_dir)
        s_files = file_bytes(s_store.config.commit_log_dir)
        assert s_files == {k: v for k, v in m_files.items() if k in s_files}
    finally:
        for app in started:
            await app.stop()
        await master.stop()
        await namesrv.stop()


async def test_pulls_far_behind_are_offloaded_to_the_slave(tmp_path: Path) -> None:
    """Read offload (digest RO1/RO2): a pull that is further behind the CommitLog tail than
    accessMessageInMemoryMaxRatio of RAM (0 % here, so any backlog counts) is answered with
    suggestWhichBrokerId = whichBrokerWhenConsumeSlowly (1); a push consumer follows it to the slave."""
    from ferrymq.client.broker_api import BrokerApi
    from ferrymq.client.push_consumer import PushConsumer
    from ferrymq.remoting import headers
    from ferrymq.remoting.bodies import ConsumeFromWhere

    namesrv = NamesrvApp(
        NamesrvConfig(listen_port=0, bind_address="127.0.0.1", kv_config_path=tmp_path / "kv.json")
    )
    await namesrv.start()
    master = make_broker(
        tmp_path / "m",
        namesrv.addr,
        0,
        BrokerRole.ASYNC_MASTER,
        access_message_in_memory_max_ratio=0,
    )
    await master.start()
    slave = make_broker(tmp_path / "s", namesrv.addr, 1, BrokerRole.SLAVE)
    await slave.start()
    client = RemotingClient()
    consumer: PushConsumer | None = None
    try:
        await _send(namesrv.addr, "off", 200, size=100)
        assert master.store is not None and slave.store is not None
        m_store, s_store = master.store, slave.store
        await wait_until(lambda: s_store.max_phy_offset == m_store.max_phy_offset, 10, "catch-up")
        api = BrokerApi(client)

        def header(queue_id: int, queue_offset: int) -> headers.PullMessageRequestHeader:
            return headers.PullMessageRequestHeader(
                consumer_group="offload_probe",
                topic=TOPIC,
                queue_id=queue_id,
                queue_offset=queue_offset,
                max_msg_nums=4,
                sys_flag=4,
                subscription="*",
                expression_type="TAG",
            )

        behind = await api.pull_message(master.addr, header(0, 0), 5)
        assert behind.messages and behind.suggest_which_broker_id == 1
        # the slave (default ratio: 40 % of RAM) finds the same pull cheap and sends it home
        await wait_until(lambda: s_store.dispatch_behind_bytes() == 0, 10, "slave dispatch")
        # the slave answers pulls of topics it knows: its periodic sync copies the master's
        await wait_until(lambda: slave.topics.get(TOPIC) is not None, 20, "topic sync")
        from_slave = await api.pull_message(slave.addr, header(0, 0), 5)
        assert from_slave.messages and from_slave.suggest_which_broker_id == 0

        got: set[bytes] = set()
        consumer = PushConsumer(
            "offload_group",
            namesrv.addr,
            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
            pull_batch_size=4,
        )
        consumer.subscribe(TOPIC, "*")
        consumer.register_listener(lambda msgs, ctx: got.update(m.body for m in msgs))
        await consumer.start()
        await wait_until(lambda: len(got) == 200, 30, "all messages consumed")
        assert slave.pull is not None and slave.pull.stats.got_messages > 0  # served by the slave
    finally:
        if consumer is not None:
            await consumer.shutdown()
        await client.close()
        await slave.stop()
        await master.stop()
        await namesrv.stop()
