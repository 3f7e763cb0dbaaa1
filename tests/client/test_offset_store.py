"""OffsetStore cache rules, with an in-memory backend (named as such) and the real local file backend."""

from __future__ import annotations

from pathlib import Path

from ferrymq.client.allocate import MessageQueue
from ferrymq.client.offset_store import LocalFileBackend, OffsetStore, ReadOffsetType

MQ = MessageQueue("T", "broker-a", 0)
MQ2 = MessageQueue("T", "broker-a", 1)


class InMemoryBackend:
    """Stands in for the broker's consumerOffset table (the broker path is covered by integration tests)."""

    def __init__(self) -> None:
        self.stored: dict[MessageQueue, int] = {}
        self.saves: list[dict[MessageQueue, int]] = []

    async def load(self, mq: MessageQueue) -> int:
        return self.stored.get(mq, -1)

    async def save(self, offsets: dict[MessageQueue, int]) -> None:
        self.saves.append(dict(offsets))
        self.stored.update(offsets)


async def test_increase_only_never_moves_back() -> None:
    store = OffsetStore(InMemoryBackend())
    store.update_offset(MQ, 10)
    store.update_offset(MQ, 5)
    assert await store.read_offset(MQ, ReadOffsetType.READ_FROM_MEMORY) == 10
    store.update_offset(MQ, 5, increase_only=False)
    assert await store.read_offset(MQ, ReadOffsetType.READ_FROM_MEMORY) == 5
    store.update_offset(MQ, -1, increase_only=False)
    assert await store.read_offset(MQ, ReadOffsetType.READ_FROM_MEMORY) == 5


async def test_read_kinds() -> None:
    backend = InMemoryBackend()
    backend.stored[MQ] = 42
    store = OffsetStore(backend)
    assert await store.read_offset(MQ, ReadOffsetType.READ_FROM_MEMORY) == -1
    assert await store.read_offset(MQ, ReadOffsetType.MEMORY_FIRST_THEN_STORE) == 42
    store.update_offset(MQ, 50)
    assert await store.read_offset(MQ, ReadOffsetType.MEMORY_FIRST_THEN_STORE) == 50
    assert await store.read_offset(MQ, ReadOffsetType.READ_FROM_STORE) == 42
    assert await store.read_offset(MQ2, ReadOffsetType.READ_FROM_STORE) == -1


async def test_persist_only_owned_queues() -> None:
    backend = InMemoryBackend()
    store = OffsetStore(backend)
    store.update_offset(MQ, 3)
    store.update_offset(MQ2, 4)
    await store.persist_all([MQ])
    assert backend.saves == [{MQ: 3}]
    store.remove_offset(MQ)
    await store.persist_all([MQ])
    assert backend.saves == [{MQ: 3}]


async def test_local_file_backend_survives_restart(tmp_path: Path) -> None:
    store = OffsetStore(LocalFileBackend(tmp_path, "127.0.0.1@1", "g"))
    store.update_offset(MQ, 7)
    store.update_offset(MQ2, 9)
    await store.persist_all([MQ, MQ2])
    again = OffsetStore(LocalFileBackend(tmp_path, "127.0.0.1@1", "g"))
    assert await again.read_offset(MQ, ReadOffsetType.READ_FROM_STORE) == 7
    assert await again.read_offset(MQ2, ReadOffsetType.MEMORY_FIRST_THEN_STORE) == 9


async def test_local_file_backend_corrupt_file_starts_over(tmp_path: Path) -> None:
    backend = LocalFileBackend(tmp_path, "c", "g")
    backend.path.parent.mkdir(parents=True)
    backend.path.write_bytes(b"{not json")
    store = OffsetStore(backend)
    assert await store.read_offset(MQ, ReadOffsetType.READ_FROM_STORE) == -1
    store.update_offset(MQ, 1)
    await store.persist_all([MQ])
    assert (
        await OffsetStore(LocalFileBackend(tmp_path, "c", "g")).read_offset(
            MQ, ReadOffsetType.READ_FROM_STORE
        )
        == 1
    )
