"""Raw remoting requests the POP, timer and message-type tests send to any broker (ferrymq's or
Apache's): a topic created by UPDATE_AND_CREATE_TOPIC and a message sent by SEND_MESSAGE_V2 with
chosen properties, the reply returned as it came."""

from __future__ import annotations

import time
from typing import Any

import orjson
from ferrymq.message import encode_properties
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.headers import SendMessageRequestHeader


def create_topic_ext(topic: str, queues: int = 1, attributes: str | None = None) -> dict[str, Any]:
    ext: dict[str, Any] = {
        "topic": topic,
        "defaultTopic": "TBW102",
        "readQueueNums": queues,
        "writeQueueNums": queues,
        "perm": 6,
        "topicFilterType": "SINGLE_TAG",
        "topicSysFlag": 0,
        "order": False,
    }
    if attributes is not None:
        ext["attributes"] = attributes
    return ext


async def create_topic(
    client: RemotingClient, addr: str, topic: str, queues: int = 1, attributes: str | None = None
) -> RemotingCommand:
    request = RemotingCommand.request(
        RequestCode.UPDATE_AND_CREATE_TOPIC, create_topic_ext(topic, queues, attributes)
    )
    return await client.invoke(addr, request, 10)


async def send_message(
    client: RemotingClient,
    addr: str,
    topic: str,
    body: bytes = b"x",
    *,
    queue_id: int = 0,
    check: bool = False,
    **props: str,
) -> RemotingCommand:
    """SEND_MESSAGE_V2 with WAIT=true and ``props``; ``check`` asserts SUCCESS."""
    header = SendMessageRequestHeader(
        producer_group="pg",
        topic=topic,
        queue_id=queue_id,
        born_timestamp=int(time.time() * 1000),
        properties=encode_properties({"WAIT": "true", **props}),
    )
    reply = await client.invoke(
        addr, RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, header.to_ext_v2(), body), 10
    )
    if check:
        assert reply.code == ResponseCode.SUCCESS, reply.remark
    return reply


async def heartbeat_consumer(
    client: RemotingClient, addr: str, client_id: str, group: str, topic: str
) -> None:
    """HEART_BEAT of one clustering consumer of ``group`` subscribed to ``topic`` (all tags)."""
    heartbeat = {
        "clientID": client_id,
        "producerDataSet": [],
        "consumerDataSet": [
            {
                "groupName": group,
                "consumeType": "CONSUME_POP",
                "messageModel": "CLUSTERING",
                "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                "subscriptionDataSet": [
                    {
                        "topic": topic,
                        "subString": "*",
                        "tagsSet": [],
                        "codeSet": [],
                        "subVersion": 1,
                        "expressionType": "TAG",
                    }
                ],
                "unitMode": False,
            }
        ],
    }
    request = RemotingCommand.request(RequestCode.HEART_BEAT, None, orjson.dumps(heartbeat))
    reply = await client.invoke(addr, request, 10)
    assert reply.code == ResponseCode.SUCCESS, reply.remark
