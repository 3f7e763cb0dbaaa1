"""ProcessQueue: a consumer's in-flight messages of one queue (upstream ProcessQueue).

Pulled messages wait here, ordered by queue offset, until the consume service reports them done.
Two facts come out of it:

- the offset to commit: the smallest offset still in flight, or ``max pulled + 1`` when none is
  (seeds-digest CC6: holding [10, 30, 40, 50] and finishing 30 and 40 leaves the commit at 10);
- flow control: the pull service stops pulling a queue whose cache holds too many messages
  (``pullThresholdForQueue`` 1000), too many bytes (``pullThresholdSizeForQueue`` 100 MiB) or too
  wide an offset span (``consumeConcurrentlyMaxSpan`` 2000), and retries after 50 ms.

``dropped`` is set when a rebalance gives the queue away: results for a dropped queue are ignored.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field

from ferrymq.message import MessageExt

PULL_THRESHOLD_FOR_QUEUE = 1000
PULL_THRESHOLD_SIZE_FOR_QUEUE_MIB = 100
CONSUME_CONCURRENTLY_MAX_SPAN = 2000
FLOW_CONTROL_DELAY_S = 0.05


@dataclass(frozen=True, slots=True)
class FlowLimits:
    max_count: int = PULL_THRESHOLD_FOR_QUEUE
    max_size_bytes: int = PULL_THRESHOLD_SIZE_FOR_QUEUE_MIB * 1024 * 1024
    max_span: int = CONSUME_CONCURRENTLY_MAX_SPAN


class FlowControl(enum.Enum):
    NONE = "none"
    COUNT = "cached message count"
    SIZE = "cached message size"
    SPAN = "offset span"


@dataclass
class ProcessQueue:
    # offset -> message, kept in ascending offset order (pulls of one queue arrive in order)
    messages: dict[int, MessageExt] = field(default_factory=dict)
    msg_size: int = 0
    queue_offset_max: int = -1
    dropped: bool = False
    last_pull_monotonic: float = 0.0
    last_consume_monotonic: float = 0.0

    @property
    def msg_count(self) -> int:
        return len(self.messages)

    def put_messages(self, msgs: Iterable[MessageExt]) -> int:
        """Add pulled messages; returns how many were new (a re-pulled offset is not counted)."""
        # locals in the loop (once per pulled message), attributes written once per pull
        messages = self.messages
        top = self.queue_offset_max
        added = size = 0
        out_of_order = False
        for msg in msgs:
            offset = msg.queue_offset
            if offset in messages:
                continue
            if offset < top:
                out_of_order = True
            else:
                top = offset
            messages[offset] = msg
            size += len(msg.body)
            added += 1
        self.msg_size += size
        self.queue_offset_max = top
        if out_of_order:
            self.messages = dict(sorted(messages.items()))
        return added

    def remove_messages(self, msgs: Iterable[MessageExt]) -> int:
        """Drop finished messages; returns the offset to commit, or -1 if nothing was in flight."""
        messages = self.messages
        if not messages:
            return -1
        size = 0
        pop = messages.pop
        for msg in msgs:
            removed = pop(msg.queue_offset, None)
            if removed is not None:
                size += len(removed.body)
        self.msg_size -= size
        return self.commit_offset()

    def commit_offset(self) -> int:
        """Smallest in-flight offset, or one past the largest pulled when nothing is in flight."""
        if self.messages:
            return next(iter(self.messages))
        return self.queue_offset_max + 1

    def max_span(self) -> int:
        if not self.messages:
            return 0
        return self.queue_offset_max - next(iter(self.messages))

    def flow_control(self, limits: FlowLimits) -> FlowControl:
        """Why the next pull must wait, or NONE (pure: reads the cache only)."""
        if self.msg_count > limits.max_count:
            return FlowControl.COUNT
        if self.msg_size > limits.max_size_bytes:
            return FlowControl.SIZE
        if self.max_span() > limits.max_span:
            return FlowControl.SPAN
        return FlowControl.NONE

    def clear(self) -> None:
        self.messages.clear()
        self.msg_size = 0
