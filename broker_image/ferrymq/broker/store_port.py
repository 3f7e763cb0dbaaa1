"""What the broker needs from the message store, and nothing more: the one broker-to-store seam.

``ferrymq.store.message_store.MessageStore`` implements it, and so does the send processor's view
of it (``ferrymq.broker.semantics.SendSemanticsStore``). Processors and the schedule, retry and
transaction services are typed against this protocol so each can be read (and tested) without the
whole store; ``ferrymq.broker._port_conformance`` has mypy check both implementations against it, so a
method missing from either, or one with another signature, fails ``mypy`` (strict).

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

__all__ = ["MessageStorePort"]


class MessageStorePort(Protocol):
    # --- put ----------------------------------------------------------------------------------
    async def put_message(self, msg: MessageInner) -> PutMessageResult: ...

    def put_message_nowait(
        self, msg: MessageInner
    ) -> PutMessageResult | Awaitable[PutMessageResult]:
        """The result itself when the put needs no durability wait, else an awaitable of it."""

    async def put_messages(self, batch: MessageInner) -> PutMessageResult: ...

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
    # Read by mypy only: both implementations must be assignable to the port, or `mypy` fails
    # naming the missing or mismatched method (tests/typing/ shows it failing on purpose).
    from ferrymq.broker.semantics import SendSemanticsStore
    from ferrymq.store.message_store import MessageStore

    def _message_store_is_a_port(store: MessageStore) -> MessageStorePort:
        return store

    def _send_view_is_a_port(view: SendSemanticsStore) -> MessageStorePort:
        return view
