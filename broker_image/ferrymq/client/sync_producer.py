"""SyncProducer: a blocking producer for code without an event loop (upstream
``DefaultMQProducer.send``, which blocks its caller until the broker answers).

Scripts, WSGI apps and worker threads call ``send`` like they call a database driver. Each send
runs in the caller's thread over a blocking socket of its own (``remoting.blocking``): the
broker's answer wakes that thread directly, with no event loop between them. Everything else is
the asyncio :class:`Producer`'s, running on a background thread's loop (``LoopThread``): the
route cache and its 30 s refresh, NameServer lookups (TBW102 for a new topic), heartbeats to
brokers, validation, UNIQ_KEY stamping, body compression, the header templates and the
latency-fault strategy, all reached through the public ``SendPipeline`` the two producers share.
Retries follow the same ``SendAttempts`` policy.

Safe to share between threads: each thread gets its own connection to a broker, and the
latency-fault table locks itself.
"""

from __future__ import annotations

import logging
from collections.abc import Coroutine, Sequence
from types import TracebackType
from typing import Any, Self, TypeVar

from ferrymq.client.allocate import MessageQueue
from ferrymq.client.broker_api import SendResult, send_request, send_result
from ferrymq.client.errors import BrokerUnreachableError, MQClientError
from ferrymq.client.loop_thread import LoopThread
from ferrymq.client.producer import Producer
from ferrymq.client.route_cache import TopicPublishInfo
from ferrymq.client.selectors import MessageQueueSelector, select_by_hash
from ferrymq.client.send_attempts import client_msg_id
from ferrymq.message import Message
from ferrymq.remoting.blocking import BlockingPool
from ferrymq.remoting.errors import RemotingError

log = logging.getLogger(__name__)
T = TypeVar("T")
_LIFECYCLE_TIMEOUT_S = 30.0


