"""The send pipeline every producer shares (the steps of upstream DefaultMQProducerImpl.sendDefaultImpl).

``Producer`` (asyncio), ``SyncProducer`` (blocking sockets in the caller's thread) and
``TransactionProducer`` (half messages) send the same way up to the I/O of an attempt. Each step is
a public method of one :class:`SendPipeline`, which also holds the send settings, so no producer
reaches into another's privates:

- ``prepare`` / ``prepare_batch``: validate, give every message its UNIQ_KEY (so retries carry
  the same id), transform the body (compression); ``stamp`` and ``transform_body`` separately
  for a caller that validates itself (transactions);
- ``cached_route``: the topic's cached publish route, without a coroutine (the hot path);
- ``select_queue``: one queue for a send that is never retried (oneway), via the fault strategy;
- ``attempts``: the retry policy of one send (:class:`~ferrymq.client.send_attempts.SendAttempts`),
  which also chooses each attempt's queue with latency-fault tolerance: a sync send is tried
  ``1 + retry_times_when_send_failed`` times, also after a timeout or lost connection; an async
  one ``1 + retry_times_when_send_async_failed`` times, only after a retriable broker answer;
- ``header`` / ``send_ext``: the SEND_MESSAGE(_V2) request fields; reading the answer is
  ``broker_api.send_result`` (blocking) or ``BrokerApi.send_message_ext`` (asyncio);
- ``send``: the asyncio retry loop (``Producer``, ``TransactionProducer``); ``SyncProducer``
  drives the same ``attempts`` loop with blocking I/O in the caller's thread (its reason to be:
  no event-loop hop per send), and both loops decide what a failure leads to with
  ``after_failure``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import TypedDict

from ferrymq.client.allocate import MessageQueue
from ferrymq.client.broker_api import SendResult, v2_ext
from ferrymq.client.compression import compress_body
from ferrymq.client.errors import BrokerUnreachableError, MessageValidationError, MQClientError
from ferrymq.client.instance import ClientInstance
from ferrymq.client.latency_fault import MQFaultStrategy
from ferrymq.client.route_cache import TopicPublishInfo
from ferrymq.client.send_attempts import SendAttempts, client_msg_id, now_ms
from ferrymq.message import Message, MessageConst, encode_batch, encode_properties
from ferrymq.remoting import headers
from ferrymq.topic_validator import AUTO_CREATE_TOPIC_KEY_TOPIC as DEFAULT_TOPIC
from ferrymq.topic_validator import RETRY_GROUP_TOPIC_PREFIX, TOPIC_MAX_LENGTH, TOPIC_NAME_PATTERN

log = logging.getLogger(__name__)

DEFAULT_MAX_MESSAGE_SIZE = 4 * 1024 * 1024

BodyTransform = Callable[[bytes, int], tuple[bytes, int]]


def check_topic(topic: str) -> None:
    """Upstream Validators.checkTopic: non-blank, ``[%|a-zA-Z0-9_-]``, at most 127 characters."""
    if not topic or not topic.strip():
        raise MessageValidationError("the specified topic is blank")
    if len(topic) > TOPIC_MAX_LENGTH:
        raise MessageValidationError(
            f"the specified topic is longer than topic max length {TOPIC_MAX_LENGTH}"
        )
    if not TOPIC_NAME_PATTERN.match(topic):
        raise MessageValidationError(
            f"the specified topic {topic!r} contains characters other than [%|a-zA-Z0-9_-]"
        )
    if topic == DEFAULT_TOPIC:
        raise MessageValidationError(f"the topic {topic!r} is reserved for auto-creation")


def check_message(msg: Message, max_size: int, legal_topics: set[str] | None = None) -> None:
    """Upstream Validators.checkMessage: topic, a non-empty body no larger than ``max_size``.

    ``legal_topics``: names already checked (skipped) and where a name that passes is added.
    """
    if legal_topics is None or msg.topic not in legal_topics:
        check_topic(msg.topic)
        if legal_topics is not None:
            if len(legal_topics) >= 4096:
                legal_topics.clear()
            legal_topics.add(msg.topic)
    if not msg.body:
        raise MessageValidationError("the message body is empty")
    if len(msg.body) > max_size:
        raise MessageValidationError(
            f"the message body size {len(msg.body)} exceeds the maximum {max_size} bytes"
        )


class SendOptions(TypedDict, total=False):
    """The send settings a producer takes as keywords (``Producer(..., send_msg_timeout=5)``);
    their defaults and meaning are :class:`SendPipeline`'s."""

    send_msg_timeout: float
    retry_times_when_send_failed: int
    retry_times_when_send_async_failed: int
    retry_another_broker_when_not_store_ok: bool
    max_message_size: int
    default_topic_queue_nums: int
    send_latency_fault_enable: bool
    body_transform: BodyTransform | None


