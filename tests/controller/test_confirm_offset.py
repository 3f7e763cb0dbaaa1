"""The confirm offset (upstream readUnCommitted=false in controller mode): the pure decision, the
HA stream's notice, and a store that dispatches, and so serves, only up to it."""

from __future__ import annotations

from pathlib import Path

import pytest
from ferrymq.ha.auto_switch import compute_confirm_offset
from ferrymq.ha.protocol import (
    FRAME_HEADER,
    ConfirmOffset,
    FrameReader,
    HAProtocolError,
    TransferFrame,
    encode_confirm_offset,
    encode_frame_header,
)
from ferrymq.store.message_store import MessageStore
from ferrymq.store.record import decode_message_ext
from ferrymq.store.results import GetMessageStatus
from store.helpers import msg, open_store, small_config, wait_until

# --- the decision -------------------------------------------------------------------------------


def confirm(
    members: set[int], acks: dict[int, int], *, all_ack: bool = True, previous: int = 0
) -> int:
    return compute_confirm_offset(
        master_id=1,
        master_max_offset=1000,
        sync_state_set=members,
        ack_offsets=acks,
        all_ack=all_ack,
        previous=previous,
    )


def test_the_smallest_ack_of_the_other_members() -> None:
    assert confirm({1, 2, 3}, {2: 700, 3: 900}) == 700


def test_a_replica_outside_the_set_does_not_hold_it_back() -> None:
    assert confirm({1, 2}, {2: 900, 3: 10}) == 900


def test_a_master_alone_in_its_set_confirms_its_whole_log() -> None:
    assert confirm({1}, {2: 10}) == 1000


def test_without_all_ack_everything_written_is_confirmed_as_upstream() -> None:
    assert confirm({1, 2, 3}, {2: 10, 3: 20}, all_ack=False) == 1000


def test_a_member_without_an_ack_holds_the_value() -> None:
    assert confirm({1, 2, 3}, {2: 900}, previous=400) == 400
    assert confirm({1, 2, 3}, {2: 900, 3: -1}, previous=400) == 400


def test_it_never_goes_back_and_never_passes_the_master_end() -> None:
    assert confirm({1, 2}, {2: 300}, previous=400) == 400
    assert confirm({1, 2}, {2: 5000}, previous=400) == 1000


# --- the HA stream ------------------------------------------------------------------------------


def test_confirm_notices_between_frames_in_stream_order() -> None:
    data = (
        encode_confirm_offset(0)
        + encode_frame_header(0, 3)
        + b"abc"
        + encode_confirm_offset(3)
        + encode_frame_header(3, 0)
    )
    reader = FrameReader(accept_confirm=True)
    frames = reader.feed(data[:7]) + reader.feed(data[7:])
    assert frames == [
        ConfirmOffset(0),
        TransferFrame(0, b"abc"),
        ConfirmOffset(3),
        TransferFrame(3, b""),
    ]


def test_a_slave_that_did_not_ask_refuses_a_confirm_notice() -> None:
    with pytest.raises(HAProtocolError):
        FrameReader().feed(encode_confirm_offset(5))


def test_a_bad_confirm_notice_is_a_broken_stream() -> None:
    with pytest.raises(HAProtocolError):
        FrameReader(accept_confirm=True).feed(FRAME_HEADER.pack(-2, 3) + b"abc")


# --- the store ----------------------------------------------------------------------------------


def bodies(store: MessageStore) -> list[bytes]:
    result = store.get_message("g", "T", 0, 0, 32)
    try:
        if result.status is not GetMessageStatus.FOUND:
            return []
        return [decode_message_ext(bytes(m), 0).body for m in result.messages]
    finally:
        result.release()


async def test_a_store_serves_only_up_to_its_confirm_offset(tmp_path: Path) -> None:
    store = await open_store(small_config(tmp_path))
    try:
        limit = {"offset": 0}
        store.set_confirm_offset_source(lambda: limit["offset"])
        ends = []
        for i in range(4):
            put = await store.put_message(msg(body=f"m{i}".encode()))
            assert put.append_result is not None
            ends.append(put.append_result.wrote_offset + put.append_result.wrote_bytes)
        # nothing is confirmed: not in the queue, its max offset 0, a pull finds nothing
        store.reput.do_reput()
        assert store.get_max_offset_in_queue("T", 0) == 0
        assert bodies(store) == []
        # two confirmed, and the third half (replicas ack raw bytes, not records)
        limit["offset"] = ends[1] + 10
        store.reput.wakeup()
        await wait_until(lambda: store.get_max_offset_in_queue("T", 0) == 2)
        assert bodies(store) == [b"m0", b"m1"]
        assert store.confirm_offset == ends[1] + 10
        # the half-confirmed record waited: it is not skipped as damaged
        assert store.corrupt_records_skipped == 0
        limit["offset"] = ends[3]
        store.reput.wakeup()
        await wait_until(lambda: store.get_max_offset_in_queue("T", 0) == 4)
        assert bodies(store) == [b"m0", b"m1", b"m2", b"m3"]
        assert store.corrupt_records_skipped == 0
    finally:
        await store.shutdown()


async def test_without_a_source_a_store_serves_everything_written(tmp_path: Path) -> None:
    store = await open_store(small_config(tmp_path))
    try:
        store.set_confirm_offset_source(lambda: 0)
        await store.put_message(msg(body=b"a"))
        store.set_confirm_offset_source(None)  # what a promoted replica does
        await wait_until(lambda: store.get_max_offset_in_queue("T", 0) == 1)
        assert bodies(store) == [b"a"]
        assert store.confirm_offset == store.max_phy_offset
    finally:
        await store.shutdown()
