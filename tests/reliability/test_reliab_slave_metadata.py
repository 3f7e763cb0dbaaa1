"""Issue 23 (last item) and issue 17 (offsets): every metadata change on a master reaches its slave
at once, not with the slave's periodic sync (real processes: NameServer, master, slave).

The periodic sync is set to 60 s, so only the master's metadata notices on the HA connection can
bring a change to the slave within the deadlines below: perm (read-only), order and topicSysFlag
changes, a topic deletion (after which the slave no longer serves the topic's messages), a new
subscription group, committed consumer offsets (a reset backwards too), and the offsets a push
consumer committed 1.5 s before its master was killed (issue 17: a consumer moving to the slave
re-reads nothing it had committed).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import orjson
import pytest
from ferrymq.broker.local_cluster import LocalCluster
from ferrymq.client.broker_api import BrokerApi
from ferrymq.client.errors import MQClientError
from ferrymq.client.instance import ClientInstance
from ferrymq.client.push_consumer import PushConsumer
from ferrymq.message import MessageExt
from ferrymq.remoting.bodies import (
    ConsumeFromWhere,
    SubscriptionGroupWrapper,
    TopicConfig,
    TopicConfigSerializeWrapper,
)
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.errors import RemotingError
from ha.cluster_helpers import broker_addr, pull_queue, runtime_info, wait_slave_connected
from reliab_helpers import create_topic_request, send_request

# far beyond every deadline below: a change that arrives in time came with a notice
SYNC_INTERVAL_MS = "60000"
# how long a change may take to reach the slave (a notice needs ~0.1 s plus one request)
DEADLINE_S = 5.0
TOPIC = "MetaMoves"
DOOMED = "MetaDoomed"
GROUP = "meta_group"
PUSH_GROUP = "meta_push"


async def _until(
    what: str, probe: Callable[[], Awaitable[object]], done: Callable[[object], bool]
) -> float:
    """Poll ``probe`` until ``done`` holds; fail after DEADLINE_S. Returns the seconds it took."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    while True:
        try:
            seen = await probe()
        except (RemotingError, MQClientError, OSError) as exc:
            seen = exc
        if done(seen):
            return loop.time() - start
        assert loop.time() - start < DEADLINE_S, (
            f"slave: {what} not within {DEADLINE_S}s: {seen!r:.400}"
        )
        await asyncio.sleep(0.05)


async def _slave_topics(client: RemotingClient, slave: str) -> dict[str, TopicConfig]:
    reply = await client.invoke(slave, RemotingCommand.request(RequestCode.GET_ALL_TOPIC_CONFIG))
    assert reply.code == ResponseCode.SUCCESS, reply.remark
    return TopicConfigSerializeWrapper.decode(reply.body_bytes()).topic_config_table


def _topic_is(**fields: object) -> Callable[[object], bool]:
    def check(seen: object) -> bool:
        config = seen.get(TOPIC) if isinstance(seen, dict) else None
        return config is not None and all(getattr(config, k) == v for k, v in fields.items())

    return check


async def _ok(client: RemotingClient, addr: str, command: RemotingCommand) -> RemotingCommand:
    reply = await client.invoke(addr, command)
    assert reply.code == ResponseCode.SUCCESS, reply.remark
    return reply


def _update_topic(perm: int = 6, order: bool = False, sys_flag: int = 0) -> RemotingCommand:
    command = create_topic_request(TOPIC, 2)
    assert command.ext_fields is not None
    command.ext_fields.update(perm=str(perm), order=str(order).lower(), topicSysFlag=str(sys_flag))
    return command


@pytest.fixture
def cluster(tmp_path: Path) -> LocalCluster:
    return LocalCluster(
        tmp_path / "cluster",
        groups=1,
        slaves=1,
        namesrv_port=0,
        broker_port=0,
        flush_disk_type="SYNC_FLUSH",
        mapped_file_size_commit_log=1 << 20,
        extra_conf={"brokerRole": "SYNC_MASTER", "haSlaveSyncInterval": SYNC_INTERVAL_MS},
    )