class SendPipeline:
    """The send settings of one producer group and the steps of a send (see the module doc).

    The attributes are the upstream DefaultMQProducer settings; a producer exposes them as its
    own. Safe to call from several threads: the caches below are only ever replaced or filled
    with equal values, and the fault table locks itself.
    """

    def __init__(
        self,
        group: str,
        instance: ClientInstance,
        *,
        send_msg_timeout: float = 3.0,
        retry_times_when_send_failed: int = 2,
        retry_times_when_send_async_failed: int = 2,
        retry_another_broker_when_not_store_ok: bool = False,
        max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
        default_topic_queue_nums: int = 4,
        send_latency_fault_enable: bool = False,
        # bodies over 4 KiB are deflated with COMPRESSED_FLAG, as upstream; None sends them as is
        body_transform: BodyTransform | None = compress_body,
    ) -> None:
        self.group = group
        self.instance = instance
        self.send_msg_timeout = send_msg_timeout
        self.retry_times_when_send_failed = retry_times_when_send_failed
        self.retry_times_when_send_async_failed = retry_times_when_send_async_failed
        self.retry_another_broker_when_not_store_ok = retry_another_broker_when_not_store_ok
        self.max_message_size = max_message_size
        self.default_topic_queue_nums = default_topic_queue_nums
        self.fault = MQFaultStrategy(send_latency_fault_enable=send_latency_fault_enable)
        self.body_transform = body_transform
        self._legal_topics: set[str] = set()
        # SEND_MESSAGE_V2 ext fields per topic and queue, built once (see send_ext)
        self._ext_templates: dict[bool, dict[str, dict[int, dict[str, str]]]] = {
            False: {},
            True: {},
        }
        self._ext_templates_nums = default_topic_queue_nums

    # --- before the first attempt -----------------------------------------------------------------
    def prepare(self, msg: Message) -> tuple[bytes, int]:
        """Validate, give the message its UNIQ_KEY, and transform its body: what every single
        send does before its first attempt. Returns the body to send and its sysFlag."""
        check_message(msg, self.max_message_size, self._legal_topics)
        self.stamp(msg)
        return self.transform_body(msg.body)

    def stamp(self, msg: Message) -> None:
        """Give ``msg`` a UNIQ_KEY unless it has one (a resent message keeps its id)."""
        if MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX not in msg.properties:
            msg.properties[MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = (
                self.instance.ids.next_id()
            )

    def transform_body(self, body: bytes) -> tuple[bytes, int]:
        """``body_transform`` (compression) applied: the body to send and its sysFlag."""
        if self.body_transform is None:
            return body, 0
        return self.body_transform(body, 0)

    def prepare_batch(self, msgs: Sequence[Message]) -> tuple[str, bytes]:
        """Validate a batch, stamp every message, encode the SEND_BATCH_MESSAGE body.

        Returns the batch's topic and body (never compressed, sysFlag 0, as upstream)."""
        if not msgs:
            raise MessageValidationError("a batch needs at least one message")
        topic = msgs[0].topic
        check_topic(topic)  # once: every message must carry this very topic
        if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            raise MessageValidationError("retry-group messages are not supported in a batch")
        delay = MessageConst.PROPERTY_DELAY_TIME_LEVEL
        uniq = MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX
        next_id = self.instance.ids.next_id
        limit = self.max_message_size
        for msg in msgs:
            if msg.topic != topic:
                raise MessageValidationError(
                    f"all messages of a batch must share one topic ({topic!r} and {msg.topic!r})"
                )
            props = msg.properties
            if props.get(delay, "0") not in ("0", ""):
                raise MessageValidationError("delayed messages are not supported in a batch")
            if not msg.body:
                raise MessageValidationError("the message body is empty")
            if len(msg.body) > limit:
                raise MessageValidationError(
                    f"the message body size {len(msg.body)} exceeds the maximum {limit} bytes"
                )
            if uniq not in props:
                props[uniq] = next_id()
        body = encode_batch(msgs)
        if len(body) > self.max_message_size:
            raise MessageValidationError(
                f"the batch is {len(body)} bytes encoded; the maximum is {self.max_message_size}"
            )
        return topic, body

    # --- route and queue --------------------------------------------------------------------------
    def cached_route(self, topic: str) -> TopicPublishInfo | None:
        """The topic's cached publish route when it has queues; None means ask the NameServer
        (``instance.publish_info``), which the caller does its own way (await or block)."""
        info = self.instance.routes.publish.get(topic)
        if info is None or not info.queues:
            return None
        return info

    def select_queue(self, info: TopicPublishInfo) -> MessageQueue:
        """The queue of a send that is never retried (oneway): the fault strategy's choice."""
        return self.fault.select_queue(info.queues, info.next_index, None, now_ms())

    def attempts(
        self, topic: str, *, timeout: float | None = None, async_send: bool = False
    ) -> SendAttempts:
        """The attempts of one send within ``timeout`` seconds (``send_msg_timeout`` if None),
        as upstream: a sync send is retried after any retriable failure, an async one (like
        ``send_async``) only after a retriable broker answer, each up to its own retry count."""
        if async_send:
            attempts, retry_transport = 1 + self.retry_times_when_send_async_failed, False
        else:
            attempts, retry_transport = 1 + self.retry_times_when_send_failed, True
        return SendAttempts(
            topic,
            self.fault,
            attempts=attempts,
            timeout=timeout or self.send_msg_timeout,
            retry_transport=retry_transport,
            retry_another_broker_when_not_store_ok=self.retry_another_broker_when_not_store_ok,
        )

    @staticmethod
    def after_failure(
        tries: SendAttempts, mq: MessageQueue, exc: MQClientError
    ) -> tuple[bool, bool]:
        """What a failed attempt on ``mq`` leads to, for both retry loops (``send`` here and
        ``SyncProducer``'s blocking one): (re-read the topic's route, try again). The route is
        re-read on a dead broker too, even when the send is not retried: after a failover the
        NameServer names the new master within seconds, long before the 30 s poll."""
        refresh = exc.refresh_route or isinstance(exc, BrokerUnreachableError)
        return refresh, tries.retry_after(mq, exc)

    # --- the request ------------------------------------------------------------------------------
    def header(
        self, mq: MessageQueue, msg: Message, sys_flag: int, *, batch: bool
    ) -> headers.SendMessageRequestHeader:
        """The SEND_MESSAGE request header of ``msg`` to ``mq``."""
        return headers.SendMessageRequestHeader(
            producer_group=self.group,
            topic=mq.topic,
            default_topic=DEFAULT_TOPIC,
            default_topic_queue_nums=self.default_topic_queue_nums,
            queue_id=mq.queue_id,
            sys_flag=sys_flag,
            born_timestamp=int(time.time() * 1000),
            flag=msg.flag,
            # a batch's own properties are empty: each message carries its own inside the body
            properties=None if batch else encode_properties(msg.properties),
            reconsume_times=0,
            unit_mode=False,
            batch=batch,
        )

    def send_ext(
        self, mq: MessageQueue, msg: Message, sys_flag: int, batch: bool
    ) -> dict[str, str]:
        """``v2_ext(self.header(...))``, filled into a copy of a per-queue template: only the
        timestamp, properties, sysFlag and flag change between sends."""
        if self._ext_templates_nums != self.default_topic_queue_nums:
            self._ext_templates = {False: {}, True: {}}
            self._ext_templates_nums = self.default_topic_queue_nums
        by_topic = self._ext_templates[batch]
        by_queue = by_topic.get(mq.topic)
        if by_queue is None:
            if len(by_topic) >= 4096:
                by_topic.clear()
            by_queue = by_topic[mq.topic] = {}
        template = by_queue.get(mq.queue_id)
        if template is None:
            blank = Message(mq.topic)  # flag 0, no properties: filled in below
            template = by_queue[mq.queue_id] = v2_ext(self.header(mq, blank, 0, batch=batch))
        ext = template.copy()
        ext["g"] = str(int(time.time() * 1000))
        if sys_flag:
            ext["f"] = str(sys_flag)
        if msg.flag:
            ext["h"] = str(msg.flag)
        if not batch:
            ext["i"] = encode_properties(msg.properties)
        return ext

    # --- the asyncio retry loop -------------------------------------------------------------------
    async def send(
        self,
        topic: str,
        msgs: list[Message],
        body: bytes,
        sys_flag: int,
        *,
        batch: bool,
        timeout: float | None = None,
        async_send: bool = False,
    ) -> SendResult:
        """Send prepared messages (``prepare``/``prepare_batch``), retrying on another broker
        as ``attempts`` decides; the result's msg_id is the client's UNIQ_KEY(s)."""
        instance = self.instance
        tries = self.attempts(topic, timeout=timeout, async_send=async_send)
        msg_id = client_msg_id(msgs)
        while (remaining := tries.next()) > 0:
            info = self.cached_route(topic)
            if info is None:
                info = await instance.publish_info(topic, self.default_topic_queue_nums)
            mq = tries.select(info)
            try:
                addr = instance.broker_addr(mq.broker_name)
                if addr is None:
                    addr = await instance.find_broker_addr(mq.broker_name, topic)
                result = await instance.broker.send_message_ext(
                    addr,
                    mq,
                    self.send_ext(mq, msgs[0], sys_flag, batch),
                    body,
                    batch=batch,
                    timeout=remaining,
                    msg_id=msg_id,
                )
            except MQClientError as exc:
                refresh, again = self.after_failure(tries, mq, exc)
                if refresh:
                    try:
                        await instance.update_route(topic)
                    except MQClientError as refresh_exc:
                        log.info("route refresh of %s failed: %s", topic, refresh_exc)
                if not again:
                    raise
                continue
            if tries.accept(mq, result):
                return result
        return tries.outcome()
