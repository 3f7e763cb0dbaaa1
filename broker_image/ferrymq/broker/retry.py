"""Consumer send-back: retry topics and the dead-letter queue (upstream
``SendMessageProcessor.consumerSendMsgBack``).

A clustering consumer that fails a message (RECONSUME_LATER) sends it back with
CONSUMER_SEND_MSG_BACK naming its commit-log offset. The broker re-reads the message and stores a
copy with ``reconsumeTimes + 1``:

- into ``%RETRY%<group>`` with delay level ``3 + reconsumeTimes`` when the client asked for level 0
  (the usual case: 10 s, 30 s, 1 m, ... as the failures add up), through the schedule topic;
- into ``%DLQ%<group>`` once the message has already been reconsumed ``maxReconsumeTimes`` times (16
  by default, from the request or the subscription group) or when the client asks for a negative
  level. The DLQ topic is created readable and writable (PERM_READ | PERM_WRITE, as upstream's
  ``createTopicInSendMessageBackMethod`` call): a consumer can pull it to reprocess dead letters.

The original topic travels in ``RETRY_TOPIC`` and the first msgId in ``ORIGIN_MESSAGE_ID``, so the
consumer restores the topic and users can correlate retries. The decision is the pure
:func:`decide_send_back`; :class:`RetryService` does the reads and writes.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from dataclasses import dataclass

from ferrymq.broker.message_copy import restored_message, stored_body
from ferrymq.broker.schedule import to_schedule_topic
from ferrymq.broker.store_port import MessageStorePort
from ferrymq.message import (
    MessageConst,
)
from ferrymq.remoting.bodies import PERM_READ, PERM_WRITE, SubscriptionGroupConfig
from ferrymq.remoting.codes import ResponseCode
from ferrymq.topic_validator import (
    DLQ_GROUP_TOPIC_PREFIX,
    RETRY_GROUP_TOPIC_PREFIX,
    dlq_topic,
    retry_topic,
)

log = logging.getLogger(__name__)

__all__ = [
    "DLQ_GROUP_TOPIC_PREFIX",
    "DLQ_NUMS_PER_GROUP",
    "RETRY_GROUP_TOPIC_PREFIX",
    "RetryService",
    "SendBackDecision",
    "SendBackOutcome",
    "decide_send_back",
    "dlq_topic",
    "retry_topic",
]

DLQ_NUMS_PER_GROUP = 1
FIRST_RETRY_DELAY_LEVEL = 3


@dataclass(frozen=True, slots=True)
class SendBackDecision:
    topic: str
    queue_id: int
    delay_level: int  # 0 for the DLQ (stored at once)
    perm: int  # permission the topic is created with
    queue_nums: int
    to_dlq: bool


def decide_send_back(
    group: str,
    reconsume_times: int,
    requested_delay_level: int,
    max_reconsume_times: int,
    retry_queue_nums: int,
    pick: Callable[[int], int] = random.randrange,
) -> SendBackDecision:
    """Where a failed message goes next. ``pick(n)`` chooses a queue in ``range(n)``."""
    if reconsume_times >= max_reconsume_times or requested_delay_level < 0:
        return SendBackDecision(
            topic=dlq_topic(group),
            queue_id=pick(DLQ_NUMS_PER_GROUP),
            delay_level=0,
            perm=PERM_WRITE | PERM_READ,
            queue_nums=DLQ_NUMS_PER_GROUP,
            to_dlq=True,
        )
    level = requested_delay_level or FIRST_RETRY_DELAY_LEVEL + reconsume_times
    return SendBackDecision(
        topic=retry_topic(group),
        queue_id=pick(retry_queue_nums),
        delay_level=level,
        perm=PERM_WRITE | PERM_READ,
        queue_nums=retry_queue_nums,
        to_dlq=False,
    )


@dataclass(frozen=True, slots=True)
class SendBackOutcome:
    code: int
    remark: str | None = None
    decision: SendBackDecision | None = None


GroupLookup = Callable[[str], SubscriptionGroupConfig | None]
TopicCreator = Callable[[str, int, int], bool]
"""``(topic, queue_nums, perm) -> ok``: create the topic if missing (and register it)."""


class RetryService:
    def __init__(
        self,
        store: MessageStorePort,
        *,
        find_group: GroupLookup,
        create_topic: TopicCreator,
        max_delay_level: Callable[[], int],
        broker_writable: Callable[[], bool] = lambda: True,
        pick: Callable[[int], int] = random.randrange,
    ) -> None:
        self.store = store
        self.find_group = find_group
        self.create_topic = create_topic
        self.max_delay_level = max_delay_level
        self.broker_writable = broker_writable
        self.pick = pick
        # messages sent back per "topic@group" (upstream's SNDBCK_PUT_NUMS stats item)
        self.sent_back: dict[str, int] = {}

    async def send_back(
        self,
        *,
        group: str,
        commit_log_offset: int,
        delay_level: int,
        max_reconsume_times: int | None,
        origin_msg_id: str | None = None,
    ) -> SendBackOutcome:
        config = self.find_group(group)
        if config is None:
            return SendBackOutcome(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group {group} not exist"
            )
        if not self.broker_writable():
            return SendBackOutcome(ResponseCode.NO_PERMISSION, "the broker is not writable")
        if config.retry_queue_nums <= 0:
            # upstream: a group without retry queues drops failed messages
            return SendBackOutcome(ResponseCode.SUCCESS)
        msg = self.store.look_message_by_offset(commit_log_offset)
        if msg is None:
            return SendBackOutcome(
                ResponseCode.SYSTEM_ERROR, f"look message by offset {commit_log_offset} failed"
            )
        limit = max_reconsume_times if max_reconsume_times is not None else config.retry_max_times
        decision = decide_send_back(
            group, msg.reconsume_times, delay_level, limit, config.retry_queue_nums, self.pick
        )
        if not self.create_topic(decision.topic, decision.queue_nums, decision.perm):
            return SendBackOutcome(
                ResponseCode.SYSTEM_ERROR, f"topic {decision.topic} not exist and cannot be created"
            )
        props = dict(msg.properties)
        props.setdefault(MessageConst.PROPERTY_RETRY_TOPIC, msg.topic)
        # upstream: the first copy's id, else the broker's id of the failed message (its offset
        # msgId, what the broker's MessageExt.getMsgId() is), not the producer's unique key
        props[MessageConst.PROPERTY_ORIGIN_MESSAGE_ID] = (
            props.get(MessageConst.PROPERTY_ORIGIN_MESSAGE_ID)
            or msg.offset_msg_id
            or origin_msg_id
            or msg.msg_id
        )
        props[MessageConst.PROPERTY_WAIT_STORE_MSG_OK] = "false"
        if decision.delay_level > 0:
            props[MessageConst.PROPERTY_DELAY_TIME_LEVEL] = str(decision.delay_level)
        elif decision.to_dlq:
            props[MessageConst.PROPERTY_DELAY_TIME_LEVEL] = "0"  # upstream's DLQ copy has DELAY=0
        else:
            props.pop(MessageConst.PROPERTY_DELAY_TIME_LEVEL, None)
        body, sys_flag = stored_body(msg)
        inner = restored_message(
            msg,
            topic=decision.topic,
            queue_id=decision.queue_id,
            body=body,
            properties=props,
            sys_flag=sys_flag,
            reconsume_times=msg.reconsume_times + 1,
        )
        inner = to_schedule_topic(inner, self.max_delay_level())
        result = await self.store.put_message(inner)
        if not result.is_ok:
            return SendBackOutcome(
                ResponseCode.SYSTEM_ERROR, f"store put failed: {result.status.name}", decision
            )
        if decision.to_dlq:
            log.info(
                "message %s of group %s moved to %s after %d reconsumes",
                props[MessageConst.PROPERTY_ORIGIN_MESSAGE_ID],
                group,
                decision.topic,
                msg.reconsume_times,
            )
        key = f"{msg.topic}@{group}"
        self.sent_back[key] = self.sent_back.get(key, 0) + 1
        return SendBackOutcome(ResponseCode.SUCCESS, None, decision)
