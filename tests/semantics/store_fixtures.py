"""A real MessageStore on tmp_path with tiny files and short delay levels, for service tests."""

from __future__ import annotations

import time
from pathlib import Path

from ferrymq.message import MessageInner
from ferrymq.store.config import MessageStoreConfig
from ferrymq.store.message_store import MessageStore
from ferrymq.store.record import decode_messages

STORE_HOST = ("127.0.0.1", 10911)


def store_config(root: Path, delay_levels: str = "1s 1s 2s") -> MessageStoreConfig:
    return MessageStoreConfig.model_validate(
        {
            "storePathRootDir": str(root),
            "mappedFileSizeCommitLog": 1024 * 1024,
            "mappedFileSizeConsumeQueue": 20 * 1000,
            "messageDelayLevel": delay_levels,
            "maxHashSlotNum": 1000,
            "maxIndexNum": 4000,
        }
    )


async def started_store(root: Path, delay_levels: str = "1s 1s 2s") -> MessageStore:
    store = MessageStore(store_config(root, delay_levels), STORE_HOST)
    await store.start()
    return store


def inner(
    topic: str, body: bytes, props: dict[str, str] | None = None, qid: int = 0
) -> MessageInner:
    return MessageInner.create(
        topic, qid, body, props or {}, born_timestamp=int(time.time() * 1000)
    )


def read_all(store: MessageStore, topic: str, queue_id: int = 0) -> list:  # type: ignore[type-arg]
    """Every message of a queue, decoded (bodies inflated)."""
    out = []
    offset = max(store.get_min_offset_in_queue(topic, queue_id), 0)
    while offset < store.get_max_offset_in_queue(topic, queue_id):
        with store.get_message("test", topic, queue_id, offset, 32) as result:
            if not result.messages:
                break
            out.extend(decode_messages(result.body()))
            offset = result.next_begin_offset
    return out
