"""Producer queue selectors for ordered messages (upstream ``MessageQueueSelector`` implementations).

Partial ordering: every message with the same business key goes to the same queue, so one orderly
consumer sees them in send order. :func:`select_by_hash` is upstream ``SelectMessageQueueByHash``
(Java ``String.hashCode`` of the key modulo the queue count, negative results made positive), so a
Java and a ferrymq producer put the same key on the same queue.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

from ferrymq.client.allocate import MessageQueue
from ferrymq.message import Message, java_string_hash

if TYPE_CHECKING:
    from ferrymq.client.broker_api import SendResult
    from ferrymq.client.producer import Producer

__all__ = [
    "MessageQueueSelector",
    "select_by_hash",
    "select_by_key",
    "select_by_random",
    "send_orderly",
]

Q = TypeVar("Q")

MessageQueueSelector = Callable[[Sequence[Q], Message, object], Q]
"""``(queues, message, arg) -> queue``; ``arg`` is what the caller passed to ``send_orderly``."""


def _check(queues: Sequence[Q]) -> None:
    if not queues:
        raise ValueError("no message queue to select from: the topic has no writable queue")


def _java_hash(arg: object) -> int:
    if isinstance(arg, str):
        return java_string_hash(arg)
    if isinstance(arg, bool):
        return 1231 if arg else 1237  # Boolean.hashCode
    if isinstance(arg, int):
        # Long.hashCode for values outside the int range, Integer.hashCode inside
        if -(2**31) <= arg < 2**31:
            return arg
        v = arg & 0xFFFFFFFFFFFFFFFF
        h = (v ^ (v >> 32)) & 0xFFFFFFFF
        return h - 2**32 if h & 0x80000000 else h
    return java_string_hash(str(arg))


def select_by_hash(queues: Sequence[Q], message: Message, arg: object) -> Q:
    """Upstream ``SelectMessageQueueByHash``: ``abs(arg.hashCode() % queues.size())``."""
    _check(queues)
    h = _java_hash(arg)
    # Java's % truncates toward zero; math.fmod semantics on ints
    value = abs(h) % len(queues)
    return queues[value]


def select_by_random(queues: Sequence[Q], message: Message, arg: object) -> Q:
    """Upstream ``SelectMessageQueueByRandom``."""
    _check(queues)
    return queues[random.randrange(len(queues))]


def select_by_key(queues: Sequence[Q], message: Message, arg: object) -> Q:
    """Hash by ``arg`` when given, else by the message's first KEYS entry (else its topic)."""
    key = arg if arg is not None else (message.keys[0] if message.keys else message.topic)
    return select_by_hash(queues, message, key)


async def send_orderly(
    producer: Producer,
    msg: Message,
    arg: object,
    selector: MessageQueueSelector[MessageQueue] = select_by_hash,
) -> SendResult:
    """Upstream ``send(msg, selector, arg)``: send to the queue the selector picks among the
    topic's writable queues (same key, same queue), with no retry on another queue (that would
    break the order)."""
    info = await producer.instance.publish_info(msg.topic, producer.default_topic_queue_nums)
    return await producer.send_to_queue(msg, selector(info.queues, msg, arg))
