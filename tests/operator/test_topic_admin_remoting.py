"""RemotingTopicAdmin over real sockets on 127.0.0.1.

The broker application is not part of this package's tests, so each "broker" here is a real
ferrymq RemotingServer answering the two admin codes the operator uses (GET_ALL_TOPIC_CONFIG and
UPDATE_AND_CREATE_TOPIC) from an in-memory topic table: a protocol-level stand-in, named as such.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from ferrymq.remoting import bodies
from ferrymq.remoting.channel import Channel
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.headers import CreateTopicRequestHeader
from ferrymq.remoting.server import RemotingServer
from ferrymq_operator.broker_admin import (
    AdminUnavailable,
    RemotingTopicAdmin,
    TopicConfig,
    copy_topics,
)


class StandInBroker:
    """A RemotingServer holding a topic table, answering the admin codes like a broker would."""

    def __init__(self, topics: dict[str, bodies.TopicConfig]) -> None:
        self.topics = topics
        self.server = RemotingServer("127.0.0.1", 0, name="stand-in broker")
        self.server.register(RequestCode.GET_ALL_TOPIC_CONFIG, self.get_all)
        self.server.register(RequestCode.UPDATE_AND_CREATE_TOPIC, self.create)

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.server.port}"

    def get_all(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        wrapper = bodies.TopicConfigSerializeWrapper(topic_config_table=dict(self.topics))
        return request.response(ResponseCode.SUCCESS, body=wrapper.encode())

    def create(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        header = CreateTopicRequestHeader.from_ext(request.ext_fields)
        if header.topic.startswith("bad"):
            return request.response(ResponseCode.SYSTEM_ERROR, "refused by the stand-in")
        self.topics[header.topic] = bodies.TopicConfig(
            topic_name=header.topic,
            read_queue_nums=header.read_queue_nums,
            write_queue_nums=header.write_queue_nums,
            perm=header.perm,
            order=header.order,
        )
        return request.response(ResponseCode.SUCCESS)


@pytest.fixture
async def brokers() -> AsyncIterator[list[StandInBroker]]:
    group0 = StandInBroker(
        {
            "orders": bodies.TopicConfig(
                topic_name="orders", read_queue_nums=4, write_queue_nums=4
            ),
            "TBW102": bodies.TopicConfig(topic_name="TBW102"),
        }
    )
    group1 = StandInBroker(
        {
            "payments": bodies.TopicConfig(
                topic_name="payments", read_queue_nums=2, write_queue_nums=2, order=True
            )
        }
    )
    new_group = StandInBroker({})
    started = [group0, group1, new_group]
    for b in started:
        await b.server.start()
    yield started
    for b in started:
        await b.server.stop()


async def test_reads_topics_over_the_wire(brokers: list[StandInBroker]) -> None:
    admin = RemotingTopicAdmin(timeout_seconds=3)
    topics = {t.topic_name: t for t in await admin.topics(brokers[0].addr)}
    assert topics["orders"].read_queue_nums == 4
    assert topics["orders"].topic_filter_type == "SINGLE_TAG"
    assert set(topics) == {"orders", "TBW102"}


async def test_copy_topics_to_a_new_group(brokers: list[StandInBroker]) -> None:
    admin = RemotingTopicAdmin(timeout_seconds=3)
    group0, group1, new_group = brokers
    created = await copy_topics(
        admin, [group0.addr, group1.addr], new_group.addr, "orders-cluster", ["b-0", "b-1", "b-2"]
    )
    assert [t.topic_name for t in created] == ["orders", "payments"]
    assert set(new_group.topics) == {"orders", "payments"}
    assert new_group.topics["payments"].order is True
    assert new_group.topics["orders"].write_queue_nums == 4
    again = await copy_topics(
        admin, [group0.addr, group1.addr], new_group.addr, "orders-cluster", ["b-0", "b-1", "b-2"]
    )
    assert again == []


async def test_unreachable_broker_is_reported() -> None:
    admin = RemotingTopicAdmin(timeout_seconds=1)
    with pytest.raises(AdminUnavailable, match="unreachable"):
        await admin.topics("127.0.0.1:1")


async def test_broker_refusal_is_raised(brokers: list[StandInBroker]) -> None:
    admin = RemotingTopicAdmin(timeout_seconds=3)
    with pytest.raises(Exception, match="refused by the stand-in"):
        await admin.create_topic(brokers[2].addr, TopicConfig("bad-topic"))
