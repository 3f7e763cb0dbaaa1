"""What the proxy's processors need from the brokers (upstream ``service/``: message, route,
metadata and transaction services), as one protocol with two implementations: every broker group
of a cluster over remoting (:class:`ferrymq.proxy.cluster.ClusterBackend`, cluster mode) and the
broker the proxy runs in (local mode). Requests and answers are the remoting headers and bodies,
so both implementations speak the broker's own codes; only processors turn them into v2 codes.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

from ferrymq.message import MessageExt
from ferrymq.proxy.message_type import TopicMessageType
from ferrymq.remoting import bodies, headers


class PopStatus(enum.Enum):
    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"  # the long poll ended with nothing
    POLLING_FULL = "POLLING_FULL"  # the broker holds too many polls already


@dataclass(slots=True)
class PopOutcome:
    status: PopStatus
    # each with its POP_CK property set to the proxy's receipt handle (receipt_handle.assign_handles)
    messages: list[MessageExt] = field(default_factory=list)
    rest_num: int = 0


class SendStatus(enum.Enum):
    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


@dataclass(frozen=True, slots=True)
class SendOutcome:
    status: SendStatus
    msg_id: str  # the broker's offset msgId
    queue_id: int
    queue_offset: int
    transaction_id: str | None
    recall_handle: str | None = None


@dataclass(frozen=True, slots=True)
class GroupRetryPolicy:
    """A group's retry schedule (upstream GroupRetryPolicy): exponential, or the customized
    list of delays (default: the delay levels from 1 s)."""

    exponential: tuple[int, int, int] | None  # (initial ms, max ms, multiplier)
    customized: tuple[int, ...]  # delays in ms

    def next_delay_ms(self, reconsume_times: int) -> int:
        """The delay before the next delivery of a message consumed ``reconsume_times`` times
        before (upstream Exponential/CustomizedRetryPolicy.nextDelayDuration: the customized
        list starts at its third entry, as the first retry is delay level 3)."""
        times = max(reconsume_times, 0)
        if self.exponential is not None:
            initial, most, multiplier = self.exponential
            return int(min(most, initial * multiplier ** min(times, 32)))
        return self.customized[min(times + 2, len(self.customized) - 1)]


DEFAULT_CUSTOMIZED_NEXT_MS: tuple[int, ...] = tuple(
    s * 1000
    for s in (1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200)
)


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """What the proxy reads of a subscription group (upstream SubscriptionGroupConfig)."""

    group: str
    retry_max_times: int = 16
    consume_message_orderly: bool = False
    retry_policy: GroupRetryPolicy = GroupRetryPolicy(None, DEFAULT_CUSTOMIZED_NEXT_MS)


# broker name, CHECK_TRANSACTION_STATE header, the half message: relayed to a client
TransactionCheckListener = Callable[
    [str, headers.CheckTransactionStateRequestHeader, MessageExt], Awaitable[None]
]


class Backend(Protocol):
    """The brokers behind the proxy. Methods raise :class:`ferrymq.proxy.errors.ProxyError`."""

    async def start(self) -> None: ...

    async def shutdown(self) -> None: ...

    async def topic_route(self, topic: str) -> bodies.TopicRouteData:
        """The topic's route; TOPIC_NOT_FOUND when no broker serves it."""

    async def topic_message_type(self, topic: str) -> TopicMessageType:
        """The topic's ``message.type``; UNSPECIFIED when the topic is unknown."""

    async def group_config(self, group: str) -> GroupConfig | None:
        """The subscription group's config; None when the brokers do not know it."""

    async def send(
        self, broker_name: str, header: headers.SendMessageRequestHeader, body: bytes
    ) -> SendOutcome: ...

    async def pop(
        self, broker_name: str, header: headers.PopMessageRequestHeader, timeout_s: float
    ) -> PopOutcome: ...

    async def ack(self, broker_name: str, header: headers.AckMessageRequestHeader) -> None: ...

    async def change_invisible_time(
        self, broker_name: str, header: headers.ChangeInvisibleTimeRequestHeader
    ) -> headers.ChangeInvisibleTimeResponseHeader: ...

    async def send_back(
        self, broker_name: str, header: headers.ConsumerSendMsgBackRequestHeader
    ) -> None: ...

    async def end_transaction(
        self, broker_name: str, header: headers.EndTransactionRequestHeader
    ) -> None: ...

    async def recall(self, broker_name: str, header: headers.RecallMessageRequestHeader) -> str: ...

    def set_producer_groups(self, groups: set[str], source: str = "grpc") -> None:
        """The producer groups whose transaction checks the brokers should send to this proxy
        (per ``source``: the brokers get the union of every source's)."""

    def set_transaction_check_listener(self, listener: TransactionCheckListener) -> None: ...
