"""Orderly consumption (upstream ConsumeMessageOrderlyService, the orderly parts of RebalanceImpl
and MessageListenerOrderly).

Per-queue order needs three guarantees, each a piece here:

- **one consumer per queue across the group** — :class:`QueueLocker` takes a broker-side lock
  (LOCK_BATCH_MQ) on a queue *before* its pull starts, renews every owned queue every 20 s (the
  broker lets a lock expire after 60 s) and releases it (UNLOCK_BATCH_MQ) when the queue is given
  away. :class:`OrderlyRebalance` only starts queues whose lock it got; the others are retried on
  the next rebalance, so during a rebalance the new owner waits until the old one let go;
- **one worker per queue in this process** — :class:`OrderlyConsumeService` runs exactly one task
  per queue, taking messages in offset order, and consumes only while the lock is held (the client
  treats a lock older than 30 s as lost, as upstream);
- **no skipping** — SUSPEND_CURRENT_QUEUE_A_MOMENT (or an exception) keeps the same messages at the
  head of the queue and retries them after ``suspend_current_queue_time_millis`` (1 s); a message
  that failed ``max_reconsume_times`` times goes to the DLQ (send-back with delay level -1) so one
  poison message cannot block the queue forever; if that send-back fails the queue stays suspended.

Offsets are committed after each successful batch (the ProcessQueue's lowest in-flight offset).
:class:`OrderlyPushConsumer` is a :class:`PushConsumer` that swaps in these pieces.
"""

from __future__ import annotations

import asyncio
import enum
import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from ferrymq.client.allocate import MessageQueue
from ferrymq.client.consume_service import restore_retry_topic
from ferrymq.client.errors import MQClientError
from ferrymq.client.instance import ClientInstance
from ferrymq.client.offset_store import OffsetStore
from ferrymq.client.process_queue import ProcessQueue
from ferrymq.client.push_consumer import PushConsumer
from ferrymq.client.rebalance import Rebalance
from ferrymq.message import MessageExt
from ferrymq.remoting import bodies
from ferrymq.remoting.codes import RequestCode
from ferrymq.tasks import Periodic, cancel_all_and_wait

log = logging.getLogger(__name__)

__all__ = [
    "ConsumeOrderlyContext",
    "ConsumeOrderlyStatus",
    "OrderlyConsumeService",
    "OrderlyPushConsumer",
    "OrderlyRebalance",
    "QueueLocker",
]

REBALANCE_LOCK_INTERVAL_S = 20.0
# the client trusts a lock for 30 s after it was granted (broker expiry is 60 s)
REBALANCE_LOCK_MAX_LIVE_TIME_S = 30.0
SUSPEND_CURRENT_QUEUE_TIME_MILLIS = 1000
QUIESCE_TIMEOUT_S = 1.0
_WAIT_FOR_LOCK_S = 0.1


class ConsumeOrderlyStatus(enum.Enum):
    SUCCESS = "SUCCESS"
    SUSPEND_CURRENT_QUEUE_A_MOMENT = "SUSPEND_CURRENT_QUEUE_A_MOMENT"


@dataclass(slots=True)
class ConsumeOrderlyContext:
    message_queue: MessageQueue
    # -1: the consumer's default (1 s)
    suspend_current_queue_time_millis: int = -1


OrderlyResult = ConsumeOrderlyStatus | bool | None
OrderlyListener = Callable[
    [list[MessageExt], ConsumeOrderlyContext], OrderlyResult | Awaitable[OrderlyResult]
]
SendBack = Callable[[MessageExt, MessageQueue, int], Awaitable[None]]


def orderly_status(result: object) -> ConsumeOrderlyStatus:
    """None/True/SUCCESS mean success; anything else suspends the queue a moment."""
    if result is None or result is True or result is ConsumeOrderlyStatus.SUCCESS:
        return ConsumeOrderlyStatus.SUCCESS
    return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT


