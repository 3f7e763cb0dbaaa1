"""What the broker needs from the message store, and nothing more: the one broker-to-store seam.

``ferrymq.store.message_store.MessageStore`` implements it; the send processor's view of the store
(``ferrymq.broker.semantics.SendSemanticsStore``) implements its put side, :class:`MessagePuts`.
Processors and the schedule, retry and transaction services are typed against these protocols so
each can be read (and tested) without the whole store. The end of this module has mypy check both
implementations, so a method missing from either, or one with another signature, fails ``mypy``
(strict); ``tests/typecheck/`` shows that check failing on purpose.

Every method is synchronous and runs on the store's event loop except the puts, which await the
durability waits (see ``message_store``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import TYPE_CHECKING, Protocol

from ferrymq.message import MessageExt, MessageInner
from ferrymq.store.consume_queue_store import ConsumeQueueStore
from ferrymq.store.results import GetMessageResult, PutMessageResult, QueryMessageResult

if TYPE_CHECKING:
    # the store's own listener types: one definition, used by the store and by its callers
    from ferrymq.store.dispatch import DispatchListener, DispatchRoundListener
    from ferrymq.store.get_message import MessageFilter

__all__ = ["MessagePuts", "MessageStorePort"]


class MessagePuts(Protocol):
    """The put side of the store: all the send processor needs (the store itself, or the view of
    it that rewrites delayed and transactional messages on put)."""

    async def put_message(self, msg: MessageInner) -> PutMessageResult: ...

    def put_message_nowait(
        self, msg: MessageInner
    ) -> PutMessageResult | Awaitable[PutMessageResult]:
        """The result itself when the put needs no durability wait, else an awaitable of it."""

    async def put_messages(self, batch: MessageInner) -> PutMessageResult: ...


class MessageStorePort(MessagePuts, Protocol):
    """The whole port: the puts, reads and lookups, and the dispatch listeners."""

    # --- get (upstream getMessage; ``group`` is kept for its signature) -----------------------
    def get_message(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_msg_nums: int,
        message_filter: MessageFilter | None = None,
    ) -> GetMessageResult: ...

    # --- lookups ------------------------------------------------------------------------------
    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int: ...

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int: ...

    def check_in_mem_by_consume_offset(self, topic: str, queue_id: int, cq_offset: int) -> bool: ...

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int: ...

    def get_message_store_timestamp(self, topic: str, queue_id: int, cq_offset: int) -> int: ...

    def get_earliest_message_time(self, topic: str, queue_id: int) -> int: ...

    def look_message_by_offset(self, commit_log_offset: int) -> MessageExt | None: ...

    def query_message(
        self, topic: str, key: str, max_num: int, begin: int, end: int
    ) -> QueryMessageResult: ...

    @property
    def min_phy_offset(self) -> int: ...

    @property
    def consume_queues(self) -> ConsumeQueueStore: ...

    # --- admin and wiring ---------------------------------------------------------------------
    def delete_topics(self, names: Sequence[str]) -> int: ...

    def runtime_info(self) -> dict[str, str]: ...

    def add_dispatch_listener(self, listener: DispatchListener) -> None: ...

    def add_dispatch_round_listener(self, listener: DispatchRoundListener) -> None: ...


if TYPE_CHECKING:
    # Read by mypy only: each implementation must be assignable to its protocol, or `mypy` fails
    # naming the missing or mismatched method.
    from ferrymq.broker.semantics import SendSemanticsStore
    from ferrymq.store.message_store import MessageStore

    def _message_store_is_a_port(store: MessageStore) -> MessageStorePort:
        return store

    def _send_view_is_a_put_side(view: SendSemanticsStore) -> MessagePuts:
        return view
