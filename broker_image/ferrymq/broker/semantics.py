"""Wiring of the message-semantics services into a broker (one object, built by ``app.py``).

Owns the schedule service (delay levels), the retry/DLQ send-back service, the transaction service
and the rebalance lock manager; registers their processors (CONSUMER_SEND_MSG_BACK 36,
END_TRANSACTION 37, LOCK/UNLOCK_BATCH_MQ 41/42, GET_ALL_DELAY_OFFSET 45; CHECK_CLIENT_CONFIG 46
belongs to the client-manage processor, which compiles subscriptions with :mod:`ferrymq.filter`);
and gives the send processor a store view (:class:`SendSemanticsStore`) that turns a message asking
for a delay into a schedule-topic message and a transactional one into a half message, as upstream
CommitLog/SendMessageProcessor do on put.

Settings the broker's own config does not carry (upstream BrokerConfig names
``transactionCheckInterval``, ``transactionTimeOut``, ``transactionCheckMax``,
``flushDelayOffsetInterval``) are the ``semantics`` part of the broker.conf
(:class:`ferrymq.broker.broker_conf.BrokerConf`), declared in :mod:`ferrymq.broker.semantics_config`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from ferrymq.broker.lock_manager import RebalanceLockManager
from ferrymq.broker.processors.consumer_send_back import ConsumerSendBackProcessor
from ferrymq.broker.processors.end_transaction import EndTransactionProcessor
from ferrymq.broker.processors.rebalance_lock import RebalanceLockProcessor
from ferrymq.broker.retry import RetryService
from ferrymq.broker.schedule import SCHEDULE_TOPIC, ScheduleMessageService, to_schedule_topic
from ferrymq.broker.semantics_config import SemanticsConfig
from ferrymq.broker.store_port import MessagePuts, MessageStorePort
from ferrymq.broker.timer.timer_message import TIMER_TOPIC, TimerRewrite
from ferrymq.broker.transaction import (
    HALF_TOPIC,
    OP_HALF_TOPIC,
    TransactionConfig,
    TransactionService,
    is_transaction_prepared,
    to_half_message,
)
from ferrymq.message import MessageInner
from ferrymq.remoting.channel import Channel
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.server import RemotingServer
from ferrymq.store.results import PutMessageResult, PutMessageStatus

log = logging.getLogger(__name__)

__all__ = [
    "NOT_ALLOWED_SEND_TOPICS",
    "SemanticsServices",
    "SendSemanticsStore",
    "transaction_config",
]


def transaction_config(config: SemanticsConfig) -> TransactionConfig:
    """The transaction service's settings from the broker.conf part (ms -> s where it wants s)."""
    return TransactionConfig(
        check_interval_s=config.transaction_check_interval / 1000,
        transaction_timeout_ms=config.transaction_time_out,
        transaction_check_max=config.transaction_check_max,
    )


NOT_ALLOWED_SEND_TOPICS = frozenset({SCHEDULE_TOPIC, HALF_TOPIC, OP_HALF_TOPIC})


