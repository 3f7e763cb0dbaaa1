"""The pure parts of POP: receipt handles and offset-info strings, checkpoint/ack codecs (the Java
BitSet form included), the in-flight table's revive progress, orderly blocking, pop allocation."""

from __future__ import annotations

import base64

from ferrymq.broker.pop import extra_info as xi
from ferrymq.broker.pop.assignment import allocate_for_pop
from ferrymq.broker.pop.checkpoint import (
    AckRecord,
    CheckPoint,
    bitset_decode,
    bitset_encode,
    parse_batch_ack_body,
)
from ferrymq.broker.pop.inflight import InflightTable
from ferrymq.broker.pop.order_info import OrderInfoManager
from ferrymq.client.allocate import MessageQueue
from hypothesis import given
from hypothesis import strategies as st


def test_extra_info_as_upstream_builds_it() -> None:
    # ExtraInfoUtil.buildExtraInfo(ckQueueOffset, popTime, invisibleTime, reviveQid, topic,
    # brokerName, queueId, msgQueueOffset)
    assert xi.build_extra_info(5, 1000, 60000, 3, "T", "broker-a", 1, 7) == (
        "5 1000 60000 3 0 broker-a 1 7"
    )
    assert xi.build_extra_info(0, 1, 2, 0, "%RETRY%g_T", "b", 0) == "0 1 2 0 1 b 0"
    assert xi.build_extra_info(0, 1, 2, 0, "%RETRY%g+T", "b", 0).split()[4] == "2"
    proxy_handle = "5 1000 60000 3 1 broker-a 1 7 123456"  # the proxy appends commitLogOffset
    info = xi.parse_extra_info(proxy_handle)
    assert (info.commit_log_offset, info.next_visible_time, info.is_order) == (123456, 61000, False)
    assert xi.real_topic("T", "g", info.topic_type) == "%RETRY%g_T"
    assert xi.parse_extra_info("0 1 2 999 0 b 0 0").is_order


def test_offset_info_strings() -> None:
    assert xi.start_offset_info([("T", 0, 5), ("%RETRY%g_T", 0, 2)]) == "0 0 5;1 0 2"
    assert xi.msg_offset_info([("T", 1, [5, 6, 9])]) == "0 1 5,6,9"
    assert xi.order_count_info([("T", 2, 7, 1)]) == "0 qo2%7 1"


@given(st.sets(st.integers(min_value=0, max_value=300)))
def test_bitset_round_trip(bits: set[int]) -> None:
    assert bitset_decode(bitset_encode(bits)) == sorted(bits)


def test_bitset_reads_the_java_form() -> None:
    # new BitSet(); set(0); set(9) -> toByteArray() = [0x01, 0x02]; fastjson writes base64
    java = base64.b64encode(bytes([0x01, 0x02])).decode()
    assert bitset_decode(java) == [0, 9]
    assert bitset_decode([1, 2]) == [0, 9]
    broker, entries = parse_batch_ack_body(
        {
            "brokerName": "b",
            "acks": [
                {
                    "c": "g",
                    "t": "T",
                    "r": "0",
                    "so": 4,
                    "q": 1,
                    "rq": 2,
                    "pt": 10,
                    "it": 20,
                    "b": java,
                }
            ],
        }
    )
    assert broker == "b" and entries[0].bits == (0, 9) and entries[0].revive_qid == 2


def test_checkpoint_and_ack_codecs_use_upstream_names() -> None:
    ck = CheckPoint("T", "g", 1, 10, 1000, 5000, [0, 2, 3], "broker-a")
    raw = ck.encode()
    for field in (b'"so":10', b'"pt":1000', b'"it":5000', b'"n":3', b'"d":[0,2,3]', b'"bn"'):
        assert field in raw
    back = CheckPoint.decode(raw)
    assert back.key == ck.key and back.offsets() == [10, 12, 13]
    ack = AckRecord("T", "g", 1, 10, 1000, "broker-a", (12,))
    assert AckRecord.decode(ack.encode()) == ack and ack.tag == "ack"
    batch = AckRecord("T", "g", 1, 10, 1000, "broker-a", (10, 13))
    assert AckRecord.decode(batch.encode()) == batch and batch.tag == "bAck"


def test_revive_progress_waits_for_the_lowest_pending_checkpoint() -> None:
    table = InflightTable()
    table.begin_write(0)
    assert table.progress(0) is None  # a CK write in flight: its offset is not known yet
    table.end_write(0, 0)
    a = CheckPoint("T", "g", 0, 0, 100, 10, [0, 1], "b", revive_offset=0, revive_qid=0)
    table.add(a)
    b = CheckPoint("T", "g", 0, 2, 105, 10, [0], "b", revive_offset=1, revive_qid=0)
    table.add(b)
    assert table.progress(0) == 0
    assert table.apply_ack(AckRecord("T", "g", 0, 0, 100, "b", (0, 1))) is a
    assert table.progress(0) == 1
    assert [ck.key for ck in table.pop_due(200)] == [b.key]
    table.resolve(b.key)
    assert table.progress(0) == 2 and len(table) == 0


def test_orderly_queue_blocks_until_acked_or_invisible_time_passes() -> None:
    orders = OrderInfoManager()
    counts = orders.update("a1", "T", "g", 0, 1000, 500, [4, 5])
    assert counts == {4: 0, 5: 0}
    assert orders.check_block("a2", "T", "g", 0, 1200)
    assert not orders.check_block("a1", "T", "g", 0, 1200)  # the same attempt may re-pop
    assert not orders.check_block("a2", "T", "g", 0, 1600)  # invisible time over
    again = orders.update("a2", "T", "g", 0, 1600, 500, [4, 5])
    assert again == {4: 1, 5: 1}
    assert orders.commit_and_next("T", "g", 0, 4, 1000) == -2  # a stale handle
    assert orders.commit_and_next("T", "g", 0, 5, 1600) == 4
    assert orders.commit_and_next("T", "g", 0, 4, 1600) == 6
    assert not orders.check_block(None, "T", "g", 0, 1700)


def test_allocate_for_pop() -> None:
    mqs = [MessageQueue("T", b, i) for b in ("a", "b") for i in range(2)]
    assert allocate_for_pop("AVG", "g", "c1", mqs, ["c1", "c2"], -1) == [
        MessageQueue("T", "a", -1),
        MessageQueue("T", "b", -1),
    ]
    assert allocate_for_pop("AVG", "g", "c1", mqs, ["c1", "c2", "c3", "c4"], 1) == [
        MessageQueue("T", "a", 0),
        MessageQueue("T", "a", 1),
    ]
