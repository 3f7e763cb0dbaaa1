"""Consume service outcomes, the start-offset rule, rebalance bookkeeping, unique ids (no network)."""

from __future__ import annotations

import asyncio
import re

import pytest
from ferrymq.client.allocate import MessageQueue
from ferrymq.client.consume_service import (
    ConsumeContext,
    ConsumeService,
    ConsumeStatus,
    Listener,
    SendBack,
    restore_retry_topic,
    result_status,
)
from ferrymq.client.errors import BrokerUnreachableError
from ferrymq.client.offset_store import OffsetStore, ReadOffsetType
from ferrymq.client.process_queue import ProcessQueue
from ferrymq.client.rebalance import Rebalance, RebalanceConfig, StartRule, start_offset_rule
from ferrymq.client.uniq_id import UniqIdGenerator
from ferrymq.message import MessageConst, MessageExt
from ferrymq.remoting.bodies import ConsumeFromWhere
from polling import wait_for

MQ = MessageQueue("T", "broker-a", 0)


class MemoryBackend:
    """In-memory stand-in for the broker's offset table (network paths: integration tests)."""

    def __init__(self, stored: dict[MessageQueue, int] | None = None) -> None:
        self.stored = dict(stored or {})

    async def load(self, mq: MessageQueue) -> int:
        return self.stored.get(mq, -1)

    async def save(self, offsets: dict[MessageQueue, int]) -> None:
        self.stored.update(offsets)


def msgs(*offsets: int) -> list[MessageExt]:
    return [MessageExt(topic="T", body=b"b", queue_offset=o, msg_id=f"id{o}") for o in offsets]


@pytest.mark.parametrize(
    ("value", "status"),
    [
        (None, ConsumeStatus.CONSUME_SUCCESS),
        (True, ConsumeStatus.CONSUME_SUCCESS),
        (ConsumeStatus.CONSUME_SUCCESS, ConsumeStatus.CONSUME_SUCCESS),
        (False, ConsumeStatus.RECONSUME_LATER),
        (ConsumeStatus.RECONSUME_LATER, ConsumeStatus.RECONSUME_LATER),
        ("yes", ConsumeStatus.RECONSUME_LATER),
    ],
)
def test_result_status(value: object, status: ConsumeStatus) -> None:
    assert result_status(value) is status


def test_restore_retry_topic() -> None:
    m = MessageExt(topic="%RETRY%g", properties={MessageConst.PROPERTY_RETRY_TOPIC: "Orders"})
    restore_retry_topic(m, "g")
    assert m.topic == "Orders"
    other = MessageExt(
        topic="%RETRY%other", properties={MessageConst.PROPERTY_RETRY_TOPIC: "Orders"}
    )
    restore_retry_topic(other, "g")
    assert other.topic == "%RETRY%other"


async def run_service(
    listener: Listener,
    send_back: SendBack | None = None,
    clustering: bool = True,
    batch: int = 32,
) -> tuple[ConsumeService, OffsetStore]:
    store = OffsetStore(MemoryBackend())
    service = ConsumeService(
        listener,
        "g",
        store,
        send_back,
        clustering=clustering,
        consume_batch_max_size=batch,
        consume_thread_max=2,
    )
    service.start()
    return service, store


async def test_success_commits_past_the_batch_and_async_listener() -> None:
    seen: list[int] = []

    async def listener(batch: list[MessageExt], ctx: ConsumeContext) -> None:
        seen.extend(m.queue_offset for m in batch)

    service, store = await run_service(listener)
    pq = ProcessQueue()
    batch = msgs(0, 1, 2)
    pq.put_messages(batch)
    service.submit(batch, pq, MQ)
    await wait_for(lambda: store.offsets.get(MQ) == 3, what="commit 3")
    assert sorted(seen) == [0, 1, 2] and pq.msg_count == 0
    await service.shutdown()


