"""Write a real store with ferrymq's own MessageStore and remember exactly what went in."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ferrymq.message import MessageInner
from ferrymq.store.config import MessageStoreConfig
from ferrymq.store.message_store import MessageStore

STORE_HOST = ("127.0.0.1", 10911)


@dataclass(frozen=True)
class Put:
    """What one put produced: enough to check every row of the data sources."""

    topic: str
    queue_id: int
    queue_offset: int
    physical_offset: int
    store_timestamp: int
    body_size: int
    tags: str | None
    keys: tuple[str, ...]
    uniq_key: str | None


def store_config(root: Path, commit_log_file: int = 64 * 1024, **extra: Any) -> MessageStoreConfig:
    values: dict[str, Any] = {
        "storePathRootDir": str(root),
        "mappedFileSizeCommitLog": commit_log_file,
        "mappedFileSizeConsumeQueue": 20 * 100,
        "flushIntervalCommitLog": 50,
        "flushIntervalConsumeQueue": 50,
    }
    values.update(extra)
    return MessageStoreConfig.model_validate(values)


def message(i: int, topic: str, queue_id: int, body_size: int) -> MessageInner:
    props: dict[str, str] = {"UNIQ_KEY": f"U{i:08d}"}
    if i % 3:
        props["TAGS"] = f"tag{i % 5}"
    if i % 4:
        props["KEYS"] = f"k{i} order-{i % 7}"
    return MessageInner.create(
        topic,
        queue_id,
        bytes([i % 251]) * body_size,
        props,
        born_timestamp=int(time.time() * 1000),
        born_host=("127.0.0.1", 40000),
    )


async def _write(config: MessageStoreConfig, plan: list[tuple[str, int, int]]) -> list[Put]:
    store = MessageStore(config, STORE_HOST)
    await store.start()
    puts: list[Put] = []
    try:
        for i, (topic, qid, size) in enumerate(plan):
            m = message(i, topic, qid, size)
            res = await store.put_message(m)
            assert res.is_ok and res.append_result is not None, res
            a = res.append_result
            puts.append(
                Put(
                    topic,
                    qid,
                    a.queue_offset,
                    a.wrote_offset,
                    a.store_timestamp,
                    size,
                    m.properties.get("TAGS"),
                    tuple(m.properties.get("KEYS", "").split()),
                    m.properties["UNIQ_KEY"],
                )
            )
        deadline = time.monotonic() + 30
        while store.dispatch_behind_bytes() > 0:
            if time.monotonic() > deadline:
                raise AssertionError("dispatch did not catch up")
            await asyncio.sleep(0.01)
    finally:
        await store.shutdown()
    return puts


def write_store(root: Path, plan: list[tuple[str, int, int]], **config: Any) -> list[Put]:
    """Put ``(topic, queueId, bodySize)`` messages in order, shut down, return what was stored."""
    return asyncio.run(_write(store_config(root, **config), plan))


def write_mixed_layout_commit_log(root: Path, count: int, file_size: int = 64 * 1024) -> list[int]:
    """One CommitLog file of ``count`` records cycling through magic codes v1 and v2 and IPv4 and
    IPv6 hosts (ferrymq itself writes only v1; upstream writes v2 for long topic names), ended by
    a blank record, encoded with the store's own codec. Returns the records' positions."""
    from ferrymq.message import encode_properties, pack_host
    from ferrymq.store import record

    layouts = [
        (record.MESSAGE_MAGIC_CODE, "10.1.2.3"),
        (record.MESSAGE_MAGIC_CODE_V2, "10.1.2.3"),
        (record.MESSAGE_MAGIC_CODE_V2, "2001:db8::17"),
        (record.MESSAGE_MAGIC_CODE, "2001:db8::17"),
    ]
    buf = bytearray(file_size)
    positions: list[int] = []
    pos = 0
    for i in range(count):
        magic, host = layouts[i % len(layouts)]
        positions.append(pos)
        pos += record.encode_record_into(
            buf,
            pos,
            queue_id=0,
            flag=0,
            queue_offset=i,
            physical_offset=pos,
            sys_flag=0,
            born_timestamp=1_700_000_000_000 + i,
            born_ip=pack_host(host),
            born_port=40000,
            store_timestamp=1_700_000_000_500 + i,
            store_ip=pack_host(host),
            store_port=10911,
            reconsume_times=0,
            prepared_transaction_offset=0,
            body=bytes([i % 251]) * (100 + (i * 37) % 900),
            topic=b"MixedT",
            properties=encode_properties({"UNIQ_KEY": f"U{i:08d}"}).encode(),
            magic=magic,
        )
    record.encode_blank_into(buf, pos, file_size - pos)
    commit_log = root / "commitlog"
    commit_log.mkdir(parents=True)
    (commit_log / f"{0:020d}").write_bytes(buf)
    return positions
