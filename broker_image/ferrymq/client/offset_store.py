"""Consume progress per queue (upstream OffsetStore, RemoteBrokerOffsetStore, LocalFileOffsetStore).

Clustering groups keep progress on the broker (QUERY/UPDATE_CONSUMER_OFFSET); broadcasting
consumers keep it in a local file, since every consumer has its own. Both cache offsets in memory:
the consume service updates the cache after every batch (``increase_only`` so a late, older result
cannot move progress back), and the push consumer persists the cache every 5 s
(``persistConsumerOffsetInterval``) and on shutdown.

The broker or file I/O sits behind :class:`OffsetBackend`, so the cache rules are tested alone.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import orjson

from ferrymq.client.allocate import MessageQueue

if TYPE_CHECKING:
    from ferrymq.client.instance import ClientInstance

log = logging.getLogger(__name__)

PERSIST_CONSUMER_OFFSET_INTERVAL_S = 5.0


class ReadOffsetType(enum.Enum):
    READ_FROM_MEMORY = "memory"
    READ_FROM_STORE = "store"
    MEMORY_FIRST_THEN_STORE = "memory-first"


class OffsetBackend(Protocol):
    async def load(self, mq: MessageQueue) -> int:
        """The stored offset, -1 when there is none."""
        ...

    async def save(self, offsets: dict[MessageQueue, int]) -> None:
        """Persist these offsets (called with a snapshot; raising leaves the cache as it is)."""
        ...


@dataclass
class OffsetStore:
    backend: OffsetBackend
    offsets: dict[MessageQueue, int] = field(default_factory=dict)

    def update_offset(self, mq: MessageQueue, offset: int, increase_only: bool = True) -> None:
        if offset < 0:
            return
        old = self.offsets.get(mq)
        if old is None or not increase_only or offset > old:
            self.offsets[mq] = offset

    def memory_offset(self, mq: MessageQueue) -> int:
        """The cached offset, -1 when there is none (``READ_FROM_MEMORY`` without a coroutine)."""
        return self.offsets.get(mq, -1)

    async def read_offset(self, mq: MessageQueue, kind: ReadOffsetType) -> int:
        """-1 when unknown; -2 and below never come from here (the broker answers >= 0 or fails)."""
        if kind is not ReadOffsetType.READ_FROM_STORE:
            cached = self.offsets.get(mq)
            if cached is not None:
                return cached
            if kind is ReadOffsetType.READ_FROM_MEMORY:
                return -1
        stored = await self.backend.load(mq)
        if stored >= 0:
            self.update_offset(mq, stored, increase_only=False)
        return stored

    async def persist_all(self, mqs: Iterable[MessageQueue]) -> None:
        """Persist the cached offsets of ``mqs`` (the queues this consumer still owns)."""
        snapshot = {mq: self.offsets[mq] for mq in mqs if mq in self.offsets}
        if snapshot:
            await self.backend.save(snapshot)

    async def persist(self, mq: MessageQueue) -> None:
        if mq in self.offsets:
            await self.backend.save({mq: self.offsets[mq]})

    def remove_offset(self, mq: MessageQueue) -> None:
        self.offsets.pop(mq, None)

    def clone_offsets(self, topic: str | None = None) -> dict[MessageQueue, int]:
        return {mq: o for mq, o in self.offsets.items() if topic is None or mq.topic == topic}


class LocalFileBackend:
    """Broadcasting: ``<dir>/<clientId>/<group>/offsets.json``, written to a temp name then renamed."""

    def __init__(self, directory: Path, client_id: str, group: str) -> None:
        safe_client = client_id.replace("@", "_").replace(":", "_")
        self.path = directory / safe_client / group / "offsets.json"
        self._table: dict[MessageQueue, int] | None = None

    def _read(self) -> dict[MessageQueue, int]:
        if self._table is None:
            table: dict[MessageQueue, int] = {}
            if self.path.exists():
                try:
                    raw = orjson.loads(self.path.read_bytes())
                    for row in raw.get("offsetTable", []):
                        mq = MessageQueue(
                            str(row["topic"]), str(row["brokerName"]), int(row["queueId"])
                        )
                        table[mq] = int(row["offset"])
                except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
                    # a corrupt progress file must not stop the consumer: start over and say so
                    log.error(
                        "offset file %s is unreadable (%s); starting without it", self.path, exc
                    )
            self._table = table
        return self._table

    async def load(self, mq: MessageQueue) -> int:
        table = await asyncio.to_thread(self._read)
        return table.get(mq, -1)

    async def save(self, offsets: dict[MessageQueue, int]) -> None:
        table = await asyncio.to_thread(self._read)
        table.update(offsets)
        rows = [
            {"topic": mq.topic, "brokerName": mq.broker_name, "queueId": mq.queue_id, "offset": o}
            for mq, o in sorted(table.items())
        ]
        data = orjson.dumps({"offsetTable": rows}, option=orjson.OPT_INDENT_2)
        await asyncio.to_thread(self._write, data)

    def _write(self, data: bytes) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)


class BrokerOffsetBackend:
    """Clustering progress on the broker: QUERY/UPDATE_CONSUMER_OFFSET on the queue's master."""

    def __init__(self, instance: ClientInstance, group: str) -> None:
        self.instance = instance
        self.group = group

    async def load(self, mq: MessageQueue) -> int:
        addr = await self.instance.find_broker_addr(mq.broker_name, mq.topic, master=False)
        return await self.instance.broker.query_consumer_offset(addr, self.group, mq)

    async def save(self, offsets: dict[MessageQueue, int]) -> None:
        for mq, offset in offsets.items():
            addr = self.instance.broker_addr(mq.broker_name)
            if addr is None:
                log.info("no master for %s; its offset %d waits for the next persist", mq, offset)
                continue
            await self.instance.broker.update_consumer_offset(addr, self.group, mq, offset)