async def test_failure_is_sent_back_and_progress_moves_on() -> None:
    sent_back: list[tuple[str, int]] = []

    async def send_back(msg: MessageExt, mq: MessageQueue, level: int) -> None:
        sent_back.append((msg.msg_id, level))

    def listener(batch: list[MessageExt], ctx: ConsumeContext) -> ConsumeStatus:
        ctx.delay_level_when_next_consume = 5
        return ConsumeStatus.RECONSUME_LATER

    service, store = await run_service(listener, send_back)
    pq = ProcessQueue()
    batch = msgs(10, 11)
    pq.put_messages(batch)
    service.submit(batch, pq, MQ)
    await wait_for(lambda: store.offsets.get(MQ) == 12, what="commit after send back")
    assert sent_back == [("id10", 5), ("id11", 5)]
    assert service.stats.failed == 2 and service.stats.sent_back == 2
    await service.shutdown()


async def test_ack_index_splits_a_batch() -> None:
    sent_back: list[str] = []

    async def send_back(msg: MessageExt, mq: MessageQueue, level: int) -> None:
        sent_back.append(msg.msg_id)

    def listener(batch: list[MessageExt], ctx: ConsumeContext) -> ConsumeStatus:
        ctx.ack_index = 0  # only the first one succeeded
        return ConsumeStatus.CONSUME_SUCCESS

    service, store = await run_service(listener, send_back)
    pq = ProcessQueue()
    batch = msgs(0, 1, 2)
    pq.put_messages(batch)
    service.submit(batch, pq, MQ)
    await wait_for(lambda: store.offsets.get(MQ) == 3, what="commit")
    assert sent_back == ["id1", "id2"] and service.stats.ok == 1
    await service.shutdown()


async def test_failed_send_back_keeps_message_in_flight() -> None:
    async def send_back(msg: MessageExt, mq: MessageQueue, level: int) -> None:
        raise BrokerUnreachableError("127.0.0.1:1", "down")

    def listener(batch: list[MessageExt], ctx: ConsumeContext) -> bool:
        return all(m.queue_offset != 1 for m in batch)

    service, store = await run_service(listener, send_back, batch=1)
    pq = ProcessQueue()
    batch = msgs(0, 1, 2)
    pq.put_messages(batch)
    service.submit(batch, pq, MQ)
    await wait_for(lambda: service.stats.ok == 2 and service.stats.failed >= 1, what="outcomes")
    # offset 1 could not be sent back: progress stops there so it is never lost
    assert store.offsets[MQ] == 1 and list(pq.messages) == [1]
    await service.shutdown()


async def test_exception_in_listener_counts_as_failure_and_dropped_queue_is_ignored() -> None:
    def listener(batch: list[MessageExt], ctx: ConsumeContext) -> None:
        raise RuntimeError("boom")

    service, store = await run_service(listener, None, clustering=False)
    pq = ProcessQueue()
    pq.put_messages(msgs(0))
    service.submit(msgs(0), pq, MQ)
    await wait_for(lambda: service.stats.failed == 1, what="failure counted")
    # broadcasting: a failure is dropped (logged), progress moves on
    assert store.offsets[MQ] == 1
    dropped = ProcessQueue(dropped=True)
    service.submit(msgs(5), dropped, MessageQueue("T", "broker-a", 1))
    await asyncio.wait_for(service._queue.join(), 5)
    assert MessageQueue("T", "broker-a", 1) not in store.offsets
    await service.shutdown()


@pytest.mark.parametrize(
    ("stored", "policy", "topic", "expected"),
    [
        (42, ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET, "T", (StartRule.STORED, 42)),
        (0, ConsumeFromWhere.CONSUME_FROM_TIMESTAMP, "T", (StartRule.STORED, 0)),
        (-1, ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET, "T", (StartRule.MAX, -1)),
        (-1, ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET, "%RETRY%g", (StartRule.ZERO, 0)),
        (-1, ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET, "T", (StartRule.ZERO, 0)),
        (-1, ConsumeFromWhere.CONSUME_FROM_TIMESTAMP, "T", (StartRule.TIMESTAMP, -1)),
        (-2, ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET, "T", (StartRule.SKIP, -1)),
    ],
)
def test_start_offset_rule(
    stored: int, policy: ConsumeFromWhere, topic: str, expected: tuple[StartRule, int]
) -> None:
    assert start_offset_rule(stored, policy, topic) == expected


