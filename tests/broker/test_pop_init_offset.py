"""The first-pop offset decision (upstream PopMessageProcessor.getInitOffset) over a stand-in store:
a plain object answering the three lookups the decision makes, so each branch can be reached
(a real store cannot drop message 0 out of memory on demand)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from ferrymq.broker.pop.pop_processor import initial_pop_offset


@dataclass
class QueueLookups:
    min_offset: int
    max_offset: int
    zero_in_memory: bool

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return self.min_offset

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return self.max_offset

    def check_in_mem_by_consume_offset(self, topic: str, queue_id: int, cq_offset: int) -> bool:
        return cq_offset == 0 and self.zero_in_memory


@pytest.mark.parametrize(
    ("lookups", "from_min", "check_in_mem", "expected"),
    [
        (QueueLookups(5, 10, False), True, True, 5),  # CONSUME_FROM_MIN / retry topic: the start
        (QueueLookups(0, 10, True), False, True, 0),  # queue starts at 0, message 0 in memory
        (QueueLookups(0, 10, False), False, True, 9),  # message 0 no longer in memory: the last
        (QueueLookups(3, 10, True), False, True, 9),  # queue no longer starts at 0
        (QueueLookups(0, 10, True), False, False, 9),  # initPopOffsetByCheckMsgInMem=false
        (QueueLookups(0, 0, False), False, True, 0),  # empty queue: never negative
    ],
)
def test_initial_pop_offset(
    lookups: QueueLookups, from_min: bool, check_in_mem: bool, expected: int
) -> None:
    got = initial_pop_offset(lookups, "T", 0, from_min=from_min, check_in_mem=check_in_mem)  # type: ignore[arg-type]
    assert got == expected