class SyncProducer:
    def __init__(
        self,
        group: str,
        namesrv_addr: str | list[str],
        *,
        connect_timeout: float = 3.0,
        **options: Any,
    ) -> None:
        """``options``: those of :class:`Producer` (``send_msg_timeout``,
        ``retry_times_when_send_failed``, ``send_latency_fault_enable``, ...)."""
        self._producer = Producer(group, namesrv_addr, **options)
        # the steps of a send, shared with the asyncio producer (and its settings)
        self._pipeline = self._producer.pipeline
        self._loop = LoopThread(f"ferrymq-producer-{group}")
        security = self._producer.instance.security
        self._pool = BlockingPool(
            connect_timeout=connect_timeout,
            rpc_hook=security.rpc_hook(),
            ssl_context=security.ssl_context(),
        )

    @property
    def group(self) -> str:
        return self._producer.group

    @property
    def producer(self) -> Producer:
        """The asyncio producer behind this one (its settings are this one's)."""
        return self._producer

    # --- lifecycle ------------------------------------------------------------------------------
    def start(self) -> None:
        self._producer.check_created()
        self._loop.start()
        try:
            self._loop.call(self._producer.start(), _LIFECYCLE_TIMEOUT_S)
        except BaseException:
            self._loop.stop()
            raise

    def shutdown(self) -> None:
        """Unregister from the brokers, close every connection, stop the background thread."""
        if not self._loop.running:
            return
        try:
            self._loop.call(self._producer.shutdown(), _LIFECYCLE_TIMEOUT_S)
        finally:
            self._pool.close()
            self._loop.stop()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.shutdown()

    # --- sends ----------------------------------------------------------------------------------
    def send(self, msg: Message, timeout: float | None = None) -> SendResult:
        """Send and wait for the broker; a retriable failure is retried on another broker."""
        self._producer.check_running()
        body, sys_flag = self._pipeline.prepare(msg)
        return self._send_with_retries(msg.topic, [msg], body, sys_flag, False, timeout)

    def send_batch(self, msgs: Sequence[Message], timeout: float | None = None) -> SendResult:
        """Messages of one topic in one SEND_BATCH_MESSAGE; the result's msg_id lists every id."""
        self._producer.check_running()
        topic, body = self._pipeline.prepare_batch(msgs)
        return self._send_with_retries(topic, list(msgs), body, 0, True, timeout)

    def send_oneway(self, msg: Message) -> None:
        """Write the message without waiting for an answer; never retried."""
        self._producer.check_running()
        pipeline = self._pipeline
        body, sys_flag = pipeline.prepare(msg)
        timeout = pipeline.send_msg_timeout
        mq = pipeline.select_queue(self._route(msg.topic, timeout))
        addr = self._broker_addr(mq.broker_name, msg.topic, timeout)
        request = send_request(pipeline.send_ext(mq, msg, sys_flag, False), body, False)
        try:
            self._pool.invoke_oneway(addr, request)
        except RemotingError as exc:
            raise BrokerUnreachableError(addr, str(exc)) from exc

    def send_to_queue(
        self, msg: Message, mq: MessageQueue, timeout: float | None = None
    ) -> SendResult:
        """Send to one given queue (ordered messages); no retry on another queue."""
        self._producer.check_running()
        pipeline = self._pipeline
        body, sys_flag = pipeline.prepare(msg)
        timeout = timeout or pipeline.send_msg_timeout
        addr = self._broker_addr(mq.broker_name, msg.topic, timeout)
        ext = pipeline.send_ext(mq, msg, sys_flag, False)
        return self._invoke(addr, mq, ext, body, False, timeout, msg.uniq_key or None)

    def send_orderly(
        self,
        msg: Message,
        arg: object,
        selector: MessageQueueSelector[MessageQueue] = select_by_hash,
        timeout: float | None = None,
    ) -> SendResult:
        """Upstream ``send(msg, selector, arg)``: to the queue the selector picks among the
        topic's writable queues (same key, same queue, as ``selectors.send_orderly``); no retry
        on another queue, which would break the order."""
        self._producer.check_running()
        info = self._route(msg.topic, timeout or self._pipeline.send_msg_timeout)
        return self.send_to_queue(msg, selector(info.queues, msg, arg), timeout)

    # --- internals ------------------------------------------------------------------------------
    def _send_with_retries(
        self,
        topic: str,
        msgs: list[Message],
        body: bytes,
        sys_flag: int,
        batch: bool,
        timeout: float | None,
    ) -> SendResult:
        """``SendPipeline.send``'s loop with blocking I/O in the caller's thread."""
        pipeline = self._pipeline
        tries = pipeline.attempts(topic, timeout=timeout)
        instance = pipeline.instance
        msg_id = client_msg_id(msgs)
        while (remaining := tries.next()) > 0:
            mq = tries.select(self._route(topic, remaining))
            try:
                addr = instance.broker_addr(mq.broker_name)
                if addr is None:
                    addr = self._broker_addr(mq.broker_name, topic, remaining)
                ext = pipeline.send_ext(mq, msgs[0], sys_flag, batch)
                result = self._invoke(addr, mq, ext, body, batch, remaining, msg_id)
            except MQClientError as exc:
                refresh, again = pipeline.after_failure(tries, mq, exc)
                if refresh:
                    self._refresh_route(topic, remaining)
                if not again:
                    raise
                continue
            if tries.accept(mq, result):
                return result
        return tries.outcome()

    def _invoke(
        self,
        addr: str,
        mq: MessageQueue,
        ext: dict[str, str],
        body: bytes,
        batch: bool,
        timeout: float,
        msg_id: str | None,
    ) -> SendResult:
        try:
            response = self._pool.invoke(addr, send_request(ext, body, batch), timeout)
        except (RemotingError, ValueError) as exc:  # ValueError: a malformed address
            raise BrokerUnreachableError(addr, str(exc)) from exc
        return send_result(response, addr, mq, msg_id)

    def _route(self, topic: str, timeout: float) -> TopicPublishInfo:
        """The topic's cached route; only a missing one costs a trip through the background loop
        (``publish_info``: the NameServer, or TBW102 for a new topic)."""
        pipeline = self._pipeline
        info = pipeline.cached_route(topic)
        if info is not None:
            return info
        coro = pipeline.instance.publish_info(topic, pipeline.default_topic_queue_nums)
        return self._slow(coro, timeout, f"the route of {topic!r}")

    def _broker_addr(self, broker_name: str, topic: str, timeout: float) -> str:
        instance = self._pipeline.instance
        addr = instance.broker_addr(broker_name)
        if addr is not None:
            return addr
        coro = instance.find_broker_addr(broker_name, topic)
        return self._slow(coro, timeout, f"the address of broker {broker_name!r}")

    def _refresh_route(self, topic: str, timeout: float) -> None:
        try:
            self._slow(self._pipeline.instance.update_route(topic), timeout, "a route refresh")
        except MQClientError as exc:
            # the next attempt uses the route it has; its failure says more than this one
            log.info("route refresh of %s failed: %s", topic, exc)

    def _slow(self, coro: Coroutine[Any, Any, T], timeout: float, what: str) -> T:
        """A lookup on the background loop (NameServer round trips), bounded by ``timeout``."""
        try:
            return self._loop.call(coro, timeout)
        except TimeoutError:
            raise MQClientError(f"{what} was not found within {timeout:.1f}s") from None
