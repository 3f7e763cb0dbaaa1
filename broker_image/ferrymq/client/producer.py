"""Producer: sync, async, oneway and batch sends (upstream DefaultMQProducer / DefaultMQProducerImpl).

The send pipeline (seeds-digest PR2-PR18): validate, find the route (TBW102 for a new topic),
choose a queue (round-robin, or latency-aware with ``send_latency_fault_enable``), send, and on a
retriable failure try again on a queue of another broker, up to ``retry_times_when_send_failed``
extra attempts within the send timeout. Every message gets its UNIQ_KEY before the first attempt,
so retries carry the same id.

- ``send``: waits for the broker's answer, retries as above.
- ``send_async``: returns a task at once; retries only when the broker *answered* with a retriable
  code (as upstream, a timeout or a lost connection is not retried), at most
  ``retry_times_when_send_async_failed`` times; in-flight sends are bounded (65535 by default).
- ``send_oneway``: no answer, no retry.
- ``send_batch``: messages of one topic in one SEND_BATCH_MESSAGE request.

``body_transform`` is the seam for body compression (issue 7): ``(body, sysFlag) -> (body, sysFlag)``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
import time
from collections.abc import Callable, Sequence

from ferrymq.client.allocate import MessageQueue
from ferrymq.client.broker_api import SendResult, v2_ext
from ferrymq.client.compression import compress_body
from ferrymq.client.errors import BrokerUnreachableError, MessageValidationError, MQClientError
from ferrymq.client.instance import DEFAULT_TOPIC, ClientInstance
from ferrymq.client.latency_fault import MQFaultStrategy
from ferrymq.client.lifecycle import ClientMember
from ferrymq.client.send_attempts import SendAttempts, client_msg_id, now_ms
from ferrymq.message import Message, MessageConst, encode_batch, encode_properties
from ferrymq.remoting import bodies, headers

log = logging.getLogger(__name__)

TOPIC_MAX_LENGTH = 127
_TOPIC_RE = re.compile(r"^[%|a-zA-Z0-9_-]+$")
DEFAULT_MAX_MESSAGE_SIZE = 4 * 1024 * 1024

BodyTransform = Callable[[bytes, int], tuple[bytes, int]]
SendCallback = Callable[[SendResult | None, BaseException | None], None]


def check_topic(topic: str) -> None:
    """Upstream Validators.checkTopic: non-blank, ``[%|a-zA-Z0-9_-]``, at most 127 characters."""
    if not topic or not topic.strip():
        raise MessageValidationError("the specified topic is blank")
    if len(topic) > TOPIC_MAX_LENGTH:
        raise MessageValidationError(
            f"the specified topic is longer than topic max length {TOPIC_MAX_LENGTH}"
        )
    if not _TOPIC_RE.match(topic):
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


class Producer(ClientMember):
    role = "producer"

    def __init__(
        self,
        group: str,
        namesrv_addr: str | list[str] | None = None,
        *,
        instance: ClientInstance | None = None,
        send_msg_timeout: float = 3.0,
        retry_times_when_send_failed: int = 2,
        retry_times_when_send_async_failed: int = 2,
        retry_another_broker_when_not_store_ok: bool = False,
        max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
        default_topic_queue_nums: int = 4,
        send_latency_fault_enable: bool = False,
        client_async_semaphore: int = 65535,
        # bodies over 4 KiB are deflated with COMPRESSED_FLAG, as upstream; None sends them as is
        body_transform: BodyTransform | None = compress_body,
    ) -> None:
        super().__init__(group, namesrv_addr, instance)
        self.send_msg_timeout = send_msg_timeout
        self.retry_times_when_send_failed = retry_times_when_send_failed
        self.retry_times_when_send_async_failed = retry_times_when_send_async_failed
        self.retry_another_broker_when_not_store_ok = retry_another_broker_when_not_store_ok
        self.max_message_size = max_message_size
        self.default_topic_queue_nums = default_topic_queue_nums
        self.fault = MQFaultStrategy(send_latency_fault_enable=send_latency_fault_enable)
        self.body_transform = body_transform
        self._async_slots = asyncio.Semaphore(client_async_semaphore)
        self._async_tasks: set[asyncio.Task[SendResult]] = set()
        self._legal_topics: set[str] = set()
        # SEND_MESSAGE_V2 ext fields per topic and queue, built once (see _send_ext)
        self._ext_templates: dict[bool, dict[str, dict[int, dict[str, str]]]] = {
            False: {},
            True: {},
        }
        self._ext_templates_nums = default_topic_queue_nums

    # --- lifecycle ------------------------------------------------------------------------------
    def _register(self) -> None:
        self.instance.register_producer(self)

    async def _stop_parts(self) -> None:
        if self._async_tasks:
            await asyncio.wait(list(self._async_tasks), timeout=self.send_msg_timeout)

    async def _unregister(self) -> None:
        await self.instance.unregister(self.group, None)

    def producer_data(self) -> bodies.ProducerData:
        return bodies.ProducerData(group_name=self.group)

    # --- sends ----------------------------------------------------------------------------------
    async def send(self, msg: Message, timeout: float | None = None) -> SendResult:
        """Send and wait for the broker; retries on another broker as described above."""
        self._check_running()
        body, sys_flag = self._prepare(msg)
        return await self._send_with_retries(
            msg.topic,
            [msg],
            body,
            sys_flag,
            batch=False,
            attempts=1 + self.retry_times_when_send_failed,
            timeout=timeout or self.send_msg_timeout,
            retry_transport=True,
        )

    def send_async(
        self, msg: Message, callback: SendCallback | None = None, timeout: float | None = None
    ) -> asyncio.Task[SendResult]:
        """Start a send and return its task; ``callback(result, error)`` runs when it finishes."""
        self._check_running()
        body, sys_flag = self._prepare(msg)
        task = asyncio.create_task(
            self._send_async_slot(msg.topic, [msg], body, sys_flag, False, timeout)
        )
        self._track(task, callback)
        return task

    async def send_oneway(self, msg: Message) -> None:
        """Send without waiting for an answer; never retried, failures are only logged by the caller."""
        self._check_running()
        body, sys_flag = self._prepare(msg)
        info = await self.instance.publish_info(msg.topic, self.default_topic_queue_nums)
        mq = self.fault.select_queue(info.queues, info.next_index, None, now_ms())
        addr = await self.instance.find_broker_addr(mq.broker_name, msg.topic)
        header = self._header(mq, msg, sys_flag, batch=False)
        await self.instance.broker.send_oneway(addr, header, body)

    async def send_batch(self, msgs: Sequence[Message], timeout: float | None = None) -> SendResult:
        """Send messages of one topic in one request; the result's msg_id lists every UNIQ_KEY."""
        self._check_running()
        topic, body = self._batch_body(msgs)
        return await self._send_with_retries(
            topic,
            list(msgs),
            body,
            0,
            batch=True,
            attempts=1 + self.retry_times_when_send_failed,
            timeout=timeout or self.send_msg_timeout,
            retry_transport=True,
        )

    def send_batch_async(
        self,
        msgs: Sequence[Message],
        callback: SendCallback | None = None,
        timeout: float | None = None,
    ) -> asyncio.Task[SendResult]:
        self._check_running()
        topic, body = self._batch_body(msgs)
        task = asyncio.create_task(self._send_async_slot(topic, list(msgs), body, 0, True, timeout))
        self._track(task, callback)
        return task

    async def send_to_queue(
        self, msg: Message, mq: MessageQueue, timeout: float | None = None
    ) -> SendResult:
        """Send to one given queue (ordered messages, tests); no retry on another queue."""
        self._check_running()
        body, sys_flag = self._prepare(msg)
        addr = await self.instance.find_broker_addr(mq.broker_name, msg.topic)
        header = self._header(mq, msg, sys_flag, batch=False)
        result = await self.instance.broker.send_message(
            addr, mq.broker_name, header, body, timeout=timeout or self.send_msg_timeout
        )
        return dataclasses.replace(result, msg_id=msg.uniq_key or result.msg_id)

    # --- internals ------------------------------------------------------------------------------
    def _track(self, task: asyncio.Task[SendResult], callback: SendCallback | None) -> None:
        self._async_tasks.add(task)

        def done(t: asyncio.Task[SendResult]) -> None:
            self._async_tasks.discard(t)
            if t.cancelled():
                return
            exc = t.exception()
            if callback is not None:
                try:
                    callback(None if exc else t.result(), exc)
                except Exception:
                    log.exception("send callback raised")
            elif exc is not None:
                # consumed here so asyncio does not warn "exception was never retrieved"
                log.debug("async send failed: %s", exc)

        task.add_done_callback(done)

    async def _send_async_slot(
        self,
        topic: str,
        msgs: list[Message],
        body: bytes,
        sys_flag: int,
        batch: bool,
        timeout: float | None,
    ) -> SendResult:
        async with self._async_slots:
            return await self._send_with_retries(
                topic,
                msgs,
                body,
                sys_flag,
                batch=batch,
                attempts=1 + self.retry_times_when_send_async_failed,
                timeout=timeout or self.send_msg_timeout,
                retry_transport=False,
            )

    def _prepare(self, msg: Message) -> tuple[bytes, int]:
        """Validate, give the message its UNIQ_KEY, and transform its body: what every single
        send does before its first attempt."""
        check_message(msg, self.max_message_size, self._legal_topics)
        self._stamp(msg)
        return self._body(msg.body)

    def _stamp(self, msg: Message) -> None:
        if MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX not in msg.properties:
            msg.properties[MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = (
                self.instance.ids.next_id()
            )

    def _body(self, body: bytes) -> tuple[bytes, int]:
        if self.body_transform is None:
            return body, 0
        return self.body_transform(body, 0)

    def _batch_body(self, msgs: Sequence[Message]) -> tuple[str, bytes]:
        if not msgs:
            raise MessageValidationError("a batch needs at least one message")
        topic = msgs[0].topic
        check_topic(topic)  # once: every message must carry this very topic
        if topic.startswith("%RETRY%"):
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

    def _header(
        self, mq: MessageQueue, msg: Message, sys_flag: int, *, batch: bool
    ) -> headers.SendMessageRequestHeader:
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

    def _send_ext(
        self, mq: MessageQueue, msg: Message, sys_flag: int, batch: bool
    ) -> dict[str, str]:
        """``v2_ext(self._header(...))``, filled into a copy of a per-queue template: only the
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
            template = by_queue[mq.queue_id] = v2_ext(self._header(mq, blank, 0, batch=batch))
        ext = template.copy()
        ext["g"] = str(int(time.time() * 1000))
        if sys_flag:
            ext["f"] = str(sys_flag)
        if msg.flag:
            ext["h"] = str(msg.flag)
        if not batch:
            ext["i"] = encode_properties(msg.properties)
        return ext

    async def _send_with_retries(
        self,
        topic: str,
        msgs: list[Message],
        body: bytes,
        sys_flag: int,
        *,
        batch: bool,
        attempts: int,
        timeout: float,
        retry_transport: bool,
    ) -> SendResult:
        instance = self.instance
        routes = instance.routes
        tries = self._attempts(topic, attempts, timeout, retry_transport)
        msg_id = client_msg_id(msgs)
        while (remaining := tries.next()) > 0:
            # the cached route without publish_info's coroutine (its own first check)
            info = routes.publish.get(topic)
            if info is None or not info.queues:
                info = await instance.publish_info(topic, self.default_topic_queue_nums)
            mq = tries.select(info)
            try:
                addr = instance.broker_addr(mq.broker_name)
                if addr is None:
                    addr = await instance.find_broker_addr(mq.broker_name, topic)
                result = await instance.broker.send_message_ext(
                    addr,
                    mq,
                    self._send_ext(mq, msgs[0], sys_flag, batch),
                    body,
                    batch=batch,
                    timeout=remaining,
                    msg_id=msg_id,
                )
            except MQClientError as exc:
                # re-read the route on a dead broker too, even when this send is not retried:
                # after a failover the NameServer names the new master within seconds, long
                # before the 30 s poll
                if exc.refresh_route or isinstance(exc, BrokerUnreachableError):
                    try:
                        await instance.update_route(topic)
                    except MQClientError as refresh_exc:
                        log.info("route refresh of %s failed: %s", topic, refresh_exc)
                if not tries.retry_after(mq, exc):
                    raise
                continue
            if tries.accept(mq, result):
                return result
        return tries.outcome()

    def _attempts(
        self, topic: str, attempts: int, timeout: float, retry_transport: bool
    ) -> SendAttempts:
        return SendAttempts(
            topic,
            self.fault,
            attempts=attempts,
            timeout=timeout,
            retry_transport=retry_transport,
            retry_another_broker_when_not_store_ok=self.retry_another_broker_when_not_store_ok,
        )
