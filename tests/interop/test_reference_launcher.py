"""The launcher itself: Apache RocketMQ 5.4.0 and ferrymq come up on 127.0.0.1 behind one
interface, take a message from ferrymq's client, and keep it across a broker kill and restart."""

from __future__ import annotations

import asyncio

from ferrymq.client import Message, Producer, SendStatus
from ferrymq.client.admin import AdminClient
from polling import wait_for

from .reference import Target, registered_brokers


async def _wait_routed(namesrv: str, topic: str) -> None:
    async with AdminClient(namesrv) as admin:

        async def routed() -> bool:
            route = await admin.instance.namesrv.get_route(topic)
            return route is not None and bool(route.queue_datas)

        await wait_for(routed, what=f"a route for {topic}")


async def test_target_takes_a_message_and_keeps_it_across_a_restart(target: Target) -> None:
    table = await asyncio.to_thread(registered_brokers, target.namesrv_addr)
    assert table == {"broker-a": {0: target.broker_addrs[0]}}

    topic = "LauncherSmoke"
    async with AdminClient(target.namesrv_addr) as admin:
        await admin.create_topic(topic, read_queue_nums=1, write_queue_nums=1)
    await _wait_routed(target.namesrv_addr, topic)
    async with Producer("PID_launcher", target.namesrv_addr) as producer:
        result = await producer.send(Message(topic, b"kept"))
    assert result.status is SendStatus.SEND_OK

    await asyncio.to_thread(target.restart_broker, 0, kill=True)
    async with AdminClient(target.namesrv_addr) as admin:
        queue = (await admin.topic_queues(topic))[0]
        assert await admin.max_offset(queue) == result.queue_offset + 1
