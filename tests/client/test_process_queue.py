"""ProcessQueue: the lowest-unconsumed commit rule and the three flow-control limits."""

from __future__ import annotations

from ferrymq.client.process_queue import FlowControl, FlowLimits, ProcessQueue
from ferrymq.message import MessageExt
from hypothesis import given
from hypothesis import strategies as st


def msg(offset: int, size: int = 10) -> MessageExt:
    return MessageExt(topic="T", body=b"x" * size, queue_offset=offset)


def test_commit_offset_is_lowest_in_flight() -> None:
    pq = ProcessQueue()
    msgs = {o: msg(o) for o in (10, 30, 40, 50)}
    pq.put_messages(msgs.values())
    assert pq.remove_messages([msgs[30], msgs[40]]) == 10
    assert pq.remove_messages([msgs[10]]) == 50
    assert pq.remove_messages([msgs[50]]) == 51
    assert pq.msg_size == 0
    assert pq.remove_messages([msgs[50]]) == -1


def test_repulled_offsets_are_not_counted_twice() -> None:
    pq = ProcessQueue()
    assert pq.put_messages([msg(1), msg(2)]) == 2
    assert pq.put_messages([msg(2), msg(3)]) == 1
    assert pq.msg_count == 3 and pq.msg_size == 30


def test_out_of_order_put_keeps_ascending_order() -> None:
    pq = ProcessQueue()
    pq.put_messages([msg(5), msg(6)])
    pq.put_messages([msg(2)])
    assert list(pq.messages) == [2, 5, 6]
    assert pq.commit_offset() == 2


def test_flow_control_count_size_span() -> None:
    limits = FlowLimits(max_count=3, max_size_bytes=100, max_span=10)
    pq = ProcessQueue()
    pq.put_messages([msg(0), msg(1), msg(2)])
    assert pq.flow_control(limits) is FlowControl.NONE
    pq.put_messages([msg(3)])
    assert pq.flow_control(limits) is FlowControl.COUNT

    big = ProcessQueue()
    big.put_messages([msg(0, 101)])
    assert big.flow_control(limits) is FlowControl.SIZE

    wide = ProcessQueue()
    wide.put_messages([msg(0), msg(11)])
    assert wide.flow_control(limits) is FlowControl.SPAN
    wide.remove_messages([msg(0)])
    assert wide.flow_control(limits) is FlowControl.NONE


def test_default_limits_are_upstream() -> None:
    limits = FlowLimits()
    assert (limits.max_count, limits.max_size_bytes, limits.max_span) == (
        1000,
        100 * 1024 * 1024,
        2000,
    )


@given(
    offsets=st.lists(st.integers(0, 500), min_size=1, max_size=60, unique=True).map(sorted),
    data=st.data(),
)
def test_commit_never_passes_an_unconsumed_message(offsets: list[int], data: st.DataObject) -> None:
    pq = ProcessQueue()
    msgs = [msg(o) for o in offsets]
    pq.put_messages(msgs)
    done = data.draw(st.lists(st.sampled_from(msgs), unique_by=lambda m: m.queue_offset))
    commit = pq.remove_messages(done)
    pending = [m.queue_offset for m in msgs if m not in done]
    if pending:
        assert commit == min(pending)
    else:
        assert commit == max(offsets) + 1
