"""Concurrent consumption (upstream ConsumeMessageConcurrentlyService).

Pulled messages are cut into batches of ``consume_batch_max_size`` and handed to a fixed pool of
worker coroutines (``consume_thread_max``, as upstream's thread pool). The listener may be a plain
function (run in a thread pool by default, so a blocking listener does not stall the event loop)
or a coroutine function (awaited on the loop).

After a batch (seeds-digest CC2-CC7):

- the queue was given away meanwhile (ProcessQueue dropped): the result is discarded, the new
  owner will deliver the messages again;
- failed (RECONSUME_LATER, False or an exception), clustering: each message is sent back to the
  broker (CONSUMER_SEND_MSG_BACK: retry topic with a delay level); one that cannot be sent back
  stays in the ProcessQueue and is consumed again locally 5 s later;
- failed, broadcasting: logged and dropped, as upstream;
- then the messages leave the ProcessQueue and the offset store learns the lowest offset still
  in flight (``increase_only``), which the instance persists every 5 s.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import inspect
import logging
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from ferrymq.client.allocate import MessageQueue
from ferrymq.client.errors import MQClientError
from ferrymq.client.offset_store import OffsetStore
from ferrymq.client.process_queue import ProcessQueue
from ferrymq.message import MessageConst, MessageExt
from ferrymq.tasks import cancel_all_and_wait
from ferrymq.topic_validator import RETRY_GROUP_TOPIC_PREFIX

log = logging.getLogger(__name__)

LOCAL_RECONSUME_DELAY_S = 5.0


class ConsumeStatus(enum.Enum):
    CONSUME_SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"


@dataclass(slots=True)
class ConsumeContext:
    """What a listener may read or set (upstream ConsumeConcurrentlyContext)."""

    message_queue: MessageQueue
    # 0: the broker picks (3 + reconsumeTimes); -1: straight to the DLQ; >0: that delay level
    delay_level_when_next_consume: int = 0
    # with a batch: messages up to and including this index succeeded (upstream ackIndex)
    ack_index: int = field(default=2**31 - 1)


ListenerResult = ConsumeStatus | bool | None
Listener = Callable[[list[MessageExt], ConsumeContext], ListenerResult | Awaitable[ListenerResult]]
SendBack = Callable[[MessageExt, MessageQueue, int], Awaitable[None]]


def result_status(result: object) -> ConsumeStatus:
    """None/True/CONSUME_SUCCESS mean success; anything else means try again later."""
    if result is None or result is True or result is ConsumeStatus.CONSUME_SUCCESS:
        return ConsumeStatus.CONSUME_SUCCESS
    return ConsumeStatus.RECONSUME_LATER


def restore_retry_topic(msg: MessageExt, group: str) -> None:
    """A message redelivered through ``%RETRY%<group>`` shows its original topic again."""
    retry_topic = msg.properties.get(MessageConst.PROPERTY_RETRY_TOPIC)
    if retry_topic and msg.topic == RETRY_GROUP_TOPIC_PREFIX + group:
        msg.topic = retry_topic


@dataclass(slots=True)
class _Job:
    msgs: list[MessageExt]
    pq: ProcessQueue
    mq: MessageQueue


@dataclass
class ConsumeStats:
    ok: int = 0
    failed: int = 0
    sent_back: int = 0


class ConsumeService:
    def __init__(
        self,
        listener: Listener,
        group: str,
        offset_store: OffsetStore,
        send_back: SendBack | None,
        *,
        clustering: bool = True,
        consume_batch_max_size: int = 1,
        consume_thread_max: int = 20,
        run_sync_in_thread: bool = True,
    ) -> None:
        if consume_batch_max_size < 1 or consume_thread_max < 1:
            raise ValueError("consume_batch_max_size and consume_thread_max must be >= 1")
        self.listener = listener
        self.group = group
        self._retry_topic = RETRY_GROUP_TOPIC_PREFIX + group
        self.offset_store = offset_store
        self.send_back = send_back
        self.clustering = clustering
        self.batch_size = consume_batch_max_size
        self.workers = consume_thread_max
        self.is_async = inspect.iscoroutinefunction(listener) or inspect.iscoroutinefunction(
            getattr(listener, "__call__", None)  # noqa: B004 - callable objects with async __call__
        )
        self.run_sync_in_thread = run_sync_in_thread and not self.is_async
        self.stats = ConsumeStats()
        self._queue: asyncio.Queue[_Job] = asyncio.Queue()
        self._tasks: list[asyncio.Task[None]] = []
        self._later: set[asyncio.Task[None]] = set()
        self._executor: ThreadPoolExecutor | None = None

    def start(self) -> None:
        if self.run_sync_in_thread:
            self._executor = ThreadPoolExecutor(self.workers, thread_name_prefix="ferrymq-consume")
        self._tasks = [asyncio.create_task(self._worker()) for _ in range(self.workers)]

    async def shutdown(self, timeout: float = 5.0) -> None:
        """Finish what is queued (bounded by ``timeout``), then stop the workers."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._queue.join(), timeout)
        await cancel_all_and_wait([*self._tasks, *self._later])
        self._tasks.clear()
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None

    @property
    def backlog(self) -> int:
        return self._queue.qsize()

    def submit(self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue) -> None:
        for i in range(0, len(msgs), self.batch_size):
            self._queue.put_nowait(_Job(msgs[i : i + self.batch_size], pq, mq))

    async def _worker(self) -> None:
        while True:
            job = await self._queue.get()
            try:
                await self._consume(job)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("consume of %d message(s) from %s failed", len(job.msgs), job.mq)
            finally:
                self._queue.task_done()

    async def _call_listener(self, msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeStatus:
        try:
            if self.is_async:
                result: Any = await self.listener(msgs, ctx)  # type: ignore[misc]
            elif self._executor is not None:
                loop = asyncio.get_running_loop()
                result = await loop.run_in_executor(self._executor, self.listener, msgs, ctx)
            else:
                result = self.listener(msgs, ctx)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception(
                "listener of group %s raised; the messages will be consumed again", self.group
            )
            return ConsumeStatus.RECONSUME_LATER
        return result_status(result)

    async def _consume(self, job: _Job) -> None:
        if job.pq.dropped:
            return
        if job.mq.topic == self._retry_topic:
            # only the group's retry queues hold redelivered messages (a queue's records carry
            # its topic), so other batches skip the per-message check
            for msg in job.msgs:
                restore_retry_topic(msg, self.group)
        ctx = ConsumeContext(job.mq)
        status = await self._call_listener(job.msgs, ctx)
        if job.pq.dropped:
            # given away during consumption: the new owner delivers again (duplicates, not loss)
            return
        # upstream ackIndex: on success, messages after it still count as failed; on failure, all do
        ok_count = 0
        if status is ConsumeStatus.CONSUME_SUCCESS:
            ok_count = max(0, min(ctx.ack_index, len(job.msgs) - 1) + 1)
        failed = job.msgs[ok_count:]
        self.stats.ok += ok_count
        self.stats.failed += len(failed)
        keep: list[MessageExt] = []
        if failed and self.clustering and self.send_back is not None:
            for msg in failed:
                try:
                    await self.send_back(msg, job.mq, ctx.delay_level_when_next_consume)
                    self.stats.sent_back += 1
                except MQClientError as exc:
                    log.warning(
                        "send back of %s failed (%s); consuming it again locally", msg.msg_id, exc
                    )
                    msg.reconsume_times += 1
                    keep.append(msg)
        elif failed:
            log.warning(
                "broadcasting consumer of %s dropped %d failed message(s)", self.group, len(failed)
            )
        done = [m for m in job.msgs if m not in keep] if keep else job.msgs
        offset = job.pq.remove_messages(done)
        if offset >= 0 and not job.pq.dropped:
            self.offset_store.update_offset(job.mq, offset, increase_only=True)
        if keep:
            self._reconsume_later(keep, job.pq, job.mq)

    def _reconsume_later(self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue) -> None:
        async def later() -> None:
            await asyncio.sleep(LOCAL_RECONSUME_DELAY_S)
            if not pq.dropped:
                self.submit(msgs, pq, mq)

        task = asyncio.create_task(later())
        self._later.add(task)
        task.add_done_callback(self._later.discard)
