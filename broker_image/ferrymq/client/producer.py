"""Producer: sync, async, oneway and batch sends (upstream DefaultMQProducer / DefaultMQProducerImpl).

The send pipeline (seeds-digest PR2-PR18; its steps are ``send_pipeline.SendPipeline``'s, shared
with ``SyncProducer`` and ``TransactionProducer``): validate, find the route (TBW102 for a new topic),
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
from collections.abc import Callable, Sequence
from typing import Generic, Self, TypeVar, Unpack, cast, overload

from ferrymq.client.allocate import MessageQueue
from ferrymq.client.broker_api import SendResult
from ferrymq.client.credentials import ClientSecurity
from ferrymq.client.instance import ClientInstance
from ferrymq.client.latency_fault import MQFaultStrategy
from ferrymq.client.lifecycle import ClientMember
from ferrymq.client.send_pipeline import (
    DEFAULT_MAX_MESSAGE_SIZE,
    BodyTransform,
    SendOptions,
    SendPipeline,
    check_message,
    check_topic,
)
from ferrymq.message import Message
from ferrymq.remoting import bodies

__all__ = [
    "DEFAULT_MAX_MESSAGE_SIZE",
    "BodyTransform",
    "Producer",
    "SendCallback",
    "check_message",  # re-exported: validation lives in send_pipeline
    "check_topic",
]

log = logging.getLogger(__name__)
T = TypeVar("T")

SendCallback = Callable[[SendResult | None, BaseException | None], None]


class _PipelineSetting(Generic[T]):
    """A producer attribute kept by its :class:`SendPipeline` (``producer.send_msg_timeout`` is
    ``producer.pipeline.send_msg_timeout``), so the producer and the pipeline never disagree."""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    @overload
    def __get__(self, obj: None, owner: type) -> Self: ...
    @overload
    def __get__(self, obj: Producer, owner: type) -> T: ...
    def __get__(self, obj: Producer | None, owner: type) -> T | Self:
        if obj is None:
            return self
        return cast(T, getattr(obj.pipeline, self._name))

    def __set__(self, obj: Producer, value: T) -> None:
        setattr(obj.pipeline, self._name, value)


class Producer(ClientMember):
    role = "producer"

    # the send settings live in the pipeline shared with SyncProducer and TransactionProducer
    send_msg_timeout = _PipelineSetting[float]()
    retry_times_when_send_failed = _PipelineSetting[int]()
    retry_times_when_send_async_failed = _PipelineSetting[int]()
    retry_another_broker_when_not_store_ok = _PipelineSetting[bool]()
    max_message_size = _PipelineSetting[int]()
    default_topic_queue_nums = _PipelineSetting[int]()
    body_transform = _PipelineSetting[BodyTransform | None]()
    fault = _PipelineSetting[MQFaultStrategy]()

    def __init__(
        self,
        group: str,
        namesrv_addr: str | list[str] | None = None,
        *,
        instance: ClientInstance | None = None,
        security: ClientSecurity | None = None,
        client_async_semaphore: int = 65535,
        **send_options: Unpack[SendOptions],
    ) -> None:
        """``send_options``: the send settings (``send_msg_timeout``, ``retry_times_when_send_failed``,
        ``send_latency_fault_enable``, ``body_transform``, ...; see :class:`SendPipeline` for their
        defaults); they stay readable and settable as attributes of the producer."""
        unknown = send_options.keys() - SendOptions.__optional_keys__
        if unknown:
            raise TypeError(
                f"Producer got unknown option(s) {', '.join(sorted(unknown))}; the send options "
                f"are {', '.join(sorted(SendOptions.__optional_keys__))}"
            )
        super().__init__(group, namesrv_addr, instance, security)
        self.pipeline = SendPipeline(group, self.instance, **send_options)
        self._async_slots = asyncio.Semaphore(client_async_semaphore)
        self._async_tasks: set[asyncio.Task[SendResult]] = set()

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
        self.check_running()
        body, sys_flag = self.pipeline.prepare(msg)
        return await self.pipeline.send(
            msg.topic, [msg], body, sys_flag, batch=False, timeout=timeout
        )

    def send_async(
        self, msg: Message, callback: SendCallback | None = None, timeout: float | None = None
    ) -> asyncio.Task[SendResult]:
        """Start a send and return its task; ``callback(result, error)`` runs when it finishes."""
        self.check_running()
        body, sys_flag = self.pipeline.prepare(msg)
        task = asyncio.create_task(
            self._send_async_slot(msg.topic, [msg], body, sys_flag, False, timeout)
        )
        self._track(task, callback)
        return task

    async def send_oneway(self, msg: Message) -> None:
        """Send without waiting for an answer; never retried, failures are only logged by the caller."""
        self.check_running()
        pipeline = self.pipeline
        body, sys_flag = pipeline.prepare(msg)
        info = await self.instance.publish_info(msg.topic, pipeline.default_topic_queue_nums)
        mq = pipeline.select_queue(info)
        addr = await self.instance.find_broker_addr(mq.broker_name, msg.topic)
        header = pipeline.header(mq, msg, sys_flag, batch=False)
        await self.instance.broker.send_oneway(addr, header, body)

    async def send_batch(self, msgs: Sequence[Message], timeout: float | None = None) -> SendResult:
        """Send messages of one topic in one request; the result's msg_id lists every UNIQ_KEY."""
        self.check_running()
        topic, body = self.pipeline.prepare_batch(msgs)
        return await self.pipeline.send(topic, list(msgs), body, 0, batch=True, timeout=timeout)

    def send_batch_async(
        self,
        msgs: Sequence[Message],
        callback: SendCallback | None = None,
        timeout: float | None = None,
    ) -> asyncio.Task[SendResult]:
        self.check_running()
        topic, body = self.pipeline.prepare_batch(msgs)
        task = asyncio.create_task(self._send_async_slot(topic, list(msgs), body, 0, True, timeout))
        self._track(task, callback)
        return task

    async def send_to_queue(
        self, msg: Message, mq: MessageQueue, timeout: float | None = None
    ) -> SendResult:
        """Send to one given queue (ordered messages, tests); no retry on another queue."""
        self.check_running()
        pipeline = self.pipeline
        body, sys_flag = pipeline.prepare(msg)
        addr = await self.instance.find_broker_addr(mq.broker_name, msg.topic)
        header = pipeline.header(mq, msg, sys_flag, batch=False)
        result = await self.instance.broker.send_message(
            addr, mq.broker_name, header, body, timeout=timeout or pipeline.send_msg_timeout
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
            return await self.pipeline.send(
                topic, msgs, body, sys_flag, batch=batch, timeout=timeout, async_send=True
            )
