"""Transactional producer (upstream TransactionMQProducer + the transaction half of
DefaultMQProducerImpl).

``send_message_in_transaction(msg, arg)``:

1. the message is sent as a *half* message (``TRAN_MSG=true``, ``PGROUP=<group>``, sysFlag
   TRANSACTION_PREPARED_TYPE); the broker keeps it invisible;
2. only if the broker stored it, the local-transaction callback runs (``callback(msg, arg)``) and
   returns COMMIT_MESSAGE, ROLLBACK_MESSAGE or UNKNOW (an exception counts as UNKNOW);
3. END_TRANSACTION (oneway) tells the broker to commit or roll back; UNKNOW sends nothing final,
   and the broker asks later.

When the broker asks (CHECK_TRANSACTION_STATE, for a half message left undecided longer than its
transaction timeout), the *checker* is called with the message and its answer is sent back as
END_TRANSACTION marked ``fromTransactionCheck``. Callback and checker may be plain or ``async``
functions; plain ones run in a thread so a blocking database call does not stall the loop.
"""

from __future__ import annotations

import asyncio
import enum
import inspect
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Self

from ferrymq.client.broker_api import SendResult, SendStatus
from ferrymq.client.errors import MessageValidationError
from ferrymq.client.producer import Producer
from ferrymq.client.send_pipeline import check_message
from ferrymq.message import Message, MessageConst, MessageExt, MessageSysFlag, decode_message_id
from ferrymq.remoting.channel import Channel
from ferrymq.remoting.codes import RequestCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.errors import RemotingError
from ferrymq.remoting.headers import (
    CheckTransactionStateRequestHeader,
    EndTransactionRequestHeader,
    HeaderError,
)
from ferrymq.store.record import decode_messages

log = logging.getLogger(__name__)

__all__ = [
    "LocalTransactionState",
    "TransactionProducer",
    "TransactionSendResult",
    "commit_or_rollback_of",
]


class LocalTransactionState(enum.Enum):
    COMMIT_MESSAGE = "COMMIT_MESSAGE"
    ROLLBACK_MESSAGE = "ROLLBACK_MESSAGE"
    UNKNOW = "UNKNOW"  # upstream spelling


def commit_or_rollback_of(state: LocalTransactionState) -> int:
    """The END_TRANSACTION ``commitOrRollback`` value of a local state."""
    if state is LocalTransactionState.COMMIT_MESSAGE:
        return MessageSysFlag.TRANSACTION_COMMIT_TYPE
    if state is LocalTransactionState.ROLLBACK_MESSAGE:
        return MessageSysFlag.TRANSACTION_ROLLBACK_TYPE
    return MessageSysFlag.TRANSACTION_NOT_TYPE


StateResult = LocalTransactionState | Awaitable[LocalTransactionState]
LocalTransactionCallback = Callable[[Message, Any], StateResult]
TransactionChecker = Callable[[MessageExt], StateResult]


@dataclass(frozen=True, slots=True)
class TransactionSendResult:
    send_result: SendResult
    local_state: LocalTransactionState

    @property
    def transaction_id(self) -> str:
        return self.send_result.msg_id


async def _run(fn: Callable[..., StateResult], *args: Any) -> LocalTransactionState:
    """Call a plain (in a thread) or async callback; anything but a state counts as UNKNOW."""
    try:
        if inspect.iscoroutinefunction(fn):
            result = await fn(*args)
        else:
            result = await asyncio.to_thread(fn, *args)
            if inspect.isawaitable(result):
                result = await result
    except Exception:
        log.exception("transaction callback raised; the state is UNKNOW")
        return LocalTransactionState.UNKNOW
    if isinstance(result, LocalTransactionState):
        return result
    log.warning("transaction callback returned %r, not a LocalTransactionState: UNKNOW", result)
    return LocalTransactionState.UNKNOW


