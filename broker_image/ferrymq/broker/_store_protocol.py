"""The slice of ``MessageStore`` that the schedule, retry and transaction services use.

Declared here so those services depend on behaviour, not on the facade class, and so tests and
type checks do not need the whole store. ``get_message`` may be a plain or an async method.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from ferrymq.message import MessageExt, MessageInner
from ferrymq.store.results import GetMessageResult, PutMessageResult

__all__ = ["DispatchListener", "SemanticsStore", "get_messages"]

DispatchListener = Callable[[str, int, int, int, int, Mapping[str, str]], None]


class SemanticsStore(Protocol):
    async def put_message(self, msg: MessageInner) -> PutMessageResult: ...

    def get_message(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_msg_nums: int,
        message_filter: Any = None,
    ) -> GetMessageResult | Awaitable[GetMessageResult]: ...

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int: ...

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int: ...

    def look_message_by_offset(self, commit_log_offset: int) -> MessageExt | None: ...

    def add_dispatch_listener(self, listener: DispatchListener) -> None: ...


async def get_messages(
    store: SemanticsStore, group: str, topic: str, queue_id: int, offset: int, max_nums: int
) -> GetMessageResult:
    """``store.get_message`` whether the facade made it sync or async."""
    result = store.get_message(group, topic, queue_id, offset, max_nums, None)
    if inspect.isawaitable(result):
        result = await result
    return result
