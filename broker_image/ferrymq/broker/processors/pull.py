"""PULL_MESSAGE (11) with long polling (upstream PullMessageProcessor + PullRequestHoldService).

The handler is a coroutine: when nothing is there and the client allowed suspension, it waits in the
hold service (woken by dispatch, re-checked every longPollingCheckInterval, bounded by the client's
suspendTimeoutMillis) and then reads again. The response body is the stored records back to back,
exactly as in the CommitLog (never re-encoded). Every response carries all four ext fields.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ferrymq.broker.client_registry import ConsumerManager
from ferrymq.broker.config import BrokerConfig
from ferrymq.broker.consumer_offsets import ConsumerOffsetManager
from ferrymq.broker.long_polling import PullRequestHoldService
from ferrymq.broker.processors.common import guarded_async
from ferrymq.broker.store_port import MessageStorePort
from ferrymq.broker.subscription_groups import Refusal, SubscriptionGroupManager
from ferrymq.broker.topic_config import TopicConfigManager
from ferrymq.filter import (
    FilterCompileError,
    FilterNotSupportedError,
    TagMessageFilter,
    build_message_filter,
)
from ferrymq.mixall import MASTER_ID
from ferrymq.remoting.bodies import PERM_READ, MessageModel
from ferrymq.remoting.channel import Channel
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.headers import (
    PULL_FLAG_COMMIT_OFFSET,
    PULL_FLAG_SUBSCRIPTION,
    PULL_FLAG_SUSPEND,
    PullMessageRequestHeader,
    PullMessageResponseHeader,
)
from ferrymq.remoting.processor import eager
from ferrymq.remoting.server import RemotingServer
from ferrymq.store.results import GetMessageResult, GetMessageStatus

log = logging.getLogger(__name__)

_FILTER_CACHE_MAX = 1024


# what a slave's queue may lack only because it is behind its master: it waits (long poll)
_SLAVE_BEHIND = (
    GetMessageStatus.OFFSET_OVERFLOW_BADLY,
    GetMessageStatus.NO_MESSAGE_IN_QUEUE,
    GetMessageStatus.NO_MATCHED_LOGIC_QUEUE,
)


def pull_response_code(
    status: GetMessageStatus, requested_offset: int, *, offset_check: bool = True
) -> ResponseCode:
    """Pure: the store's read status -> the pull response code (upstream composeResponseHeader).

    ``offset_check=False`` is a SLAVE without offsetCheckInSlave: it never answers
    PULL_OFFSET_MOVED (upstream answers PULL_RETRY_IMMEDIATELY, suggesting the master, and keeps
    the consumer's offset). An offset beyond a slave's queue is held like one at its end instead
    of retried at once: the slave's queue is behind the master's (replication, or a confirm
    offset not yet passed on), and a consumer moved to its end or start would skip or re-read."""
    if status is GetMessageStatus.FOUND:
        return ResponseCode.SUCCESS
    if not offset_check:
        if status in _SLAVE_BEHIND:
            return ResponseCode.PULL_NOT_FOUND
        if status is GetMessageStatus.OFFSET_TOO_SMALL:
            return ResponseCode.PULL_RETRY_IMMEDIATELY
    if status in (GetMessageStatus.MESSAGE_WAS_REMOVING, GetMessageStatus.NO_MATCHED_MESSAGE):
        return ResponseCode.PULL_RETRY_IMMEDIATELY
    if status in (GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, GetMessageStatus.NO_MESSAGE_IN_QUEUE):
        return (
            ResponseCode.PULL_OFFSET_MOVED if requested_offset != 0 else ResponseCode.PULL_NOT_FOUND
        )
    if status in (GetMessageStatus.OFFSET_FOUND_NULL, GetMessageStatus.OFFSET_OVERFLOW_ONE):
        return ResponseCode.PULL_NOT_FOUND
    # OFFSET_OVERFLOW_BADLY, OFFSET_TOO_SMALL
    return ResponseCode.PULL_OFFSET_MOVED


@dataclass(slots=True)
class PullStats:
    got_messages: int = 0
    got_bytes: int = 0
    held: int = 0
    # messages and bytes handed out per (topic, group): upstream's rocketmq_messages_out_total
    # and rocketmq_throughput_out_total
    out: dict[tuple[str, str], list[int]] = field(default_factory=dict)
    # pulls that handed out messages, in all and per (topic, group): the request counts of
    # upstream's BROKER_GET_NUMS / GROUP_GET_NUMS / GROUP_GET_SIZE stats items (their avgpt)
    got_requests: int = 0
    out_pulls: dict[tuple[str, str], int] = field(default_factory=dict)


class PullMessageProcessor:
    def __init__(
        self,
        config: BrokerConfig,
        store: MessageStorePort,
        topics: TopicConfigManager,
        groups: SubscriptionGroupManager,
        consumers: ConsumerManager,
        offsets: ConsumerOffsetManager,
        hold: PullRequestHoldService,
        *,
        is_master: Callable[[], bool] = lambda: True,
        offset_check_in_slave: bool = False,
    ) -> None:
        self.config = config
        self.offset_check_in_slave = offset_check_in_slave
        self.store = store
        self.topics = topics
        self.groups = groups
        self.consumers = consumers
        self.offsets = offsets
        self.hold = hold
        self.is_master = is_master
        self.stats = PullStats()
        self._filters: dict[tuple[str, str], Any] = {}

    def register_to(self, server: RemotingServer) -> None:
        # eager: a pull that finds messages (or may not wait) is answered inline, without a task
        # and a loop turn; only a pull that suspends in the hold service becomes a task
        handler = eager(guarded_async(self.process))
        server.register(RequestCode.PULL_MESSAGE, handler)
        # the 5.x lite pull consumer's code for the same request (upstream registers the same
        # processor for both; before this, 5.4.0's DefaultLitePullConsumer got code 3 and nothing)
        server.register(RequestCode.LITE_PULL_MESSAGE, handler)

    def _filter(self, expression_type: str | None, expression: str | None) -> Any:
        """The store filter of a subscription; None for "all tags" (the store then skips both
        the ConsumeQueue check and decoding each record's properties)."""
        key = (expression_type or "TAG", expression or "*")
        if key in self._filters:
            return self._filters[key]
        cached: Any = build_message_filter(
            expression_type,
            expression,
            enable_property_filter=self.config.enable_property_filter,
        )
        if isinstance(cached, TagMessageFilter) and cached.subscription.is_all:
            cached = None
        if len(self._filters) >= _FILTER_CACHE_MAX:
            self._filters.clear()
        self._filters[key] = cached
        return cached

    def _refuse(self, request: RemotingCommand, code: int, remark: str) -> RemotingCommand:
        # upstream answers errors with the header fields present too; some clients read them always
        header = PullMessageResponseHeader(0, 0, 0, MASTER_ID)
        return request.response(code, remark, header.to_ext())

    async def process(self, channel: Channel, request: RemotingCommand) -> RemotingCommand | None:
        h = PullMessageRequestHeader.from_ext(request.ext_fields)
        if not self.config.broker_permission & PERM_READ:
            return self._refuse(
                request,
                ResponseCode.NO_PERMISSION,
                f"the broker[{self.config.broker_ip1}] pulling message is forbidden",
            )
        if (
            request.code == RequestCode.LITE_PULL_MESSAGE
            and not self.config.lite_pull_message_enable
        ):
            return self._refuse(
                request,
                ResponseCode.NO_PERMISSION,
                f"the broker[{self.config.broker_ip1}] for lite pull consumer is forbidden",
            )
        group_config = self.groups.consumable(h.consumer_group)
        if isinstance(group_config, Refusal):
            return self._refuse(request, group_config.code, group_config.remark)
        topic_config = self.topics.get(h.topic)
        if topic_config is None:
            return self._refuse(
                request,
                ResponseCode.TOPIC_NOT_EXIST,
                f"topic[{h.topic}] not exist, apply first please!",
            )
        if not topic_config.perm & PERM_READ:
            return self._refuse(
                request,
                ResponseCode.NO_PERMISSION,
                f"the topic[{h.topic}] pulling message is forbidden",
            )
        if h.queue_id < 0 or h.queue_id >= topic_config.read_queue_nums:
            return self._refuse(
                request,
                ResponseCode.SYSTEM_ERROR,
                f"queueId[{h.queue_id}] is illegal, topic:[{h.topic}] "
                f"topicConfig.readQueueNums:[{topic_config.read_queue_nums}] "
                f"consumer:[{channel.remote_addr}]",
            )

        try:
            message_filter = self._subscription_filter(h)
        except _SubscriptionRefused as refused:
            return self._refuse(request, refused.code, refused.remark)

        # commit the piggybacked offset on arrival, as upstream (brokerAllowSuspend): committing
        # after a long hold would put back a stale offset once the queue changed owner meanwhile
        if h.sys_flag & PULL_FLAG_COMMIT_OFFSET and self.is_master():
            self.offsets.commit_offset(h.consumer_group, h.topic, h.queue_id, h.commit_offset)
        suspend = bool(h.sys_flag & PULL_FLAG_SUSPEND)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0, h.suspend_timeout_millis) / 1000
        check_s = self.config.long_polling_check_interval / 1000
        while True:
            result = self.store.get_message(
                h.consumer_group,
                h.topic,
                h.queue_id,
                h.queue_offset,
                h.max_msg_nums,
                message_filter,
            )
            code = pull_response_code(
                result.status,
                h.queue_offset,
                offset_check=self.offset_check_in_slave or self.is_master(),
            )
            remaining = deadline - loop.time()
            if code != ResponseCode.PULL_NOT_FOUND or not suspend or remaining <= 0:
                break
            result.release()
            self.stats.held += 1
            if self.config.long_polling_enable:
                await self.hold.hold(
                    h.topic, h.queue_id, h.queue_offset, min(remaining, check_s), message_filter
                )
            else:
                # short polling (upstream shortPollingTimeMills): one delayed re-check, then answer
                await asyncio.sleep(min(remaining, self.config.short_polling_time_mills / 1000))
                suspend = False
            if self.hold.closed:
                suspend = False

        if code == ResponseCode.SUCCESS:
            # upstream commitPullOffset: what was handed out, for the inflight/ready lag metrics
            self.offsets.commit_pull_offset(
                h.consumer_group, h.topic, h.queue_id, result.next_begin_offset
            )
        return self._respond(
            request,
            result,
            code,
            group_config.which_broker_when_consume_slowly,
            (h.topic, h.consumer_group),
        )

    def _subscription_filter(self, h: PullMessageRequestHeader) -> Any:
        if h.sys_flag & PULL_FLAG_SUBSCRIPTION:
            try:
                return self._filter(h.expression_type, h.subscription)
            except FilterNotSupportedError as exc:
                raise _SubscriptionRefused(ResponseCode.SYSTEM_ERROR, str(exc)) from None
            except FilterCompileError as exc:
                raise _SubscriptionRefused(
                    ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                    f"parse the consumer's subscription[{h.subscription}] failed: {exc}",
                ) from None
        group_info = self.consumers.get(h.consumer_group)
        if group_info is None:
            raise _SubscriptionRefused(
                ResponseCode.SUBSCRIPTION_NOT_EXIST,
                f"the consumer's group info not exist: {h.consumer_group}",
            )
        if group_info.message_model is MessageModel.BROADCASTING:
            group_config = self.groups.find(h.consumer_group)
            if group_config is not None and not group_config.consume_broadcast_enable:
                raise _SubscriptionRefused(
                    ResponseCode.NO_PERMISSION,
                    f"the consumer group[{h.consumer_group}] can not consume by broadcast way",
                )
        sub = group_info.find_subscription(h.topic)
        if sub is None:
            raise _SubscriptionRefused(
                ResponseCode.SUBSCRIPTION_NOT_EXIST,
                f"the consumer's subscription not exist: group {h.consumer_group} topic {h.topic}",
            )
        if sub.sub_version < h.sub_version:
            raise _SubscriptionRefused(
                ResponseCode.SUBSCRIPTION_NOT_LATEST, "the consumer's subscription not latest"
            )
        try:
            return self._filter(sub.expression_type, sub.sub_string)
        except FilterCompileError as exc:
            raise _SubscriptionRefused(ResponseCode.SUBSCRIPTION_PARSE_FAILED, str(exc)) from None

    def _respond(
        self,
        request: RemotingCommand,
        result: GetMessageResult,
        code: ResponseCode,
        slow_broker_id: int,
        topic_group: tuple[str, str],
    ) -> RemotingCommand:
        suggest = slow_broker_id if result.suggest_pulling_from_slave else MASTER_ID
        # the PullMessageResponseHeader fields, always all four, all strings (hot path)
        header = {
            "nextBeginOffset": str(result.next_begin_offset),
            "minOffset": str(result.min_offset),
            "maxOffset": str(result.max_offset),
            "suggestWhichBrokerId": str(suggest),
        }
        if code != ResponseCode.SUCCESS:
            result.release()
            return request.response(code, result.status.value, header)
        try:
            # one copy out of the mapped files (then released); the bytes are the stored records
            body = result.body()
        finally:
            count = result.message_count
            result.release()
        stats = self.stats
        stats.got_messages += count
        stats.got_bytes += len(body)
        stats.got_requests += 1
        stats.out_pulls[topic_group] = stats.out_pulls.get(topic_group, 0) + 1
        out = stats.out.get(topic_group)
        if out is None:
            stats.out[topic_group] = [count, len(body)]
        else:
            out[0] += count
            out[1] += len(body)
        return request.response(code, None, header, body)


class _SubscriptionRefused(Exception):
    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = code
        self.remark = remark
