"""Consumer group membership over real connections: NOTIFY_CONSUMER_IDS_CHANGED reaches the members."""

from __future__ import annotations

import asyncio

from ferrymq.broker.app import BrokerApp
from ferrymq.remoting.bodies import HeartbeatData
from ferrymq.remoting.channel import Channel
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.processor import ProcessorTable


def heartbeat(client_id: str, group: str) -> RemotingCommand:
    body = HeartbeatData.from_json_obj(
        {
            "clientID": client_id,
            "consumerDataSet": [
                {
                    "groupName": group,
                    "consumeType": "CONSUME_PASSIVELY",
                    "messageModel": "CLUSTERING",
                    "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                    "subscriptionDataSet": [{"topic": "N", "subString": "*"}],
                }
            ],
        }
    ).encode()
    return RemotingCommand.request(RequestCode.HEART_BEAT, None, body)


def recording_client(seen: list[str]) -> RemotingClient:
    table = ProcessorTable()

    def on_notify(channel: Channel, request: RemotingCommand) -> None:
        seen.append(request.ext_fields["consumerGroup"])

    table.register(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, on_notify)
    return RemotingClient(table)


async def wait_len(items: list[str], n: int) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 5
    while len(items) < n:
        assert loop.time() < deadline, f"{len(items)} notifications, expected {n}"
        await asyncio.sleep(0.01)


async def test_members_are_notified_when_the_group_changes(broker: BrokerApp) -> None:
    seen_a: list[str] = []
    seen_b: list[str] = []
    a, b = recording_client(seen_a), recording_client(seen_b)
    try:
        await a.invoke(broker.addr, heartbeat("A", "NG"))
        await wait_len(seen_a, 1)  # A joined: the (one-member) group changed
        await a.invoke(broker.addr, heartbeat("A", "NG"))  # a repeat heartbeat changes nothing
        await b.invoke(broker.addr, heartbeat("B", "NG"))
        await wait_len(seen_a, 2)
        await wait_len(seen_b, 1)
        assert broker.consumers.get("NG").client_ids() == ["A", "B"]  # type: ignore[union-attr]
        await b.close()  # B's connection closes: A is told
        await wait_len(seen_a, 3)
        assert seen_a == ["NG", "NG", "NG"] and len(seen_b) == 1
        assert broker.consumers.get("NG").client_ids() == ["A"]  # type: ignore[union-attr]
    finally:
        await a.close()
        await b.close()