class SendSemanticsStore:
    """The store as the send processor sees it (:class:`MessagePuts`): delay and transaction
    rewrites happen on put, then the wrapped store's put runs. The send processor needs nothing
    else, so nothing else is offered; batches are never delayed or transactional (producers refuse
    that), so ``put_messages`` only checks the topic.
    """

    def __init__(
        self,
        store: MessagePuts,
        *,
        max_delay_level: Callable[[], int],
        reject_transaction_message: Callable[[], bool] = lambda: False,
    ) -> None:
        self._store = store
        self._max_delay_level = max_delay_level
        self._reject_transaction_message = reject_transaction_message
        self._put_nowait = store.put_message_nowait  # bound once: every send takes this path
        # timer messages (RocketMQ 5, ferrymq.broker.timer): set by the broker's wiring
        self.timer: TimerRewrite | None = None
        self._recall_handle: str | None = None  # of the timer message being put (one loop)

    @staticmethod
    def _forbidden(topic: str) -> PutMessageResult | None:
        if topic not in NOT_ALLOWED_SEND_TOPICS:
            return None
        # upstream TopicValidator.isNotAllowedSendTopic: a client writing here could make the
        # broker re-publish into any topic (REAL_TOPIC) on its own authority
        return PutMessageResult(
            PutMessageStatus.MESSAGE_ILLEGAL,
            remark=f"sending message to topic[{topic}] is forbidden",
        )

    async def put_messages(self, batch: MessageInner) -> PutMessageResult:
        refused = self._forbidden(batch.topic)
        if refused is not None:
            return refused
        return await self._store.put_messages(batch)

    async def put_message(self, msg: MessageInner) -> PutMessageResult:
        stored = self._as_stored(msg)
        if isinstance(stored, PutMessageResult):
            return stored
        if self.timer is not None and stored.topic == TIMER_TOPIC:
            return await self._timer_put(stored, self._recall_handle)
        return await self._store.put_message(stored)

    async def _timer_put(self, stored: MessageInner, handle: str | None) -> PutMessageResult:
        """A timer message's put, with its recall handle on the result."""
        result = await self._store.put_message(stored)
        if result.is_ok and handle is not None:
            result.recall_handle = handle
        return result

    def put_message_nowait(
        self, msg: MessageInner
    ) -> PutMessageResult | Awaitable[PutMessageResult]:
        """``put_message`` that returns the result itself when the store needs no wait (the
        wrapped store's ``put_message_nowait``), else an awaitable of it."""
        stored = self._as_stored(msg)
        if isinstance(stored, PutMessageResult):
            return stored
        if self.timer is not None and stored.topic == TIMER_TOPIC:
            return self._timer_put(stored, self._recall_handle)
        return self._put_nowait(stored)

    def _as_stored(self, msg: MessageInner) -> MessageInner | PutMessageResult:
        """The message as it is stored (a half message, a schedule-topic message, or itself), or
        why it is refused."""
        refused = self._forbidden(msg.topic)
        if refused is not None:
            return refused
        if is_transaction_prepared(msg.properties):
            if self._reject_transaction_message():
                return PutMessageResult(
                    PutMessageStatus.MESSAGE_ILLEGAL,
                    remark="this broker rejects transaction messages (rejectTransactionMessage)",
                )
            return to_half_message(msg)
        if self.timer is not None:
            rewritten = self.timer.rewrite(msg, int(time.time() * 1000))
            if isinstance(rewritten, PutMessageResult):
                return rewritten
            msg, self._recall_handle = rewritten
        return to_schedule_topic(msg, self._max_delay_level())


class SemanticsServices:
    def __init__(
        self,
        *,
        store: MessageStorePort,
        store_host: tuple[str, int],
        config_dir: Path,
        delay_levels_ms: list[int],
        find_group: Callable[[str], Any],
        create_topic_in_send_back: Callable[[str, int, int], Any],
        producer_channels: Callable[[str], list[Any]],
        broker_writable: Callable[[], bool],
        enable_property_filter: Callable[[], bool],
        reject_transaction_message: Callable[[], bool] = lambda: False,
        is_slave: Callable[[], bool] = lambda: False,
        config: SemanticsConfig | None = None,
    ) -> None:
        self.config = config or SemanticsConfig()
        self.store = store
        self.is_slave = is_slave
        self.enable_property_filter = enable_property_filter
        self.schedule = ScheduleMessageService(
            store,
            delay_levels_ms,
            config_dir / "delayOffset.json",
            flush_interval_s=self.config.flush_delay_offset_interval / 1000,
        )
        max_level = self.schedule.max_level
        self.retry = RetryService(
            store,
            find_group=find_group,
            create_topic=lambda topic, nums, perm: (
                create_topic_in_send_back(topic, nums, perm) is not None
            ),
            max_delay_level=lambda: max_level,
            broker_writable=broker_writable,
        )
        self.transactions = TransactionService(
            store,
            store_host=store_host,
            producer_channels=lambda group: [info.channel for info in producer_channels(group)],
            checkpoint_path=config_dir / "transactionCheckpoint.json",
            max_delay_level=lambda: max_level,
            config=transaction_config(self.config),
        )
        self.locks = RebalanceLockManager()
        self.send_store = SendSemanticsStore(
            store,
            max_delay_level=lambda: max_level,
            reject_transaction_message=reject_transaction_message,
        )
        self._started = False

    def register(self, server: RemotingServer) -> None:
        ConsumerSendBackProcessor(self.retry).register(server)
        EndTransactionProcessor(self.transactions, is_slave=self.is_slave).register(server)
        RebalanceLockProcessor(self.locks).register(server)
        server.register(RequestCode.GET_ALL_DELAY_OFFSET, self._get_all_delay_offset)

    async def start(self) -> None:
        """Master: deliver delayed messages and check transactions. Slave: keep state only."""
        if self.is_slave():
            await self.transactions.start(run_checks=False)
        else:
            await self.schedule.start()
            await self.transactions.start(run_checks=True)
        self._started = True

    async def shutdown(self) -> None:
        if not self._started:
            return
        self._started = False
        if not self.is_slave():
            await self.schedule.shutdown()
        await self.transactions.shutdown()

    def on_channel_closed(self, client_id: str) -> None:
        """A consumer connection is gone: its queue locks go with it (others may lock now)."""
        self.locks.unlock_client(client_id)

    # --- small processors -------------------------------------------------------------------
    def _get_all_delay_offset(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        return request.response(ResponseCode.SUCCESS, body=self.schedule.encode_offsets())