class QueueLocker:
    """Broker-side queue locks of one orderly consumer (LOCK_BATCH_MQ / UNLOCK_BATCH_MQ)."""

    def __init__(
        self,
        instance: ClientInstance,
        group: str,
        *,
        clock: Callable[[], float] = time.monotonic,
        timeout: float = 3.0,
    ) -> None:
        self.instance = instance
        self.group = group
        self._clock = clock
        self.timeout = timeout
        self.locked_at: dict[MessageQueue, float] = {}

    def is_locked(self, mq: MessageQueue) -> bool:
        at = self.locked_at.get(mq)
        return at is not None and self._clock() - at <= REBALANCE_LOCK_MAX_LIVE_TIME_S

    async def lock(self, mqs: list[MessageQueue]) -> set[MessageQueue]:
        """Lock (or renew) ``mqs``, one request per broker; returns those now held."""
        held: set[MessageQueue] = set()
        for broker_name, queues in _by_broker(mqs).items():
            body = bodies.LockBatchRequestBody(
                consumer_group=self.group,
                client_id=self.instance.client_id,
                mq_set=_wire_queues(queues),
            )
            try:
                addr = await self.instance.find_broker_addr(broker_name, queues[0].topic)
                answer = await self.instance.broker.call_body(
                    bodies.LockBatchResponseBody,
                    addr,
                    RequestCode.LOCK_BATCH_MQ,
                    body=body.encode(),
                    timeout=self.timeout,
                )
            except MQClientError as exc:
                log.info("%s: locking queues on %s failed: %s", self.group, broker_name, exc)
                continue
            now = self._clock()
            granted = {
                MessageQueue(q.topic, q.broker_name, q.queue_id) for q in answer.lock_ok_mq_set
            }
            for mq in queues:
                if mq in granted:
                    self.locked_at[mq] = now
                    held.add(mq)
                else:
                    self.locked_at.pop(mq, None)
        return held

    async def unlock(self, mq: MessageQueue) -> None:
        await self.unlock_all([mq])

    async def unlock_all(self, mqs: list[MessageQueue]) -> None:
        """Release ``mqs`` (one request per broker); a failure only delays the next owner until
        the broker lets the lock expire (60 s)."""
        for mq in mqs:
            self.locked_at.pop(mq, None)
        for broker_name, queues in _by_broker(mqs).items():
            body = bodies.UnlockBatchRequestBody(
                consumer_group=self.group,
                client_id=self.instance.client_id,
                mq_set=_wire_queues(queues),
            )
            try:
                addr = await self.instance.find_broker_addr(broker_name, queues[0].topic)
                await self.instance.broker.call(
                    addr, RequestCode.UNLOCK_BATCH_MQ, body=body.encode(), timeout=self.timeout
                )
            except MQClientError as exc:
                log.info("%s: unlocking queues on %s failed: %s", self.group, broker_name, exc)


def _by_broker(mqs: list[MessageQueue]) -> dict[str, list[MessageQueue]]:
    by_broker: dict[str, list[MessageQueue]] = {}
    for mq in mqs:
        by_broker.setdefault(mq.broker_name, []).append(mq)
    return by_broker


def _wire_queues(queues: list[MessageQueue]) -> list[bodies.MessageQueue]:
    return [
        bodies.MessageQueue(topic=q.topic, broker_name=q.broker_name, queue_id=q.queue_id)
        for q in queues
    ]


class OrderlyRebalance(Rebalance):
    """A rebalance that starts a queue only once its broker lock is held (upstream
    ``updateProcessQueueTableInRebalance`` with ``isOrder``)."""

    locker: QueueLocker
    service: OrderlyConsumeService | None = None

    async def apply(self, topic: str, owned: set[MessageQueue]) -> bool:
        new = sorted(owned - set(self.process_queues))
        locked = await self.locker.lock(new) if new else set()
        for mq in new:
            if mq not in locked:
                log.info(
                    "%s: %s is still locked by another consumer; retry next rebalance",
                    self.config.group,
                    mq,
                )
        keep = {mq for mq in owned if mq in self.process_queues or mq in locked}
        return await super().apply(topic, keep)

    async def _remove(self, mq: MessageQueue) -> bool:
        if self.service is not None:
            # let the batch in the listener finish so its progress is handed over, not redone
            await self.service.quiesce(mq)
        removed = await super()._remove(mq)
        if removed:
            await self.locker.unlock(mq)
        return removed


@dataclass
class OrderlyStats:
    ok: int = 0
    suspended: int = 0
    dead_lettered: int = 0
    quiesce_timeouts: int = 0  # hand-overs that did not wait for the batch in the listener


@dataclass(eq=False)
class _QueueWorker:
    mq: MessageQueue
    pq: ProcessQueue
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    idle: asyncio.Event = field(default_factory=asyncio.Event)
    releasing: bool = False
    task: asyncio.Task[None] | None = None


