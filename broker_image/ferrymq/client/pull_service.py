"""PullMessageService: one pull loop per owned queue (upstream PullMessageService + the pull half of
DefaultMQPushConsumerImpl).

Upstream runs one thread taking PullRequests from a queue; in asyncio the natural shape is one task
per (group, queue), which is what a PullRequest is: the loop holds ``next_offset`` and the
ProcessQueue and re-issues the pull after each result (seeds-digest PL1-PL5, CR1-CR4):

- flow control first: a ProcessQueue over its count, size or span limit waits 50 ms;
- the pull is a long poll (``suspendTimeoutMillis`` 15 s, socket timeout 30 s) that also carries
  the committed offset (commitOffset flag), so the broker learns progress between persists;
- FOUND: re-filter by tag (the broker matched hash codes only), cache, hand to the consume service;
- NO_NEW_MSG / NO_MATCHED_MSG: move to ``nextBeginOffset``; when nothing is in flight, that is
  also the consumed offset (upstream correctTagsOffset);
- OFFSET_ILLEGAL: the offset was outside the queue; jump to ``nextBeginOffset``, record it as
  consumed progress and continue;
- an error: wait 3 s (``pullTimeDelayMillsWhenException``) and try again.
The loop ends when the queue is dropped (rebalanced away) or the consumer stops.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

from ferrymq.client.allocate import MessageQueue
from ferrymq.client.broker_api import PullStatus
from ferrymq.client.errors import BrokerUnreachableError, MQClientError
from ferrymq.client.instance import ClientInstance
from ferrymq.client.offset_store import OffsetStore
from ferrymq.client.process_queue import FLOW_CONTROL_DELAY_S, FlowControl, FlowLimits, ProcessQueue
from ferrymq.message import MessageExt
from ferrymq.remoting import bodies, headers

log = logging.getLogger(__name__)

BROKER_SUSPEND_MAX_S = 15.0
CONSUMER_TIMEOUT_WHEN_SUSPEND_S = 30.0
PULL_DELAY_WHEN_EXCEPTION_S = 3.0


@dataclass
class PullConfig:
    group: str
    clustering: bool = True
    pull_batch_size: int = 32
    pull_interval_s: float = 0.0
    suspend_s: float = BROKER_SUSPEND_MAX_S
    limits: FlowLimits = field(default_factory=FlowLimits)


def filter_by_tags(msgs: list[MessageExt], sub: bodies.SubscriptionData) -> list[MessageExt]:
    """Keep messages whose tag is subscribed (hash-code collisions at the broker are removed)."""
    if sub.expression_type.upper() != "TAG" or not sub.tags_set or "*" in sub.tags_set:
        return msgs
    wanted = set(sub.tags_set)
    return [m for m in msgs if m.tags is not None and m.tags in wanted]


def pull_sys_flag(commit_offset: bool, suspend: bool, subscription: bool) -> int:
    return (
        (headers.PULL_FLAG_COMMIT_OFFSET if commit_offset else 0)
        | (headers.PULL_FLAG_SUSPEND if suspend else 0)
        | (headers.PULL_FLAG_SUBSCRIPTION if subscription else 0)
    )


# wire names of the per-pull fields of PullMessageRequestHeader (checked by a test)
_QUEUE_OFFSET = "queueOffset"
_SYS_FLAG = "sysFlag"
_COMMIT_OFFSET = "commitOffset"

Deliver = Callable[[list[MessageExt], ProcessQueue, MessageQueue], None]
SubscriptionOf = Callable[[str], bodies.SubscriptionData | None]


class PullService:
    def __init__(
        self,
        config: PullConfig,
        instance: ClientInstance,
        offset_store: OffsetStore,
        subscription_of: SubscriptionOf,
        deliver: Deliver,
    ) -> None:
        self.config = config
        self.instance = instance
        self.offset_store = offset_store
        self.subscription_of = subscription_of
        self.deliver = deliver
        self._tasks: dict[MessageQueue, asyncio.Task[None]] = {}
        # brokerId the broker suggested for the next pull of each queue (slave reads)
        self._suggested: dict[MessageQueue, int] = {}
        self._closed = False
        self.pulled = 0
        # per queue: (subscription key, encoded pull header) for _pull_ext
        self._ext_cache: dict[MessageQueue, tuple[tuple[str, int, str | None], dict[str, str]]] = {}

    def start_queue(self, mq: MessageQueue, pq: ProcessQueue, next_offset: int) -> None:
        if self._closed:
            return
        old = self._tasks.pop(mq, None)
        if old is not None:
            old.cancel()
        task = asyncio.create_task(self._loop(mq, pq, next_offset), name=f"pull {mq}")
        self._tasks[mq] = task
        task.add_done_callback(partial(self._forget, mq))

    def _forget(self, mq: MessageQueue, task: asyncio.Task[None]) -> None:
        if self._tasks.get(mq) is task:
            del self._tasks[mq]
            self._ext_cache.pop(mq, None)

    async def stop_queue(self, mq: MessageQueue) -> None:
        task = self._tasks.pop(mq, None)
        self._ext_cache.pop(mq, None)
        if task is not None:
            task.cancel()
            await asyncio.wait([task], timeout=5.0)

    async def shutdown(self) -> None:
        self._closed = True
        tasks = list(self._tasks.values())
        self._tasks.clear()
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=5.0)

    async def _broker_addr(self, mq: MessageQueue) -> str:
        suggested = self._suggested.get(mq, 0)
        addrs = self.instance.routes.brokers.get(mq.broker_name, {})
        if suggested in addrs:
            return addrs[suggested]
        return await self.instance.find_broker_addr(mq.broker_name, mq.topic, master=False)

    async def _loop(self, mq: MessageQueue, pq: ProcessQueue, next_offset: int) -> None:
        loop = asyncio.get_running_loop()
        while not pq.dropped:
            if pq.flow_control(self.config.limits) is not FlowControl.NONE:
                await asyncio.sleep(FLOW_CONTROL_DELAY_S)
                continue
            sub = self.subscription_of(mq.topic)
            if sub is None:
                await asyncio.sleep(PULL_DELAY_WHEN_EXCEPTION_S)
                continue
            pq.last_pull_monotonic = loop.time()
            try:
                next_offset = await self._pull_once(mq, pq, next_offset, sub)
            except asyncio.CancelledError:
                raise
            except MQClientError as exc:
                log.info("pull of %s at %d failed: %s", mq, next_offset, exc)
                if exc.refresh_route or isinstance(exc, BrokerUnreachableError):
                    # a dead broker (e.g. a failed-over master): re-read the route now rather
                    # than at the 30 s poll, and forget its suggested broker
                    self._suggested.pop(mq, None)
                    try:
                        await self.instance.update_route(mq.topic)
                    except MQClientError as refresh_exc:
                        log.info("route refresh of %s failed: %s", mq.topic, refresh_exc)
                await asyncio.sleep(PULL_DELAY_WHEN_EXCEPTION_S)
                continue
            if self.config.pull_interval_s > 0:
                await asyncio.sleep(self.config.pull_interval_s)

    def _pull_ext(
        self, mq: MessageQueue, sub: bodies.SubscriptionData, offset: int, commit_offset: int
    ) -> dict[str, str]:
        """The PULL_MESSAGE ext fields: encoded once per queue and subscription, then copied
        with the offsets and flag of this pull (the header dataclass + to_ext cost ~8 us)."""
        key = (sub.sub_string, sub.sub_version, sub.expression_type)
        cached = self._ext_cache.get(mq)
        if cached is None or cached[0] != key:
            base = headers.PullMessageRequestHeader(
                consumer_group=self.config.group,
                topic=mq.topic,
                queue_id=mq.queue_id,
                queue_offset=0,
                max_msg_nums=self.config.pull_batch_size,
                sys_flag=0,
                commit_offset=0,
                suspend_timeout_millis=int(self.config.suspend_s * 1000),
                subscription=sub.sub_string,
                sub_version=sub.sub_version,
                expression_type=sub.expression_type,
            ).to_ext()
            self._ext_cache[mq] = (key, base)
        else:
            base = cached[1]
        ext = dict(base)  # the request keeps its dict: a fresh one per pull
        ext[_QUEUE_OFFSET] = str(offset)
        ext[_SYS_FLAG] = str(pull_sys_flag(commit_offset > 0, True, True))
        ext[_COMMIT_OFFSET] = str(commit_offset)
        return ext

    async def _pull_once(
        self, mq: MessageQueue, pq: ProcessQueue, offset: int, sub: bodies.SubscriptionData
    ) -> int:
        commit_offset = 0
        if self.config.clustering:
            commit_offset = max(0, self.offset_store.memory_offset(mq))
        ext = self._pull_ext(mq, sub, offset, commit_offset)
        addr = await self._broker_addr(mq)
        timeout = self.config.suspend_s + (CONSUMER_TIMEOUT_WHEN_SUSPEND_S - BROKER_SUSPEND_MAX_S)
        result = await self.instance.broker.pull_message(addr, ext, timeout)
        if pq.dropped:
            return offset
        self._suggested[mq] = result.suggest_which_broker_id
        if result.status is PullStatus.FOUND:
            msgs = filter_by_tags(result.messages, sub)
            self.pulled += len(result.messages)
            if msgs:
                pq.put_messages(msgs)
                self.deliver(msgs, pq, mq)
                # one loop turn so a waiting consume worker starts on them before the next pull
                # goes out (its send, and the broker it wakes, would otherwise come first)
                await asyncio.sleep(0)
            elif pq.msg_count == 0:
                self.offset_store.update_offset(mq, result.next_begin_offset, increase_only=True)
            return result.next_begin_offset
        if result.status is PullStatus.OFFSET_ILLEGAL:
            log.warning(
                "%s: offset %d of %s is illegal (min %d, max %d); moving to %d",
                self.config.group,
                offset,
                mq,
                result.min_offset,
                result.max_offset,
                result.next_begin_offset,
            )
            if pq.msg_count == 0:
                self.offset_store.update_offset(mq, result.next_begin_offset, increase_only=False)
            return result.next_begin_offset
        # NO_NEW_MSG / NO_MATCHED_MSG
        if pq.msg_count == 0:
            self.offset_store.update_offset(mq, result.next_begin_offset, increase_only=True)
        return result.next_begin_offset
