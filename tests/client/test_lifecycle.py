"""The lifecycle producers and consumers share (client/lifecycle.py): bad construction, use
before start, a second start, idempotent shutdown, and owned vs shared ClientInstances."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from ferrymq.client import Message, Producer, PullConsumer, PushConsumer
from ferrymq.client.errors import ClientStateError
from ferrymq.client.instance import ClientInstance
from ferrymq.client.lifecycle import ClientMember

from .cluster import LocalCluster, start_cluster

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[LocalCluster]:
    c = await start_cluster(tmp_path, broker_names=("broker-a",))
    try:
        yield c
    finally:
        await c.stop()


@pytest.mark.parametrize(
    ("cls", "role"),
    [(Producer, "producer"), (PullConsumer, "consumer"), (PushConsumer, "consumer")],
)
def test_construction_errors_name_the_role(cls: type[ClientMember], role: str) -> None:
    with pytest.raises(ValueError, match=f"^{role} group is empty"):
        cls("", "127.0.0.1:9876")  # type: ignore[call-arg]
    with pytest.raises(ValueError, match=f"a {role} needs namesrv_addr"):
        cls("g")  # type: ignore[call-arg]


async def test_producer_states(cluster: LocalCluster) -> None:
    producer = Producer("lifecycle-pg", cluster.namesrv_addr)
    with pytest.raises(
        ClientStateError, match="producer lifecycle-pg is not running \\(created\\)"
    ):
        await producer.send(Message("T", b"x"))
    await producer.start()
    assert producer.instance.running
    with pytest.raises(ClientStateError, match="is running; create a new one"):
        await producer.start()
    await producer.shutdown()
    await producer.shutdown()  # a second shutdown is a no-op
    assert not producer.instance.running  # the producer owned its instance
    with pytest.raises(ClientStateError, match="is shut down; create a new one"):
        await producer.start()
    with pytest.raises(ClientStateError, match="not running \\(shut down\\)"):
        await producer.send(Message("T", b"x"))


async def test_shared_instance_outlives_its_members(cluster: LocalCluster) -> None:
    instance = ClientInstance(cluster.namesrv_addr)
    try:
        async with Producer("lifecycle-shared-pg", instance=instance) as producer:
            async with PullConsumer("lifecycle-shared-cg", instance=instance) as consumer:
                assert producer.instance is consumer.instance is instance
            assert consumer._state == "shut down"
            assert instance.running  # the consumer did not own it
        assert instance.running
    finally:
        await instance.shutdown()
    assert not instance.running


async def test_push_consumer_checks_before_start(cluster: LocalCluster) -> None:
    consumer = PushConsumer("lifecycle-push", cluster.namesrv_addr)
    with pytest.raises(ClientStateError, match="register a listener"):
        await consumer.start()
    consumer.register_listener(lambda msgs, ctx: True)
    with pytest.raises(ClientStateError, match="subscribe to at least one topic"):
        await consumer.start()
    consumer.subscribe("LifecycleTopic")
    async with consumer:
        assert consumer.instance.running
        with pytest.raises(ClientStateError, match="consumer lifecycle-push is running"):
            await consumer.start()
    assert not consumer.instance.running


async def test_admin_client_needs_an_address_or_a_shared_instance() -> None:
    from ferrymq.client.admin import AdminClient

    with pytest.raises(ValueError, match=r"^an admin client needs namesrv_addr"):
        AdminClient()


UPSTREAM_DUPLICATE = (
    "The consumer group[lifecycle-dup] has been created before, specify another name please."
    "\nSee https://rocketmq.apache.org/docs/bestPractice/06FAQ for further details."
)


async def test_a_second_consumer_of_a_group_in_one_client_instance_is_refused(
    cluster: LocalCluster,
) -> None:
    """Upstream refuses it with this message (DefaultMQPushConsumerImpl.start): both would share
    the client id the broker relays GET_CONSUMER_RUNNING_INFO by (issue 34, item 6)."""
    from ferrymq.client.errors import MQClientError

    instance = ClientInstance(cluster.namesrv_addr)
    first = PushConsumer("lifecycle-dup", instance=instance)
    first.register_listener(lambda msgs, ctx: True)
    first.subscribe("LifecycleTopic")
    second = PushConsumer("lifecycle-dup", instance=instance)
    second.register_listener(lambda msgs, ctx: True)
    second.subscribe("LifecycleTopic")
    pull = PullConsumer("lifecycle-dup", instance=instance)
    # the same client id in one process (an explicit instanceName): upstream shares the instance
    twin = ClientInstance(cluster.namesrv_addr, instance_name=instance.instance_name)
    third = PushConsumer("lifecycle-dup", instance=twin)
    third.register_listener(lambda msgs, ctx: True)
    third.subscribe("LifecycleTopic")
    try:
        async with first:
            for refused in (second, pull, third):
                with pytest.raises(MQClientError) as exc:
                    await refused.start()
                assert str(exc.value) == UPSTREAM_DUPLICATE
                assert refused._state == "created"
            other = PushConsumer("lifecycle-other", instance=instance)
            other.register_listener(lambda msgs, ctx: True)
            other.subscribe("LifecycleTopic")
            async with other:
                other_ok = other._state  # another group in the same instance is fine
        # once the first left, the group may start again in this instance
        async with PullConsumer("lifecycle-dup", instance=instance) as again:
            assert again._state == "running"
    finally:
        await instance.shutdown()
        await twin.shutdown()
    assert other_ok == "running"