class TransactionProducer:
    def __init__(
        self,
        group: str,
        namesrv_addr: str | list[str] | None = None,
        *,
        checker: TransactionChecker,
        **producer_options: Any,
    ) -> None:
        self.producer = Producer(group, namesrv_addr, **producer_options)
        self.group = group
        self.checker = checker
        self._checks: set[asyncio.Task[None]] = set()
        self._announced: set[str] = set()
        self.checks_answered = 0

    async def start(self) -> None:
        self.producer.instance.register_handler(RequestCode.CHECK_TRANSACTION_STATE, self._on_check)
        await self.producer.start()

    async def shutdown(self) -> None:
        for task in list(self._checks):
            task.cancel()
        await asyncio.gather(*self._checks, return_exceptions=True)
        await self.producer.shutdown()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    # --- sending ----------------------------------------------------------------------------
    async def send_message_in_transaction(
        self, msg: Message, callback: LocalTransactionCallback, arg: Any = None
    ) -> TransactionSendResult:
        pipeline = self.producer.pipeline
        check_message(msg, pipeline.max_message_size)
        if msg.delay_time_level > 0:
            # upstream clears it too: a transactional message cannot also be delayed
            msg.delay_time_level = 0
        msg.properties[MessageConst.PROPERTY_TRANSACTION_PREPARED] = "true"
        msg.properties[MessageConst.PROPERTY_PRODUCER_GROUP] = self.group
        pipeline.stamp(msg)
        body, sys_flag = pipeline.transform_body(msg.body)
        prepared = sys_flag | MessageSysFlag.TRANSACTION_PREPARED_TYPE
        result = await pipeline.send(msg.topic, [msg], body, prepared, batch=False)
        if result.status is SendStatus.SEND_OK:
            msg.transaction_id = result.msg_id
            state = await _run(callback, msg, arg)
        else:
            # not durably stored: never run the local transaction on a half that may be lost
            state = LocalTransactionState.ROLLBACK_MESSAGE
        await self._end_transaction(result, state)
        return TransactionSendResult(result, state)

    async def _end_transaction(self, result: SendResult, state: LocalTransactionState) -> None:
        try:
            _host, _port, commit_log_offset = decode_message_id(result.offset_msg_id)
        except ValueError as exc:
            raise MessageValidationError(
                f"broker answered an unusable msgId {result.offset_msg_id!r}: {exc}"
            ) from exc
        header = EndTransactionRequestHeader(
            producer_group=self.group,
            tran_state_table_offset=result.queue_offset,
            commit_log_offset=commit_log_offset,
            commit_or_rollback=commit_or_rollback_of(state),
            msg_id=result.msg_id,
            from_transaction_check=False,
            transaction_id=result.msg_id,
        )
        addr = await self.producer.instance.find_broker_addr(
            result.queue.broker_name, result.queue.topic
        )
        if addr not in self._announced:
            # check-backs go to producers the broker knows: announce this group to a new broker
            # now rather than at the next 30 s heartbeat
            self._announced.add(addr)
            await self.producer.instance.send_heartbeat_to_all_brokers()
        request = RemotingCommand.request(RequestCode.END_TRANSACTION, header.to_ext(), oneway=True)
        try:
            await self.producer.instance.remoting.invoke_oneway(addr, request)
        except (RemotingError, ValueError) as exc:
            # the broker will check back: the outcome is only delayed, not lost
            log.warning("END_TRANSACTION to %s failed (%s); the broker will check back", addr, exc)

    # --- check-back -------------------------------------------------------------------------
    def _on_check(self, channel: Channel, request: RemotingCommand) -> None:
        task = asyncio.create_task(self._answer_check(channel, request))
        self._checks.add(task)
        task.add_done_callback(self._checks.discard)

    async def _answer_check(self, channel: Channel, request: RemotingCommand) -> None:
        try:
            header = CheckTransactionStateRequestHeader.from_ext(request.ext_fields)
            (msg,) = decode_messages(request.body_bytes())
        except (HeaderError, ValueError) as exc:
            log.warning("unusable CHECK_TRANSACTION_STATE from %s: %s", channel.remote_addr, exc)
            return
        group = msg.properties.get(MessageConst.PROPERTY_PRODUCER_GROUP)
        if group != self.group:
            log.warning("check for producer group %r reached group %r; ignored", group, self.group)
            return
        tx_id = header.transaction_id or msg.properties.get(
            MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX
        )
        msg.transaction_id = tx_id
        state = await _run(self.checker, msg)
        end = EndTransactionRequestHeader(
            producer_group=self.group,
            tran_state_table_offset=header.tran_state_table_offset,
            commit_log_offset=header.commit_log_offset,
            commit_or_rollback=commit_or_rollback_of(state),
            msg_id=msg.properties.get(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, ""),
            from_transaction_check=True,
            transaction_id=tx_id,
        )
        try:
            channel.invoke_oneway(
                RemotingCommand.request(RequestCode.END_TRANSACTION, end.to_ext(), oneway=True)
            )
            self.checks_answered += 1
        except RemotingError as exc:
            log.info("answer to transaction check failed: %s", exc)
