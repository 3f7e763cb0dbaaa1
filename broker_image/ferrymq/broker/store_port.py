"""What the broker's processors need from the message store, and nothing more.

``ferrymq.store.message_store.MessageStore`` implements it; processors are typed against this
protocol so each can be read (and tested) without the whole store.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ferrymq.message import MessageExt, MessageInner
from ferrymq.store.results import GetMessageResult, PutMessageResult, QueryMessageResult

if TYPE_CHECKING:
    from ferrymq.store.dispatch import DispatchRoundListener

DispatchListener = Callable[..., None]


class MessageStorePort(Protocol):
    async def put_message(self, msg: MessageInner) -> PutMessageResult: ...

    def put_message_nowait(
        self, msg: MessageInner
    ) -> PutMessageResult | Awaitable[PutMessageResult]: ...

    async def put_messages(self, batch: MessageInner) -> PutMessageResult: ...

    def get_message(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_msg_nums: int,
        message_filter: Any = None,
    ) -> GetMessageResult: ...

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int: ...

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int: ...

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int: ...

    def get_message_store_timestamp(self, topic: str, queue_id: int, cq_offset: int) -> int: ...

    def get_earliest_message_time(self, topic: str, queue_id: int) -> int: ...

    def look_message_by_offset(self, commit_log_offset: int) -> MessageExt | None: ...

    def query_message(
        self, topic: str, key: str, max_num: int, begin: int, end: int
    ) -> QueryMessageResult: ...

    def delete_topics(self, names: Sequence[str]) -> int: ...

    def runtime_info(self) -> dict[str, str]: ...

    def add_dispatch_listener(self, listener: DispatchListener) -> None: ...

    def add_dispatch_round_listener(self, listener: DispatchRoundListener) -> None: ...
