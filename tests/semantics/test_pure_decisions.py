"""Pure decisions of the semantics features: locks, send-back routing, delay and half rewrites,
queue selection and compression."""

from __future__ import annotations

import zlib

import pytest
from ferrymq.broker.lock_manager import RebalanceLockManager
from ferrymq.broker.retry import decide_send_back
from ferrymq.broker.schedule import SCHEDULE_TOPIC, to_schedule_topic
from ferrymq.broker.transaction import HALF_TOPIC, to_half_message
from ferrymq.client.compression import CompressionError, compress_body, decompress_body
from ferrymq.client.selectors import select_by_hash, select_by_key
from ferrymq.message import Message, MessageConst, MessageInner, MessageSysFlag, java_string_hash
from ferrymq.remoting.bodies import PERM_READ, PERM_WRITE
from hypothesis import given, settings
from hypothesis import strategies as st

MQ1 = ("T", "b", 0)
MQ2 = ("T", "b", 1)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def test_lock_is_exclusive_until_it_expires_after_60s() -> None:
    clock = Clock()
    locks = RebalanceLockManager(clock_ms=clock)
    assert locks.try_lock_batch("g", [MQ1, MQ2], "c1") == {MQ1, MQ2}
    assert locks.try_lock_batch("g", [MQ1], "c2") == set()
    assert locks.try_lock_batch("other-group", [MQ1], "c2") == {MQ1}
    clock.now += 59_000
    assert locks.try_lock_batch("g", [MQ1], "c1") == {MQ1}  # renewal
    clock.now += 60_000
    assert locks.is_locked("g", MQ1, "c1")
    clock.now += 1_001
    assert not locks.is_locked("g", MQ1, "c1")
    assert locks.try_lock_batch("g", [MQ1], "c2") == {MQ1}
    assert locks.owner("g", MQ1) == "c2"


def test_unlock_releases_only_own_locks_and_client_cleanup() -> None:
    locks = RebalanceLockManager(clock_ms=Clock())
    locks.try_lock_batch("g", [MQ1], "c1")
    locks.try_lock_batch("g", [MQ2], "c2")
    locks.unlock_batch("g", [MQ1, MQ2], "c1")
    assert locks.owner("g", MQ1) is None and locks.owner("g", MQ2) == "c2"
    assert locks.unlock_client("c2") == 1
    assert locks.owner("g", MQ2) is None


@settings(deadline=None)
@given(st.integers(0, 40), st.integers(-1, 18), st.integers(1, 20))
def test_send_back_routing(reconsume: int, level: int, max_times: int) -> None:
    d = decide_send_back("G", reconsume, level, max_times, 1, pick=lambda n: n - 1)
    if reconsume >= max_times or level < 0:
        assert (
            d.to_dlq
            and d.topic == "%DLQ%G"
            and d.perm == PERM_WRITE | PERM_READ
            and d.delay_level == 0
        )
    else:
        assert not d.to_dlq and d.topic == "%RETRY%G" and d.perm == PERM_WRITE | PERM_READ
        assert d.delay_level == (level if level > 0 else 3 + reconsume)


def _inner(props: dict[str, str], sys_flag: int = 0) -> MessageInner:
    return MessageInner.create("Real", 2, b"x", props, sys_flag=sys_flag)


def test_delay_rewrite_moves_to_schedule_topic_and_clamps() -> None:
    msg = to_schedule_topic(_inner({"DELAY": "40", "TAGS": "a"}), max_level=18)
    assert (msg.topic, msg.queue_id) == (SCHEDULE_TOPIC, 17)
    assert msg.properties[MessageConst.PROPERTY_REAL_TOPIC] == "Real"
    assert msg.properties[MessageConst.PROPERTY_REAL_QUEUE_ID] == "2"
    assert msg.properties["DELAY"] == "18"
    assert "REAL_TOPIC\x01Real\x02" in msg.properties_string
    plain = _inner({"TAGS": "a"})
    assert to_schedule_topic(plain, 18) is plain
    half = _inner({"DELAY": "1"}, MessageSysFlag.TRANSACTION_PREPARED_TYPE)
    assert to_schedule_topic(half, 18) is half
    assert to_schedule_topic(_inner({"DELAY": "junk"}), 18).topic == "Real"


def test_half_message_hides_the_real_address() -> None:
    half = to_half_message(
        _inner({"TRAN_MSG": "true", "PGROUP": "pg"}, MessageSysFlag.TRANSACTION_PREPARED_TYPE)
    )
    assert (half.topic, half.queue_id) == (HALF_TOPIC, 0)
    assert MessageSysFlag.get_transaction_value(half.sys_flag) == 0
    assert half.properties["REAL_TOPIC"] == "Real" and half.properties["REAL_QID"] == "2"


def test_select_by_hash_matches_java_select_message_queue_by_hash() -> None:
    queues = list(range(8))
    for key in ["order-1", "order-2", "", "\u00e9t\u00e9", "zzzzzzzzzzzzzzzzzzzz"]:
        h = java_string_hash(key)
        # Java: value = hashCode % size; if (value < 0) value = Math.abs(value)
        java_mod = abs(h) % 8 if h >= 0 else abs(-(abs(h) % 8))
        assert select_by_hash(queues, Message("T"), key) == java_mod
    assert select_by_hash(queues, Message("T"), 13) == 5
    msg = Message("T", properties={"KEYS": "k1 k2"})
    assert select_by_key(queues, msg, None) == select_by_hash(queues, msg, "k1")
    with pytest.raises(ValueError, match="no message queue"):
        select_by_hash([], msg, "k")


@settings(deadline=None)
@given(st.binary(max_size=10_000))
def test_compression_round_trip(body: bytes) -> None:
    sent, flag = compress_body(body, 0)
    if flag & MessageSysFlag.COMPRESSED_FLAG:
        assert len(body) > 4096 and len(sent) < len(body)
    else:
        assert sent == body
    assert decompress_body(sent, flag) == body


def test_large_compressible_body_is_zlib_and_flagged() -> None:
    body = b"ferrymq " * 2000
    sent, flag = compress_body(body, MessageSysFlag.MULTI_TAGS_FLAG)
    assert flag == MessageSysFlag.MULTI_TAGS_FLAG | MessageSysFlag.COMPRESSED_FLAG
    assert zlib.decompress(sent) == body
    with pytest.raises(CompressionError):
        decompress_body(b"not zlib", MessageSysFlag.COMPRESSED_FLAG)