class Host:
    """A fixed view of the group (queues, members, offsets) standing in for the client instance."""

    client_id = "c1"

    def __init__(self, queues: list[MessageQueue], cids: list[str]) -> None:
        self.queues = queues
        self.cids = cids
        self.lookups = 0

    def subscribe_queues(self, topic: str) -> list[MessageQueue]:
        return [q for q in self.queues if q.topic == topic]

    async def find_consumer_ids(self, topic: str, group: str) -> list[str]:
        await asyncio.sleep(0)
        return list(self.cids)

    async def max_offset(self, mq: MessageQueue) -> int:
        self.lookups += 1
        await asyncio.sleep(0.01)  # a slow lookup widens the window a concurrent rebalance hits
        return 100

    async def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        return 7


async def test_rebalance_adds_removes_and_persists_handover() -> None:
    queues = [MessageQueue("T", "b", i) for i in range(4)]
    host = Host(queues, ["c1"])
    backend = MemoryBackend({queues[0]: 5})
    store = OffsetStore(backend)
    added: list[tuple[MessageQueue, int]] = []
    removed: list[MessageQueue] = []

    async def on_remove(mq: MessageQueue, pq: ProcessQueue) -> None:
        removed.append(mq)
        await store.persist(mq)

    rb = Rebalance(
        RebalanceConfig(group="g"),
        host,
        store,
        lambda mq, pq, off: added.append((mq, off)),
        on_remove,
    )
    rb.topics = ["T"]
    # three concurrent triggers must not add a queue twice
    await asyncio.gather(rb.do_rebalance(), rb.do_rebalance(), rb.do_rebalance())
    assert sorted(added) == [(queues[0], 5), (queues[1], 100), (queues[2], 100), (queues[3], 100)]
    # a second consumer joins: AVG gives c1 the first half
    host.cids = ["c1", "c2"]
    store.update_offset(queues[2], 150)
    await rb.do_rebalance()
    assert sorted(removed) == [queues[2], queues[3]]
    assert backend.stored[queues[2]] == 150  # handed over where we stopped
    assert sorted(rb.process_queues) == queues[:2]
    await rb.stop()
    host.cids = ["c1"]
    assert not await rb.do_rebalance()


async def test_read_offset_failure_skips_queue_until_next_rebalance() -> None:
    class FailingBackend(MemoryBackend):
        async def load(self, mq: MessageQueue) -> int:
            raise BrokerUnreachableError("127.0.0.1:1", "down")

    q = MessageQueue("T", "b", 0)
    rb = Rebalance(
        RebalanceConfig(group="g"),
        Host([q], ["c1"]),
        OffsetStore(FailingBackend()),
        lambda *a: None,
        _noop,
    )
    rb.topics = ["T"]
    await rb.do_rebalance()
    assert rb.process_queues == {}
    assert await rb.offset_store.read_offset(q, ReadOffsetType.READ_FROM_MEMORY) == -1


async def _noop(mq: MessageQueue, pq: ProcessQueue) -> None:
    return None


def test_uniq_ids_are_unique_upper_hex_and_carry_the_ip() -> None:
    gen = UniqIdGenerator("10.1.2.3")
    ids = [gen.next_id() for _ in range(5000)]
    assert len(set(ids)) == len(ids)
    assert all(re.fullmatch(r"[0-9A-F]{32}", i) for i in ids)
    assert ids[0].startswith("0A010203")
    other = UniqIdGenerator("10.1.2.3")
    assert other.next_id()[:20] != ids[0][:20]  # a different generator, a different fixed prefix
