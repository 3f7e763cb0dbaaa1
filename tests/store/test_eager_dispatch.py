"""MessageStore.dispatch_eagerly_when: while the predicate holds, a put's record is in its
ConsumeQueue (and the listeners heard of it) before the put returns; otherwise the reput task
dispatches the puts of a loop turn together, one turn later."""

from __future__ import annotations

from pathlib import Path

from ferrymq.store.results import PutMessageStatus

from .helpers import msg, open_store, small_config, wait_dispatched


async def test_put_dispatches_inline_only_while_wanted(tmp_path: Path) -> None:
    store = await open_store(small_config(tmp_path))
    heard: list[int] = []
    store.add_dispatch_listener(lambda topic, queue_id, offset, *_: heard.append(offset))
    wanted = [True]
    store.dispatch_eagerly_when(lambda: wanted[0])
    try:
        r = await store.put_message(msg(body=b"a"))
        assert r.status is PutMessageStatus.PUT_OK
        assert store.get_max_offset_in_queue("T", 0) == 1 and heard == [0]
        assert store.dispatch_behind_bytes() == 0

        wanted[0] = False
        r = await store.put_message(msg(body=b"b"))
        assert r.status is PutMessageStatus.PUT_OK
        assert store.get_max_offset_in_queue("T", 0) == 1  # the reput task's turn comes later
        await wait_dispatched(store)
        assert store.get_max_offset_in_queue("T", 0) == 2 and heard == [0, 1]

        wanted[0] = True
        for body in (b"c", b"d", b"e"):
            await store.put_message(msg(body=body))
        assert store.get_max_offset_in_queue("T", 0) == 5 and heard == [0, 1, 2, 3, 4]
    finally:
        await store.shutdown()


async def test_a_failing_inline_dispatch_leaves_the_put_ok(tmp_path: Path) -> None:
    store = await open_store(small_config(tmp_path))
    store.dispatch_eagerly_when(lambda: True)
    original = store.reput.do_reput

    # fault injection (a stand-in for a dispatcher bug): the first inline round raises
    def failing_once(max_records: int | None = None, *, notify: bool = True) -> int:
        store.reput.do_reput = original  # type: ignore[method-assign]
        raise RuntimeError("dispatcher bug")

    store.reput.do_reput = failing_once  # type: ignore[method-assign]
    try:
        r = await store.put_message(msg(body=b"a"))
        assert r.status is PutMessageStatus.PUT_OK  # stored; dispatch is retried by the task
        await wait_dispatched(store)
        assert store.get_max_offset_in_queue("T", 0) == 1
    finally:
        await store.shutdown()