async def test_topic_changes_and_deletion_reach_the_slave_at_once(cluster: LocalCluster) -> None:
    with cluster:
        client = RemotingClient()
        api = BrokerApi(client)
        master, slave = broker_addr(cluster, 0), broker_addr(cluster, 1)
        try:
            await wait_slave_connected(client, master, 60)
            await _ok(client, master, _update_topic())
            await _ok(client, master, create_topic_request(DOOMED, 1))
            for topic in (TOPIC, DOOMED):
                # SYNC_MASTER: a SEND_OK means the slave holds the message
                await _ok(client, master, send_request(topic, f"{topic}-0".encode()))
            await _until(
                "both topics known",
                lambda: _slave_topics(client, slave),
                lambda seen: isinstance(seen, dict) and {TOPIC, DOOMED} <= set(seen),
            )
            took: dict[str, float] = {}

            await _ok(client, master, _update_topic(perm=4))  # read-only, as wipe-write does
            took["perm"] = await _until(
                "perm 4", lambda: _slave_topics(client, slave), _topic_is(perm=4)
            )
            await _ok(client, master, _update_topic(perm=4, order=True))
            took["order"] = await _until(
                "order", lambda: _slave_topics(client, slave), _topic_is(order=True, perm=4)
            )
            await _ok(client, master, _update_topic(perm=6, order=True, sys_flag=1))
            took["topicSysFlag"] = await _until(
                "topicSysFlag",
                lambda: _slave_topics(client, slave),
                _topic_is(topic_sys_flag=1, perm=6),
            )

            # the doomed topic is served by the slave until it is deleted on the master
            bodies = [m.body for m in await pull_queue(api, slave, DOOMED, 0)]
            assert bodies == [f"{DOOMED}-0".encode()]
            await _ok(
                client,
                master,
                RemotingCommand.request(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": DOOMED}),
            )
            took["delete"] = await _until(
                "topic deleted",
                lambda: _slave_topics(client, slave),
                lambda seen: isinstance(seen, dict) and TOPIC in seen and DOOMED not in seen,
            )

            async def pull_doomed() -> object:
                return [m.body for m in await pull_queue(api, slave, DOOMED, 0)]

            # not served any more: TOPIC_NOT_EXIST, not the replicated message
            await _until(
                "deleted topic not served",
                pull_doomed,
                lambda seen: (
                    isinstance(seen, MQClientError)
                    and getattr(seen, "code", None) == ResponseCode.TOPIC_NOT_EXIST
                ),
            )
            info = await runtime_info(client, slave)
            assert info["haSlaveSyncRounds"] == "1", info  # only the start-up round ran
            assert int(info["haMetadataNotices"]) >= 4, info
            print(f"slave metadata latency (s): {took}")
        finally:
            await client.close()


async def _committed(client: RemotingClient, addr: str, group: str, queues: int) -> list[str]:
    out = []
    for queue_id in range(queues):
        reply = await _ok(
            client,
            addr,
            RemotingCommand.request(
                RequestCode.QUERY_CONSUMER_OFFSET,
                {"consumerGroup": group, "topic": TOPIC, "queueId": str(queue_id)},
            ),
        )
        out.append((reply.ext_fields or {}).get("offset", ""))
    return out


async def test_groups_and_offsets_reach_the_slave_at_once(cluster: LocalCluster) -> None:
    """Also issue 17: a push consumer's offsets, committed to the master 1.5 s before it is
    killed, are on the slave, so a consumer moving to the slave re-reads nothing it had committed."""
    with cluster:
        client = RemotingClient()
        master, slave = broker_addr(cluster, 0), broker_addr(cluster, 1)
        instance = ClientInstance(
            cluster.namesrv_addr, persist_offset_interval=0.2, rebalance_interval=1.0
        )
        consumer = PushConsumer(
            PUSH_GROUP,
            instance=instance,
            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        )
        try:
            await wait_slave_connected(client, master, 60)
            await _ok(client, master, _update_topic())
            await _ok(client, master, send_request(TOPIC, b"m0"))
            body = orjson.dumps({"groupName": GROUP, "consumeBroadcastEnable": False})
            await _ok(
                client,
                master,
                RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, body),
            )

            async def slave_groups() -> object:
                reply = await _ok(
                    client,
                    slave,
                    RemotingCommand.request(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG),
                )
                return SubscriptionGroupWrapper.decode(reply.body_bytes()).subscription_group_table

            took: dict[str, float] = {}
            took["group"] = await _until(
                "subscription group",
                slave_groups,
                lambda seen: isinstance(seen, dict) and GROUP in seen,
            )

            async def slave_offset() -> object:
                reply = await _ok(
                    client,
                    slave,
                    RemotingCommand.request(
                        RequestCode.QUERY_CONSUMER_OFFSET,
                        {"consumerGroup": GROUP, "topic": TOPIC, "queueId": "0"},
                    ),
                )
                return (reply.ext_fields or {}).get("offset")

            for offset in (1, 7, 3):  # a reset backwards must arrive too
                await _ok(
                    client,
                    master,
                    RemotingCommand.request(
                        RequestCode.UPDATE_CONSUMER_OFFSET,
                        {
                            "consumerGroup": GROUP,
                            "topic": TOPIC,
                            "queueId": "0",
                            "commitOffset": str(offset),
                        },
                    ),
                )
                took[f"offset {offset}"] = await _until(
                    f"offset {offset}", slave_offset, lambda seen, o=offset: seen == str(o)
                )
            info = await runtime_info(client, slave)
            assert info["haSlaveSyncRounds"] == "1", info
            print(f"slave metadata latency (s): {took}")

            for i in range(20):
                await _ok(client, master, send_request(TOPIC, f"c{i}".encode(), queue_id=i % 2))
            got: set[bytes] = set()

            async def listener(msgs: list[MessageExt], context: object) -> None:
                got.update(m.body for m in msgs)

            consumer.subscribe(TOPIC, "*")
            consumer.register_listener(listener)
            await consumer.start()
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 60
            # queue 0 also holds m0
            while (committed := await _committed(client, master, PUSH_GROUP, 2)) != ["11", "10"]:
                assert loop.time() < deadline, (len(got), committed)
                await asyncio.sleep(0.1)
            await consumer.shutdown()
            await asyncio.sleep(1.5)  # not synchronisation: the commits are 1.5 s old at the kill
            cluster.brokers[0].proc.kill()
            await asyncio.to_thread(cluster.brokers[0].proc.wait, 30)
            # the slave had them before the master died (its periodic sync is 60 s away)
            assert await _committed(client, slave, PUSH_GROUP, 2) == ["11", "10"]
        finally:
            await instance.shutdown()
            await client.close()
