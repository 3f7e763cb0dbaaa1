"""ferrymq Python client SDK: producer, push/pull consumers and admin client (RocketMQ 4.x protocol).

Everything is asyncio (run it on uvloop: ``ferrymq.remoting.eventloop.run``)::

    from ferrymq.client import Message, Producer, PushConsumer

    async with Producer("my-producer-group", "127.0.0.1:9876") as producer:
        msg = Message("Orders", b"payload")
        msg.tags, msg.keys = "created", ["order-42"]
        result = await producer.send(msg)        # also send_async, send_oneway, send_batch

Code without an event loop (scripts, WSGI apps, worker threads) sends with ``SyncProducer``,
whose calls block like upstream ``DefaultMQProducer.send``::

    with SyncProducer("my-producer-group", "127.0.0.1:9876") as producer:
        result = producer.send(Message("Orders", b"payload"))

    consumer = PushConsumer("my-consumer-group", "127.0.0.1:9876")
    consumer.subscribe("Orders", "created || paid")
    consumer.register_listener(lambda msgs, ctx: print(msgs))   # or an ``async def``
    await consumer.start()                       # ... await consumer.shutdown()

The names are loaded on first use, so ``ferrymq.client.allocate`` (pure, used by the Spark audit)
imports without the network stack.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ferrymq.client.admin import AdminClient
    from ferrymq.client.broker_api import PullResult, PullStatus, SendResult, SendStatus
    from ferrymq.client.consume_service import ConsumeContext, ConsumeStatus
    from ferrymq.client.errors import MQClientError
    from ferrymq.client.orderly_consume_service import (
        ConsumeOrderlyContext,
        ConsumeOrderlyStatus,
        OrderlyPushConsumer,
    )
    from ferrymq.client.producer import Producer
    from ferrymq.client.pull_consumer import PullConsumer
    from ferrymq.client.push_consumer import PushConsumer
    from ferrymq.client.selectors import send_orderly
    from ferrymq.client.sync_producer import SyncProducer
    from ferrymq.client.transaction_producer import LocalTransactionState, TransactionProducer
    from ferrymq.message import Message, MessageExt
    from ferrymq.remoting.bodies import ConsumeFromWhere, MessageModel

_EXPORTS = {
    "AdminClient": "ferrymq.client.admin",
    "ConsumeContext": "ferrymq.client.consume_service",
    "ConsumeFromWhere": "ferrymq.remoting.bodies",
    "ConsumeOrderlyContext": "ferrymq.client.orderly_consume_service",
    "ConsumeOrderlyStatus": "ferrymq.client.orderly_consume_service",
    "ConsumeStatus": "ferrymq.client.consume_service",
    "LocalTransactionState": "ferrymq.client.transaction_producer",
    "MQClientError": "ferrymq.client.errors",
    "Message": "ferrymq.message",
    "MessageExt": "ferrymq.message",
    "MessageModel": "ferrymq.remoting.bodies",
    "OrderlyPushConsumer": "ferrymq.client.orderly_consume_service",
    "Producer": "ferrymq.client.producer",
    "PullConsumer": "ferrymq.client.pull_consumer",
    "PullResult": "ferrymq.client.broker_api",
    "PullStatus": "ferrymq.client.broker_api",
    "PushConsumer": "ferrymq.client.push_consumer",
    "SendResult": "ferrymq.client.broker_api",
    "SendStatus": "ferrymq.client.broker_api",
    "SyncProducer": "ferrymq.client.sync_producer",
    "TransactionProducer": "ferrymq.client.transaction_producer",
    "send_orderly": "ferrymq.client.selectors",
}

__all__ = [
    "AdminClient",
    "ConsumeContext",
    "ConsumeFromWhere",
    "ConsumeOrderlyContext",
    "ConsumeOrderlyStatus",
    "ConsumeStatus",
    "LocalTransactionState",
    "MQClientError",
    "Message",
    "MessageExt",
    "MessageModel",
    "OrderlyPushConsumer",
    "Producer",
    "PullConsumer",
    "PullResult",
    "PullStatus",
    "PushConsumer",
    "SendResult",
    "SendStatus",
    "SyncProducer",
    "TransactionProducer",
    "send_orderly",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ferrymq.client' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
