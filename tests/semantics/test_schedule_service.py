"""ScheduleMessageService over a real MessageStore: due delivery, order, restart resume."""

from __future__ import annotations

import time
from pathlib import Path

import orjson
from ferrymq.broker.schedule import SCHEDULE_TOPIC, ScheduleMessageService, to_schedule_topic
from ferrymq.message import MessageConst
from polling import wait_for

from semantics.store_fixtures import inner, read_all, started_store


async def test_delayed_messages_arrive_in_their_topic_after_their_level(tmp_path: Path) -> None:
    store = await started_store(tmp_path / "s", "1s 2s")
    service = ScheduleMessageService(
        store, [1000, 2000], tmp_path / "s" / "config" / "delayOffset.json", flush_interval_s=0.2
    )
    await service.start()
    try:
        sent_at = int(time.time() * 1000)
        for i, level in enumerate([1, 2, 1, 7]):
            msg = inner("Orders", f"m{i}".encode(), {"DELAY": str(level), "TAGS": "t"}, qid=1)
            put = await store.put_message(to_schedule_topic(msg, service.max_level))
            assert put.is_ok
        # level 7 is clamped to the last configured level (2)
        await wait_for(
            lambda: (
                store.get_max_offset_in_queue(SCHEDULE_TOPIC, 0) == 2
                and store.get_max_offset_in_queue(SCHEDULE_TOPIC, 1) == 2
            ),
            5,
            "dispatch to the schedule queues",
        )
        assert read_all(store, "Orders", 1) == []
        await wait_for(lambda: len(read_all(store, "Orders", 1)) == 4, 8, "4 deliveries")
        got = read_all(store, "Orders", 1)
        assert [m.body for m in got[:2]] == [b"m0", b"m2"]
        assert sorted(m.body for m in got[2:]) == [b"m1", b"m3"]
        for m in got:
            # kept on delivery, as Apache RocketMQ 5.4.0 does (tests/interop)
            assert MessageConst.PROPERTY_DELAY_TIME_LEVEL in m.properties
            assert m.properties["TAGS"] == "t" and m.queue_id == 1
            level_ms = 1000 if m.body in (b"m0", b"m2") else 2000
            assert m.store_timestamp >= sent_at + level_ms - 50
        await wait_for(lambda: (tmp_path / "s" / "config" / "delayOffset.json").exists(), 5)
    finally:
        await service.shutdown()
        await store.shutdown()
    saved = orjson.loads((tmp_path / "s" / "config" / "delayOffset.json").read_bytes())
    assert saved == {"offsetTable": {"1": 2, "2": 2}}


async def test_progress_survives_restart_without_redelivery(tmp_path: Path) -> None:
    root = tmp_path / "s"
    offsets = root / "config" / "delayOffset.json"
    store = await started_store(root, "1s")
    service = ScheduleMessageService(store, [1000], offsets)
    await service.start()
    await store.put_message(to_schedule_topic(inner("T", b"first", {"DELAY": "1"}), 1))
    await wait_for(lambda: len(read_all(store, "T")) == 1, 8, "first delivery")
    await service.shutdown()
    # a message written while the service is down is delivered after the restart
    await store.put_message(to_schedule_topic(inner("T", b"second", {"DELAY": "1"}), 1))
    await store.shutdown()

    store = await started_store(root, "1s")
    service = ScheduleMessageService(store, [1000], offsets)
    await service.start()
    try:
        await wait_for(lambda: len(read_all(store, "T")) >= 2, 8, "second delivery")
        await wait_for(lambda: service.offsets.get(1) == 2, 5)
        assert [m.body for m in read_all(store, "T")] == [b"first", b"second"]
    finally:
        await service.shutdown()
        await store.shutdown()


async def test_corrupt_offset_file_falls_back_to_backup_or_refuses(tmp_path: Path) -> None:
    from ferrymq.broker.schedule import load_delay_offsets

    path = tmp_path / "delayOffset.json"
    path.write_bytes(b"{not json")
    try:
        load_delay_offsets(path)
    except ValueError as exc:
        assert "unreadable" in str(exc)
    else:
        raise AssertionError("a corrupt delayOffset.json must not silently reset progress")
    path.with_name("delayOffset.json.bak").write_bytes(b'{"offsetTable":{"3":7}}')
    assert load_delay_offsets(path) == {3: 7}
