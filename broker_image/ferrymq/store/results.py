"""What the store answers, as enums and dataclasses (upstream ``PutMessageStatus``,
``AppendMessageStatus``, ``GetMessageStatus``, ``PutMessageResult``, ``GetMessageResult``).

Only the broker's processors translate these into wire response codes.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field

from ferrymq.message import MessageExt


class PutMessageStatus(enum.Enum):
    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    CREATE_MAPPED_FILE_FAILED = "CREATE_MAPPED_FILE_FAILED"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    OS_PAGECACHE_BUSY = "OS_PAGECACHE_BUSY"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"
    # timer messages (RocketMQ 5): the remark carries upstream's text
    WHEEL_TIMER_MSG_ILLEGAL = "WHEEL_TIMER_MSG_ILLEGAL"
    WHEEL_TIMER_NOT_ENABLE = "WHEEL_TIMER_NOT_ENABLE"

    @property
    def is_ok(self) -> bool:
        """True for statuses where the message IS stored (flush or replica waits may have lapsed)."""
        return self in _STORED


_STORED = {
    PutMessageStatus.PUT_OK,
    PutMessageStatus.FLUSH_DISK_TIMEOUT,
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT,
    PutMessageStatus.SLAVE_NOT_AVAILABLE,
}


class AppendMessageStatus(enum.Enum):
    PUT_OK = "PUT_OK"
    END_OF_FILE = "END_OF_FILE"
    MESSAGE_SIZE_EXCEEDED = "MESSAGE_SIZE_EXCEEDED"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"


@dataclass(slots=True)
class AppendMessageResult:
    """Where an append landed. For a batch, offsets are those of the first message.

    msgIds are built on demand from the store host prefix and the record offsets (upstream
    also computes them lazily): the append path only records offsets.
    """

    status: AppendMessageStatus
    wrote_offset: int = 0
    wrote_bytes: int = 0
    store_timestamp: int = 0
    queue_offset: int = 0
    msg_num: int = 1
    msg_id_prefix: str = ""  # upper-case hex of store IPv4 + port
    record_offsets: list[int] = field(default_factory=list)

    @property
    def end_offset(self) -> int:
        return self.wrote_offset + self.wrote_bytes

    @property
    def msg_ids(self) -> list[str]:
        """One offset msgId per stored message."""
        prefix = self.msg_id_prefix
        return [f"{prefix}{offset:016X}" for offset in self.record_offsets]

    @property
    def msg_id(self) -> str:
        """The msgId of a single message; for a batch, all of them joined by commas (as the
        SEND_BATCH_MESSAGE response carries them)."""
        return ",".join(self.msg_ids)


@dataclass(slots=True)
class PutMessageResult:
    status: PutMessageStatus
    append_result: AppendMessageResult | None = None
    remark: str = ""
    # a timer message's handle for RECALL_MESSAGE (the send response's recallHandle)
    recall_handle: str | None = None

    @property
    def is_ok(self) -> bool:
        return self.status.is_ok


class GetMessageStatus(enum.Enum):
    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


@dataclass(slots=True)
class GetMessageResult:
    """Messages of one pull as raw CommitLog record slices (never re-encoded).

    The memoryviews stay valid until :meth:`release` (call it once the bytes are sent, or use
    ``with``); until then the files they come from are not unmapped.
    """

    status: GetMessageStatus
    next_begin_offset: int = 0
    min_offset: int = 0
    max_offset: int = 0
    messages: list[memoryview] = field(default_factory=list)
    queue_offsets: list[int] = field(default_factory=list)
    buffer_total_size: int = 0
    suggest_pulling_from_slave: bool = False
    _releasers: list[Callable[[], None]] = field(default_factory=list, repr=False)

    @property
    def message_count(self) -> int:
        return len(self.messages)

    def body(self) -> bytes:
        """All records back to back: the body of a PULL_MESSAGE response."""
        return b"".join(self.messages)

    def release(self) -> None:
        """Let go of the slices and the file references behind them (idempotent)."""
        for view in self.messages:
            view.release()
        self.messages.clear()
        releasers, self._releasers = self._releasers, []
        for release in releasers:
            release()

    def __enter__(self) -> GetMessageResult:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


@dataclass(slots=True)
class QueryMessageResult:
    """Offsets found by key (verified against the stored KEYS/UNIQ_KEY) and index freshness."""

    phy_offsets: list[int] = field(default_factory=list)
    messages: list[MessageExt] = field(default_factory=list)
    index_last_update_timestamp: int = 0
    index_last_update_phyoffset: int = 0