class OrderlyConsumeService:
    """One worker per queue, messages in offset order, consumed only under the queue lock."""

    def __init__(
        self,
        listener: OrderlyListener,
        group: str,
        offset_store: OffsetStore,
        send_back: SendBack | None,
        locker: QueueLocker | None,
        *,
        consume_batch_max_size: int = 1,
        max_reconsume_times: int = 2**31 - 1,
        suspend_millis: int = SUSPEND_CURRENT_QUEUE_TIME_MILLIS,
        run_sync_in_thread: bool = True,
    ) -> None:
        self.listener = listener
        self.group = group
        self.offset_store = offset_store
        self.send_back = send_back
        self.locker = locker  # None: broadcasting, no broker locks needed
        self.batch_size = max(1, consume_batch_max_size)
        self.max_reconsume_times = max_reconsume_times
        self.suspend_millis = suspend_millis
        self.is_async = inspect.iscoroutinefunction(listener)
        self.run_sync_in_thread = run_sync_in_thread and not self.is_async
        self.stats = OrderlyStats()
        self._workers: dict[MessageQueue, _QueueWorker] = {}
        # upstream's rebalance lock interval: queue locks expire on the broker unless renewed
        self._renewer = Periodic(
            "orderly-lock-renewal", self._renew_locks, REBALANCE_LOCK_INTERVAL_S
        )
        self.owned: Callable[[], list[MessageQueue]] = lambda: []

    def start(self) -> None:
        if self.locker is not None:
            self._renewer.start()

    async def shutdown(self, timeout: float = 5.0) -> None:
        await self._renewer.stop()
        await cancel_all_and_wait(w.task for w in self._workers.values() if w.task is not None)
        self._workers.clear()

    @property
    def backlog(self) -> int:
        return sum(w.pq.msg_count for w in self._workers.values())

    def submit(self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue) -> None:
        """Called by the pull loop after it cached ``msgs`` in ``pq``: wake the queue's worker."""
        worker = self._workers.get(mq)
        if worker is None or worker.pq is not pq or worker.task is None or worker.task.done():
            worker = _QueueWorker(mq, pq)
            worker.task = asyncio.create_task(self._run(worker), name=f"orderly {mq}")
            self._workers[mq] = worker
        worker.wake.set()

    async def quiesce(self, mq: MessageQueue, timeout: float = QUIESCE_TIMEOUT_S) -> bool:
        """Stop taking new batches of ``mq`` and wait (bounded) for the current one to finish;
        False when the listener is still busy after ``timeout`` (upstream waits 1 s too)."""
        w = self._workers.get(mq)
        if w is None:
            return True
        w.releasing = True
        w.wake.set()
        try:
            await asyncio.wait_for(w.idle.wait(), timeout)
        except TimeoutError:
            self.stats.quiesce_timeouts += 1
            log.info(
                "%s: %s still consuming after %.1fs; handing it over anyway",
                self.group,
                mq,
                timeout,
            )
            return False
        return True

    async def _renew_locks(self) -> None:
        assert self.locker is not None
        owned = self.owned()
        if owned:
            await self.locker.lock(owned)

    async def _call(
        self, msgs: list[MessageExt], ctx: ConsumeOrderlyContext
    ) -> ConsumeOrderlyStatus:
        try:
            if self.is_async:
                result: Any = await self.listener(msgs, ctx)  # type: ignore[misc]
            elif self.run_sync_in_thread:
                result = await asyncio.to_thread(self.listener, msgs, ctx)
            else:
                result = self.listener(msgs, ctx)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception(
                "orderly listener of %s raised; the queue is suspended a moment", self.group
            )
            return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
        return orderly_status(result)

    async def _run(self, w: _QueueWorker) -> None:
        try:
            while not w.pq.dropped:
                if w.releasing or (self.locker is not None and not self.locker.is_locked(w.mq)):
                    w.idle.set()
                    await asyncio.sleep(_WAIT_FOR_LOCK_S)
                    continue
                # the oldest batch_size only (not a copy of the whole cache per batch)
                msgs = list(islice(w.pq.messages.values(), self.batch_size))
                if not msgs:
                    w.idle.set()
                    w.wake.clear()
                    await w.wake.wait()
                    continue
                w.idle.clear()
                await self._consume(w, msgs)
        finally:
            if self._workers.get(w.mq) is w:
                del self._workers[w.mq]

    async def _consume(self, w: _QueueWorker, msgs: list[MessageExt]) -> None:
        for msg in msgs:
            restore_retry_topic(msg, self.group)
        ctx = ConsumeOrderlyContext(w.mq)
        status = await self._call(msgs, ctx)
        if w.pq.dropped:
            return  # given away meanwhile: the new owner consumes them again, in order
        if status is ConsumeOrderlyStatus.SUCCESS:
            self._commit(w, msgs)
            self.stats.ok += len(msgs)
            return
        self.stats.suspended += 1
        if all(
            m.reconsume_times >= self.max_reconsume_times for m in msgs
        ) and await self._dead_letter(w, msgs):
            return
        for m in msgs:
            m.reconsume_times += 1
        pause = ctx.suspend_current_queue_time_millis
        await asyncio.sleep((pause if pause >= 0 else self.suspend_millis) / 1000)

    async def _dead_letter(self, w: _QueueWorker, msgs: list[MessageExt]) -> bool:
        if self.send_back is None:
            return False
        try:
            for m in msgs:
                await self.send_back(m, w.mq, -1)
        except MQClientError as exc:
            log.warning(
                "%s: moving poison messages of %s to the DLQ failed: %s", self.group, w.mq, exc
            )
            return False
        self.stats.dead_lettered += len(msgs)
        self._commit(w, msgs)
        return True

    def _commit(self, w: _QueueWorker, msgs: list[MessageExt]) -> None:
        offset = w.pq.remove_messages(msgs)
        if offset >= 0 and not w.pq.dropped:
            self.offset_store.update_offset(w.mq, offset, increase_only=True)


