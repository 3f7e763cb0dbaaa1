"""SyncProducer against a real NameServer and two real brokers on 127.0.0.1.

The cluster runs in the test's event loop, so every blocking call runs in a worker thread
(``asyncio.to_thread``), as a user's thread would call it.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import TypeVar

import pytest
from ferrymq.client import AdminClient, Message, MessageExt, PullConsumer, SendStatus, SyncProducer
from ferrymq.client.allocate import MessageQueue
from ferrymq.client.broker_api import PullStatus, SendResult
from ferrymq.client.errors import ClientStateError, MessageValidationError, MQClientError
from ferrymq.client.selectors import select_by_hash
from ferrymq.client.send_attempts import now_ms
from polling import wait_for

from .cluster import LocalCluster
from .test_produce_consume import tagged

pytestmark = pytest.mark.timeout(120)
T = TypeVar("T")


@pytest.fixture
async def producer(cluster: LocalCluster) -> AsyncIterator[SyncProducer]:
    p = SyncProducer("sync-pg", cluster.namesrv_addr)
    await asyncio.to_thread(p.start)
    try:
        yield p
    finally:
        await asyncio.to_thread(p.shutdown)


async def blocking(fn: Callable[..., T], *args: object) -> T:
    return await asyncio.to_thread(fn, *args)


async def pull_all(
    cluster: LocalCluster, topic: str, group: str
) -> list[tuple[MessageQueue, MessageExt]]:
    got: list[tuple[MessageQueue, MessageExt]] = []
    async with PullConsumer(group, cluster.namesrv_addr) as consumer:
        for mq in await consumer.fetch_subscribe_message_queues(topic):
            offset = 0
            while True:
                result = await consumer.pull(mq, "*", offset, 32)
                if result.status is not PullStatus.FOUND:
                    break
                got.extend((mq, m) for m in result.messages)
                offset = result.next_begin_offset
    return got


async def test_sends_spread_over_both_brokers_and_read_back_with_tags_and_keys(
    cluster: LocalCluster, producer: SyncProducer
) -> None:
    await cluster.create_topic("S1", queues=2)
    results = await blocking(lambda: [producer.send(tagged("S1", i)) for i in range(16)])
    assert all(r.status is SendStatus.SEND_OK for r in results)
    assert {r.queue.broker_name for r in results} == {"broker-a", "broker-b"}
    assert len({r.msg_id for r in results}) == 16
    pulled = await pull_all(cluster, "S1", "sync-pull-1")
    got = [m for _, m in pulled]
    assert sorted(m.body for m in got) == sorted(f"body-{i}".encode() for i in range(16))
    by_body = {m.body: m for m in got}
    assert by_body[b"body-3"].tags == "TagB" and by_body[b"body-3"].keys == ["key-3", "order-3"]
    assert {m.msg_id for m in got} == {r.msg_id for r in results}
    # each result names the queue and offset the message was stored at
    stored = {(mq.broker_name, mq.queue_id, m.queue_offset) for mq, m in pulled}
    assert {(r.queue.broker_name, r.queue.queue_id, r.queue_offset) for r in results} == stored


async def test_batch_oneway_and_send_to_queue(
    cluster: LocalCluster, producer: SyncProducer
) -> None:
    await cluster.create_topic("S2", queues=2)
    batch = [tagged("S2", i) for i in range(20)]
    result = await blocking(producer.send_batch, batch)
    assert result.status is SendStatus.SEND_OK
    assert result.msg_id.split(",") == [m.uniq_key for m in batch]
    await blocking(producer.send_oneway, tagged("S2", 500))
    target = MessageQueue("S2", "broker-b", 1)
    pinned: SendResult = await blocking(producer.send_to_queue, tagged("S2", 600), target)
    assert pinned.queue == target
    got = await pull_all(cluster, "S2", "sync-pull-2")
    assert len(got) == 22
    assert {(mq.broker_name, mq.queue_id) for mq, m in got if m.body == b"body-600"} == {
        ("broker-b", 1)
    }


async def test_orderly_sends_keep_each_key_on_one_queue_in_order(
    cluster: LocalCluster, producer: SyncProducer
) -> None:
    await cluster.create_topic("S6", queues=4)

    def send_all() -> list[SendResult]:
        return [
            producer.send_orderly(Message("S6", f"order-{i % 5}:{i}".encode()), f"order-{i % 5}")
            for i in range(40)
        ]

    results = await blocking(send_all)
    queue_of: dict[str, MessageQueue] = {}
    for i, r in enumerate(results):
        assert queue_of.setdefault(f"order-{i % 5}", r.queue) == r.queue
    # the same queue upstream's SelectMessageQueueByHash picks, so Java producers agree
    queues = producer.producer.instance.routes.publish["S6"].queues
    assert queue_of["order-3"] == select_by_hash(queues, Message("S6", b"x"), "order-3")
    pulled = await pull_all(cluster, "S6", "sync-pull-6")
    by_queue: dict[tuple[str, int], list[bytes]] = {}
    for mq, m in pulled:
        by_queue.setdefault((mq.broker_name, mq.queue_id), []).append(m.body)
    for key, mq in queue_of.items():
        bodies = [
            b for b in by_queue[(mq.broker_name, mq.queue_id)] if b.startswith(f"{key}:".encode())
        ]
        assert bodies == [f"{key}:{i}".encode() for i in range(40) if f"order-{i % 5}" == key]


async def test_threads_share_one_producer(cluster: LocalCluster, producer: SyncProducer) -> None:
    await cluster.create_topic("S3", queues=4)
    ids: list[str] = []
    lock = threading.Lock()

    def worker(w: int) -> None:
        for i in range(40):
            r = producer.send(Message("S3", f"w{w}-{i}".encode()))
            with lock:
                ids.append(r.msg_id)

    await asyncio.gather(*(asyncio.to_thread(worker, w) for w in range(4)))
    assert len(set(ids)) == 160
    got = await pull_all(cluster, "S3", "sync-pull-3")
    assert sorted(m.body for _, m in got) == sorted(
        f"w{w}-{i}".encode() for w in range(4) for i in range(40)
    )


async def test_threads_with_fault_tolerance_when_a_broker_stops_mid_run(
    cluster: LocalCluster,
) -> None:
    """8 threads share one SyncProducer with send_latency_fault_enable while broker-b stops under
    them: every send is answered or fails with MQClientError, the fault table (written from all
    threads) stays consistent and isolates broker-b, and every acknowledged send on broker-a is
    stored there."""
    await cluster.create_topic("S6", queues=2)
    producer = SyncProducer("sync-pg-ft", cluster.namesrv_addr, send_latency_fault_enable=True)
    await blocking(producer.start)
    threads_n, cap, after_stop_n = 8, 400, 15
    deadline = time.monotonic() + 120.0
    stopped = threading.Event()
    lock = threading.Lock()
    # (thread, index, started after the stop, result or error)
    outcomes: list[tuple[int, int, bool, SendResult | MQClientError]] = []
    unexpected: list[BaseException] = []

    def worker(w: int) -> None:
        after = 0
        for i in itertools.count():
            if after >= after_stop_n or time.monotonic() > deadline:
                return
            if i >= cap:
                # enough sends before the stop: wait for it (bounded by the deadline) so that
                # every thread also sends after it, however fast its first sends went
                stopped.wait(timeout=max(0.0, deadline - time.monotonic()))
            late = stopped.is_set()
            after += late
            outcome: SendResult | MQClientError
            try:
                outcome = producer.send(Message("S6", f"t{w}-{i}".encode()))
            except MQClientError as exc:
                outcome = exc
            except BaseException as exc:  # anything else is a bug: reported below
                with lock:
                    unexpected.append(exc)
                return
            with lock:
                outcomes.append((w, i, late, outcome))

    def sent_to(broker: str) -> int:
        with lock:
            return sum(
                1
                for *_, o in outcomes
                if isinstance(o, SendResult) and o.queue.broker_name == broker
            )

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(threads_n)]
    try:
        for t in threads:
            t.start()
        await wait_for(
            lambda: sent_to("broker-a") >= 20 and sent_to("broker-b") >= 20,
            timeout=30.0,
            what="sends on both brokers",
        )
        await cluster.stop_broker("broker-b")  # while the threads keep sending
        stopped.set()
        await wait_for(
            lambda: not any(t.is_alive() for t in threads), timeout=90.0, what="threads done"
        )
        table = producer.producer.fault.tolerance.snapshot()
    finally:
        stopped.set()
        for t in threads:  # bounded by ``deadline`` and ``cap``
            await asyncio.to_thread(t.join, 90.0)
        await blocking(producer.shutdown)

    assert unexpected == []
    assert len(outcomes) >= threads_n * after_stop_n
    late = [o for _, _, was_late, o in outcomes if was_late]
    assert len(late) == threads_n * after_stop_n  # every thread sent on after the stop
    late_ok = [o for o in late if isinstance(o, SendResult)]
    # a send begun after the stop can only be stored on broker-a; retries get most through
    assert {r.queue.broker_name for r in late_ok} == {"broker-a"}
    assert len(late_ok) > len(late) // 2
    assert all(r.status is SendStatus.SEND_OK for *_, r in outcomes if isinstance(r, SendResult))
    # the fault table: written by all threads, one entry per broker under its own name, broker-b
    # isolated after its failures (its entry is dropped instead if a slow broker-a had to be
    # ranked against it once the route no longer listed broker-b)
    assert "broker-a" in table and set(table) <= {"broker-a", "broker-b"}
    assert all(key == item.name and item.current_latency >= 0 for key, item in table.items())
    assert "broker-b" not in table or not table["broker-b"].is_available(now_ms())
    # nothing acknowledged by broker-a is missing from it
    acked = {
        r.msg_id
        for *_, r in outcomes
        if isinstance(r, SendResult) and r.queue.broker_name == "broker-a"
    }
    stored = {m.msg_id for _, m in await pull_all(cluster, "S6", "sync-pull-6")}
    assert acked <= stored


async def test_a_new_topic_is_created_through_tbw102(
    cluster: LocalCluster, producer: SyncProducer
) -> None:
    result = await blocking(producer.send, Message("SyncAutoTopic", b"hello"))
    assert result.status is SendStatus.SEND_OK
    async with AdminClient(cluster.namesrv_addr) as admin:

        async def routed() -> bool:
            return "SyncAutoTopic" in await admin.topic_list()

        await wait_for(routed, what="auto-created topic registered")


@pytest.mark.parametrize("fault_tolerance", [False, True])
async def test_a_send_is_retried_on_the_other_broker(
    cluster: LocalCluster, fault_tolerance: bool
) -> None:
    await cluster.create_topic("S4", queues=2)
    producer = SyncProducer(
        "sync-pg-f", cluster.namesrv_addr, send_latency_fault_enable=fault_tolerance
    )
    await blocking(producer.start)
    try:
        await blocking(producer.send, Message("S4", b"warm"))
        await blocking(producer.send, Message("S4", b"warm2"))  # a connection to each broker
        await cluster.stop_broker("broker-b")
        results = await blocking(
            lambda: [producer.send(Message("S4", f"m{i}".encode())) for i in range(12)]
        )
        # every send succeeded although half of the cached queues point at a dead broker
        assert {r.queue.broker_name for r in results} == {"broker-a"}
    finally:
        await blocking(producer.shutdown)


async def test_no_broker_left_fails_with_the_reason_within_the_timeout(
    cluster: LocalCluster, producer: SyncProducer
) -> None:
    await cluster.create_topic("S5", queues=1)
    await blocking(producer.send, Message("S5", b"warm"))
    await cluster.stop_broker("broker-a")
    await cluster.stop_broker("broker-b")
    with pytest.raises(MQClientError, match="failed after 3 attempt"):
        await blocking(producer.send, Message("S5", b"lost"), 2.0)


async def test_bad_input_and_lifecycle_errors_are_clear(cluster: LocalCluster) -> None:
    producer = SyncProducer("sync-pg-bad", cluster.namesrv_addr, max_message_size=1024)
    with pytest.raises(ClientStateError, match="not running"):
        producer.send(Message("T", b"x"))
    await blocking(producer.start)
    try:
        with pytest.raises(MessageValidationError, match="empty"):
            producer.send(Message("T", b""))
        with pytest.raises(MessageValidationError, match="exceeds"):
            producer.send(Message("T", b"x" * 2000))
        with pytest.raises(MessageValidationError, match="characters"):
            producer.send(Message("bad topic", b"x"))
        with pytest.raises(MessageValidationError, match="one topic"):
            producer.send_batch([Message("A", b"x"), Message("B", b"y")])
    finally:
        await blocking(producer.shutdown)
    with pytest.raises(ClientStateError, match="not running"):
        producer.send(Message("T", b"x"))
    await blocking(producer.shutdown)  # a second shutdown does nothing
    with pytest.raises(ClientStateError, match="create a new one"):
        producer.start()
    assert not [t for t in threading.enumerate() if t.name == "ferrymq-producer-sync-pg-bad"]


def test_an_unreachable_nameserver_fails_the_send_not_the_caller() -> None:
    producer = SyncProducer("sync-pg-nons", "127.0.0.1:1", send_msg_timeout=2.0)
    with producer, pytest.raises(MQClientError):
        producer.send(Message("Nowhere", b"x"))
