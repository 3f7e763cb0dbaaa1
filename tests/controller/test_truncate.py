"""A demoted master's divergent tail is cut while its store is closed: the real store, files on
disk. After the cut and a restart the CommitLog ends at the cut, the ConsumeQueues hold exactly
the messages before it, and new writes continue the queues from there."""

from __future__ import annotations

from pathlib import Path

from ferrymq.ha.truncate import truncate_commit_log
from ferrymq.store.results import PutMessageStatus
from store.helpers import msg, open_store, read_queue, small_config, wait_dispatched


async def test_cut_tail_is_gone_after_restart_and_queues_continue(tmp_path: Path) -> None:
    config = small_config(tmp_path / "store")
    store = await open_store(config)
    kept = 0
    for i in range(40):  # several 16 KiB files
        result = await store.put_message(msg(queue_id=i % 2, body=f"kept-{i}".encode() * 40))
        assert result.status is PutMessageStatus.PUT_OK
        kept += 1
    cut = store.max_phy_offset
    for i in range(100):  # the tail the new master never got: crosses into later files
        await store.put_message(msg(queue_id=i % 2, body=f"lost-{i}".encode() * 40))
    await wait_dispatched(store)
    assert store.max_phy_offset > cut + 16 * 1024
    await store.shutdown()

    truncate_commit_log(config, cut)

    store = await open_store(config)
    try:
        await wait_dispatched(store)
        assert store.max_phy_offset == cut
        bodies = [raw for q in (0, 1) for _, raw in read_queue(store, "T", q)]
        assert len(bodies) == kept
        assert not any(b"lost-" in raw for raw in bodies)
        assert store.get_max_offset_in_queue("T", 0) == 20
        result = await store.put_message(msg(queue_id=0, body=b"after the cut"))
        assert result.status is PutMessageStatus.PUT_OK
        assert result.append_result is not None
        assert result.append_result.queue_offset == 20
        assert result.append_result.wrote_offset == cut
    finally:
        await store.shutdown()


async def test_cut_at_the_end_changes_nothing(tmp_path: Path) -> None:
    config = small_config(tmp_path / "store")
    store = await open_store(config)
    for i in range(5):
        await store.put_message(msg(body=f"m{i}".encode()))
    end = store.max_phy_offset
    await store.shutdown()
    truncate_commit_log(config, end)
    store = await open_store(config)
    try:
        assert store.max_phy_offset == end
        await wait_dispatched(store)
        assert len(read_queue(store, "T", 0)) == 5
    finally:
        await store.shutdown()
