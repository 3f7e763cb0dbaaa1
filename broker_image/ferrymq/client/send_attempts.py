"""The attempts of one send (upstream DefaultMQProducerImpl.sendDefaultImpl's retry loop).

Which queue each attempt takes (latency-aware, avoiding the broker that just failed), the
latency-fault bookkeeping, which failures end the send and which are retried, and the outcome
when every attempt is spent. The I/O of an attempt is the caller's: the asyncio ``Producer``
awaits it, ``SyncProducer`` blocks on it; both drive the same loop::

    attempts = SendAttempts(...)
    while (remaining := attempts.next()) > 0:
        mq = attempts.select(route)
        try:
            result = <send to mq within remaining>
        except MQClientError as exc:
            if not attempts.retry_after(mq, exc):
                raise
            <refresh the route if exc.refresh_route>
            continue
        if attempts.accept(mq, result):
            return result
    return attempts.outcome()
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from ferrymq.client.allocate import MessageQueue
from ferrymq.client.broker_api import SendResult, SendStatus
from ferrymq.client.errors import MQClientError, MQResponseError
from ferrymq.client.latency_fault import MQFaultStrategy
from ferrymq.client.route_cache import TopicPublishInfo
from ferrymq.message import Message

log = logging.getLogger(__name__)


def client_msg_id(msgs: Sequence[Message]) -> str:
    """upstream SendResult.msgId: the client's UNIQ_KEY; for a batch, every one joined by commas."""
    if len(msgs) == 1:
        return msgs[0].uniq_key or ""
    return ",".join(m.uniq_key or "" for m in msgs)


def now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class SendAttempts:
    __slots__ = (
        "_attempts",
        "_begin",
        "_done",
        "_fault",
        "_last_broker",
        "_last_error",
        "_last_result",
        "_retry_not_ok",
        "_retry_transport",
        "_started",
        "_timeout",
        "topic",
    )

    def __init__(
        self,
        topic: str,
        fault: MQFaultStrategy,
        *,
        attempts: int,
        timeout: float,
        retry_transport: bool,
        retry_another_broker_when_not_store_ok: bool,
    ) -> None:
        self.topic = topic
        self._fault = fault
        self._attempts = attempts
        self._timeout = timeout
        # as upstream, an async send retries only when the broker answered
        self._retry_transport = retry_transport
        self._retry_not_ok = retry_another_broker_when_not_store_ok
        self._begin = time.monotonic()
        self._done = 0
        self._started = 0
        self._last_broker: str | None = None
        self._last_error: BaseException | None = None
        self._last_result: SendResult | None = None

    def next(self) -> float:
        """Seconds left for the next attempt; 0 when the attempts or the time are spent."""
        if self._done >= self._attempts:
            return 0.0
        self._done += 1
        return max(0.0, self._timeout - (time.monotonic() - self._begin))

    def select(self, info: TopicPublishInfo) -> MessageQueue:
        fault = self._fault
        # the clock is read only for the latency-fault bookkeeping
        self._started = started = now_ms() if fault.send_latency_fault_enable else 0
        mq = fault.select_queue(info.queues, info.next_index, self._last_broker, started)
        self._last_broker = mq.broker_name
        return mq

    def retry_after(self, mq: MessageQueue, exc: MQClientError) -> bool:
        """Record a failed attempt; False when the send must end with ``exc``."""
        fault = self._fault
        if fault.send_latency_fault_enable:
            ended = now_ms()
            fault.update_fault_item(mq.broker_name, ended - self._started, True, ended)
        self._last_error = exc
        answered = isinstance(exc, MQResponseError)
        if not exc.retriable or (not answered and not self._retry_transport):
            return False
        log.info(
            "send to %s failed (attempt %d/%d): %s",
            mq.broker_name,
            self._done,
            self._attempts,
            exc,
        )
        return True

    def accept(self, mq: MessageQueue, result: SendResult) -> bool:
        """Record an answered attempt; True when ``result`` ends the send."""
        fault = self._fault
        if fault.send_latency_fault_enable:
            ended = now_ms()
            fault.update_fault_item(mq.broker_name, ended - self._started, False, ended)
        if self._retry_not_ok and result.status is not SendStatus.SEND_OK:
            self._last_result = result
            return False
        return True

    def outcome(self) -> SendResult:
        """After the last attempt: the last stored-but-not-OK result, or the error."""
        if self._last_result is not None:
            return self._last_result
        raise MQClientError(
            f"send to topic {self.topic!r} failed after {self._done} attempt(s) in "
            f"{time.monotonic() - self._begin:.2f}s: {self._last_error or 'send timeout'}"
        ) from self._last_error