class OrderlyPushConsumer(PushConsumer):
    """A push consumer whose listener sees each queue's messages one batch at a time, in order.

    ``register_listener(fn)`` takes ``fn(msgs, ConsumeOrderlyContext)`` returning
    ``ConsumeOrderlyStatus`` (True/None also mean SUCCESS, False means suspend).
    """

    def __init__(
        self, group: str, namesrv_addr: str | list[str] | None = None, **options: Any
    ) -> None:
        options.setdefault("max_reconsume_times", 2**31 - 1)  # upstream orderly default: unbounded
        self.suspend_current_queue_time_millis = int(
            options.pop("suspend_current_queue_time_millis", SUSPEND_CURRENT_QUEUE_TIME_MILLIS)
        )
        super().__init__(group, namesrv_addr, **options)
        self.locker: QueueLocker | None = None
        self.orderly_service: OrderlyConsumeService | None = None

    consume_orderly = True

    def queue_lock_state(self, mq: MessageQueue) -> tuple[bool, float]:
        if self.locker is None:
            return False, 0.0
        return self.locker.is_locked(mq), self.locker.locked_at.get(mq, 0.0)

    def customize_services(self) -> None:
        """Swap the concurrent consume service and rebalance for the orderly ones (called by
        ``PushConsumer.start`` once its parts exist and before anything runs)."""
        assert self.rebalance is not None and self.pull_service is not None
        assert self.offset_store is not None and self.listener is not None
        self.locker = QueueLocker(self.instance, self.group) if self.clustering else None
        self.orderly_service = OrderlyConsumeService(
            self.listener,  # type: ignore[arg-type]
            self.group,
            self.offset_store,
            self._send_back if self.clustering else None,
            self.locker,
            consume_batch_max_size=self.consume_batch_max_size,
            max_reconsume_times=self.max_reconsume_times,
            suspend_millis=self.suspend_current_queue_time_millis,
            run_sync_in_thread=self.run_sync_listener_in_thread,
        )
        old = self.rebalance
        if self.locker is not None:
            rebalance = OrderlyRebalance(
                old.config, old.host, old.offset_store, old.on_add, old.on_remove
            )
            rebalance.locker = self.locker
            rebalance.service = self.orderly_service
            rebalance.topics = old.topics
            self.rebalance = rebalance
        self.orderly_service.owned = self.owned_queues
        self.pull_service.deliver = self.orderly_service.submit
        self.consume_service = self.orderly_service  # type: ignore[assignment]

    async def shutdown(self) -> None:
        """Stop consuming, save progress, then release the broker locks before leaving the group
        (upstream unlockAll at shutdown), so the next owners need not wait for lock expiry."""
        running = self._state == "running"
        if running and self.locker is not None and self.pull_service is not None:
            owned = self.owned_queues()
            await self.pull_service.shutdown()
            if self.orderly_service is not None:
                await self.orderly_service.shutdown()
            await self.persist_offsets()
            await self.locker.unlock_all(owned)
        await super().shutdown()

    @property
    def stats(self) -> dict[str, int]:
        svc = self.orderly_service
        return {
            "pulled": self.pull_service.pulled if self.pull_service else 0,
            "consumed_ok": svc.stats.ok if svc else 0,
            "suspended": svc.stats.suspended if svc else 0,
            "dead_lettered": svc.stats.dead_lettered if svc else 0,
            "quiesce_timeouts": svc.stats.quiesce_timeouts if svc else 0,
        }
