"""The confirm offset saved in the checkpoint (upstream StoreCheckpoint.confirmPhyOffset): a
store that holds unconfirmed records back (controller mode, allAckInSyncStateSet) dispatches,
after a restart, only up to the saved offset until the HA layer sets the live one."""

from __future__ import annotations

import struct
from pathlib import Path

from ferrymq.store.checkpoint import CHECKPOINT_FILE_SIZE, StoreCheckpoint
from ferrymq.store.message_store import MessageStore
from ferrymq.store.record import decode_message_ext
from ferrymq.store.results import GetMessageStatus

from store.helpers import msg, open_store, small_config, wait_until


def bodies(store: MessageStore) -> list[bytes]:
    result = store.get_message("g", "T", 0, 0, 32)
    try:
        if result.status is not GetMessageStatus.FOUND:
            return []
        return [decode_message_ext(bytes(m), 0).body for m in result.messages]
    finally:
        result.release()


def test_checkpoint_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint"
    cp = StoreCheckpoint(path)
    cp.physic_msg_timestamp = 111
    cp.logics_msg_timestamp = 222
    cp.index_msg_timestamp = 333
    cp.confirm_phy_offset = 123_456_789_012
    cp.flush()
    assert path.stat().st_size == CHECKPOINT_FILE_SIZE
    again = StoreCheckpoint(path)
    assert again.values == cp.values
    assert again.confirm_phy_offset == 123_456_789_012


def test_an_old_checkpoint_without_the_confirm_offset_loads(tmp_path: Path) -> None:
    # a page as written before the confirm offset was saved: the field is 0
    path = tmp_path / "checkpoint"
    page = bytearray(CHECKPOINT_FILE_SIZE)
    struct.pack_into(">4q", page, 0, 111, 222, 333, 0)
    path.write_bytes(bytes(page))
    cp = StoreCheckpoint(path)
    assert (cp.physic_msg_timestamp, cp.logics_msg_timestamp, cp.index_msg_timestamp) == (
        111,
        222,
        333,
    )
    assert cp.confirm_phy_offset == 0
    # a short file holding only the timestamps loads them too (the rest reads 0)
    path.write_bytes(struct.pack(">3q", 7, 8, 9))
    cp = StoreCheckpoint(path)
    assert (cp.physic_msg_timestamp, cp.logics_msg_timestamp, cp.index_msg_timestamp) == (7, 8, 9)
    assert cp.confirm_phy_offset == 0
    cp.confirm_phy_offset = 42
    cp.flush()
    assert StoreCheckpoint(path).confirm_phy_offset == 42
    assert StoreCheckpoint(path).index_msg_timestamp == 9


async def _write_four_confirm_two(root: Path) -> list[int]:
    """A held-back store: four records written, the first two confirmed; closed."""
    store = await open_store(small_config(root), hold_unconfirmed=True)
    try:
        limit = {"offset": 0}
        store.set_confirm_offset_source(lambda: limit["offset"])
        ends = []
        for i in range(4):
            put = await store.put_message(msg(body=f"m{i}".encode()))
            assert put.append_result is not None
            ends.append(put.append_result.wrote_offset + put.append_result.wrote_bytes)
        limit["offset"] = ends[1]
        store.reput.wakeup()
        await wait_until(lambda: store.get_max_offset_in_queue("T", 0) == 2)
        # the periodic ConsumeQueue flush saves it, not only the shutdown
        path = store.config.checkpoint_path
        await wait_until(lambda: StoreCheckpoint(path).confirm_phy_offset == ends[1])
    finally:
        await store.shutdown()
    return ends


async def test_a_restarted_store_dispatches_only_up_to_the_saved_confirm_offset(
    tmp_path: Path,
) -> None:
    ends = await _write_four_confirm_two(tmp_path)
    assert StoreCheckpoint(small_config(tmp_path).checkpoint_path).confirm_phy_offset == ends[1]
    store = await open_store(small_config(tmp_path), hold_unconfirmed=True)
    try:
        assert store.max_phy_offset == ends[3]  # the unconfirmed records are kept
        assert store.confirm_offset == ends[1]
        assert store.get_max_offset_in_queue("T", 0) == 2
        assert bodies(store) == [b"m0", b"m1"]
        # until the HA layer moves it (a master's notice, or the elected master's own rule)
        store.set_confirm_offset_source(lambda: ends[2])
        await wait_until(lambda: store.get_max_offset_in_queue("T", 0) == 3)
        assert bodies(store) == [b"m0", b"m1", b"m2"]
    finally:
        await store.shutdown()
    # saved again at shutdown: the next start holds at the new offset
    store = await open_store(small_config(tmp_path), hold_unconfirmed=True)
    try:
        assert store.confirm_offset == ends[2]
        assert store.get_max_offset_in_queue("T", 0) == 3
    finally:
        await store.shutdown()
    # a store that does not hold back (classic mode) serves everything, as before
    store = await open_store(small_config(tmp_path))
    try:
        await wait_until(lambda: store.get_max_offset_in_queue("T", 0) == 4)
    finally:
        await store.shutdown()


async def test_the_saved_confirm_offset_is_capped_at_the_recovered_end(tmp_path: Path) -> None:
    ends = await _write_four_confirm_two(tmp_path)
    path = small_config(tmp_path).checkpoint_path
    cp = StoreCheckpoint(path)
    cp.confirm_phy_offset = ends[3] + 10_000  # beyond what the CommitLog holds (a lost tail)
    cp.flush()
    store = await open_store(small_config(tmp_path), hold_unconfirmed=True)
    try:
        assert store.confirm_offset == store.max_phy_offset == ends[3]
        assert store.get_max_offset_in_queue("T", 0) == 4
        assert store.recovery_stats["savedConfirmOffset"] == str(ends[3])
    finally:
        await store.shutdown()


async def test_an_old_checkpoint_holds_back_what_the_queues_lack(tmp_path: Path) -> None:
    # a checkpoint from before the confirm offset was saved (0): a held-back store serves what
    # its queues held already and dispatches nothing more until it learns the confirm offset
    ends = await _write_four_confirm_two(tmp_path)
    path = small_config(tmp_path).checkpoint_path
    cp = StoreCheckpoint(path)
    cp.confirm_phy_offset = 0
    cp.flush()
    store = await open_store(small_config(tmp_path), hold_unconfirmed=True)
    try:
        assert store.get_max_offset_in_queue("T", 0) == 2
        assert bodies(store) == [b"m0", b"m1"]
        store.set_confirm_offset_source(None)  # what an elected replica does
        await wait_until(lambda: store.get_max_offset_in_queue("T", 0) == 4)
        assert store.confirm_offset == ends[3]
    finally:
        await store.shutdown()
