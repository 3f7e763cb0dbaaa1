"""The send pipeline's per-queue SEND_MESSAGE_V2 ext template gives what a fresh header encodes."""

from __future__ import annotations

import time

import pytest
from ferrymq.client import Producer
from ferrymq.client.allocate import MessageQueue
from ferrymq.client.broker_api import v2_ext
from ferrymq.client.errors import BrokerUnreachableError, SystemBusyError
from ferrymq.message import Message


def _fresh(
    producer: Producer, mq: MessageQueue, msg: Message, sys_flag: int, batch: bool
) -> dict[str, str]:
    return v2_ext(producer.pipeline.header(mq, msg, sys_flag, batch=batch))


async def test_template_ext_matches_a_fresh_header() -> None:
    producer = Producer("pg", "127.0.0.1:9")
    mqs = [MessageQueue("T", "broker-a", 3), MessageQueue("T", "broker-b", 0)]
    flagged = Message("T", b"x", flag=7, properties={"TAGS": "a", "KEYS": "k1"})
    plain = Message("T", b"y")
    cases = [(flagged, 0, False), (plain, 0, False), (flagged, 1, False), (plain, 0, True)]
    for mq in mqs:
        for msg, sys_flag, batch in cases:
            before = int(time.time() * 1000)
            got = producer.pipeline.send_ext(mq, msg, sys_flag, batch)
            want = _fresh(producer, mq, msg, sys_flag, batch)
            assert before <= int(got["g"]) <= int(time.time() * 1000)
            got["g"] = want["g"]
            assert list(got.items()) == list(want.items())  # same fields, same order
            # each send gets its own dict: changing it leaves the template alone
            got["i"] = "changed"
            assert producer.pipeline.send_ext(mq, msg, sys_flag, batch).get("i") == want.get("i")
    # a changed default_topic_queue_nums reaches the next send
    producer.default_topic_queue_nums = 16
    assert producer.pipeline.send_ext(mqs[0], plain, 0, False)["d"] == "16"


def test_send_options_live_in_the_pipeline() -> None:
    producer = Producer("pg", "127.0.0.1:9", send_msg_timeout=5.0, body_transform=None)
    pipeline = producer.pipeline
    assert pipeline.send_msg_timeout == 5.0 and pipeline.body_transform is None
    assert producer.retry_times_when_send_failed == 2  # the pipeline's default
    producer.retry_times_when_send_failed = 4
    producer.send_msg_timeout = 1.5
    assert (pipeline.retry_times_when_send_failed, pipeline.send_msg_timeout) == (4, 1.5)
    assert producer.fault is pipeline.fault
    # a misspelt option is named, with the options there are
    with pytest.raises(TypeError, match=r"unknown option.*retry_times\b.*send_msg_timeout"):
        Producer("pg", "127.0.0.1:9", retry_times=3)  # type: ignore[call-arg]


def test_the_retry_policy_of_sync_and_async_sends() -> None:
    """Sync: 1 + retry_times_when_send_failed attempts, a lost connection retried; async:
    1 + retry_times_when_send_async_failed, only a retriable broker answer retried (upstream)."""
    producer = Producer(
        "pg", "127.0.0.1:9", retry_times_when_send_failed=3, retry_times_when_send_async_failed=1
    )
    pipeline = producer.pipeline
    mq = MessageQueue("T", "broker-a", 0)
    lost = BrokerUnreachableError("127.0.0.1:9", "connection refused")
    busy = SystemBusyError(2, "busy")

    def spent(async_send: bool) -> int:
        tries = pipeline.attempts("T", timeout=60.0, async_send=async_send)
        n = 0
        while tries.next() > 0:
            n += 1
        return n

    assert (spent(False), spent(True)) == (4, 2)
    assert pipeline.attempts("T").retry_after(mq, lost) is True
    assert pipeline.attempts("T", async_send=True).retry_after(mq, lost) is False
    assert pipeline.attempts("T", async_send=True).retry_after(mq, busy) is True
