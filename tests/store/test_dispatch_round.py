"""The reput's one-loop round parser reads exactly what the reference record parser reads."""

from __future__ import annotations

import random
import struct
from pathlib import Path

from ferrymq.message import Message, MessageConst, MessageInner, MessageSysFlag, encode_batch
from ferrymq.store import record as rec
from ferrymq.store.dispatch import DispatchRequest, parse_round, request_from_fields

from .helpers import msg, open_store, small_config, wait_dispatched

DELAYS = [1000, 5000, 10000]


def reference(
    buf: memoryview, end: int, limit: int
) -> tuple[list[DispatchRequest], int, rec.RecordKind | None]:
    out: list[DispatchRequest] = []
    pos = 0
    while pos < end and limit != 0:
        kind, size, fields = rec.parse_for_dispatch(buf, pos, end)
        if fields is None:
            return out, pos, kind
        out.append(request_from_fields(fields, DELAYS))
        pos += size
        limit -= 1
    return out, pos, None


def targeted_corruptions(data: bytearray) -> list[bytearray]:
    """The second record of ``data`` broken in each way the parser checks."""
    first = rec.parse_for_dispatch(memoryview(bytes(data)), 0, len(data))[1]
    total, _m = struct.unpack_from(">iI", data, first)
    body_len = struct.unpack_from(">i", data, first + rec.BODY_LEN_POS)[0]
    tpos = first + rec.BODY_POS + body_len
    ppos = tpos + 1 + data[tpos]
    out = []

    def variant(pos: int, fmt: str, value: int) -> None:
        bad = bytearray(data)
        struct.pack_into(fmt, bad, pos, value)
        out.append(bad)

    sys_flag = struct.unpack_from(">i", data, first + rec.SYS_FLAG_POS)[0]
    variant(first + rec.SYS_FLAG_POS, ">i", sys_flag | MessageSysFlag.BORNHOST_V6_FLAG)
    variant(first + rec.SYS_FLAG_POS, ">i", sys_flag | MessageSysFlag.STOREHOSTADDRESS_V6_FLAG)
    for value in (0, 10, rec.MIN_RECORD_SIZE - 1, total - 1, total + 1, 1 << 30):
        variant(first, ">i", value)
    variant(first + 4, ">I", 0x12345678)
    for value in (-1, body_len - 1, body_len + 1, 1 << 30):
        variant(first + rec.BODY_LEN_POS, ">i", value)
    for value in (0, data[tpos] - 1, data[tpos] + 1, 200):
        variant(tpos, ">B", value)
    props_len = struct.unpack_from(">H", data, ppos)[0]
    for value in (props_len - 1, props_len + 1, 0):
        variant(ppos, ">H", max(value, 0))
    bad = bytearray(data)
    bad[tpos + 1] = 0xFF  # topic not UTF-8
    out.append(bad)
    return out


async def test_round_parser_matches_reference_on_every_file(tmp_path: Path) -> None:
    rng = random.Random(11)
    store = await open_store(small_config(tmp_path, mappedFileSizeCommitLog=64 * 1024))
    try:
        for i in range(150):
            props: dict[str, str] = {}
            if rng.random() < 0.5:
                props[MessageConst.PROPERTY_TAGS] = rng.choice(["a", "b", "TagC"])
            if rng.random() < 0.3:
                props[MessageConst.PROPERTY_KEYS] = "k1 k2" if rng.random() < 0.5 else "k3"
            props[MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = f"U{i:08d}"
            sys_flag = 0
            topic = rng.choice(["T", "Other", "SCHEDULE_TOPIC_XXXX"])
            if topic == "SCHEDULE_TOPIC_XXXX":
                props[MessageConst.PROPERTY_DELAY_TIME_LEVEL] = str(rng.randint(1, 5))
            if rng.random() < 0.1:
                sys_flag = MessageSysFlag.TRANSACTION_PREPARED_TYPE
            body = bytes(rng.randrange(256) for _ in range(rng.randint(1, 3000)))
            await store.put_message(msg(topic, rng.randrange(4), body, props, sys_flag=sys_flag))
            if rng.random() < 0.1:
                batch = [Message("T", b"b" * rng.randint(1, 500)) for _ in range(rng.randint(1, 9))]
                inner = MessageInner(
                    topic="T", queue_id=1, body=encode_batch(batch), born_host=("127.0.0.1", 1)
                )
                await store.put_messages(inner)
        await wait_dispatched(store)
        files = store.commit_log.mapped_file_queue.files
        assert len(files) > 2  # blanks at the end of the full files
        for mf in files:
            sel = store.commit_log.get_data(mf.file_from_offset)
            assert sel is not None
            try:
                for limit in (-1, 1, 7):
                    assert parse_round(sel.buffer, 0, sel.size, limit, DELAYS) == reference(
                        sel.buffer, sel.size, limit
                    )
                # a torn copy: every cut point parses the same way in both
                data = bytearray(sel.buffer)
                for cut in sorted(rng.sample(range(1, len(data)), 40)):
                    torn = memoryview(bytes(data[:cut]))
                    assert parse_round(torn, 0, cut, -1, DELAYS) == reference(torn, cut, -1)
                for bad in targeted_corruptions(data):
                    view = memoryview(bytes(bad))
                    assert parse_round(view, 0, len(bad), -1, DELAYS) == reference(
                        view, len(bad), -1
                    )
                for flip in rng.sample(range(len(data)), 40):
                    bad = bytearray(data)
                    bad[flip] ^= 0xFF
                    view = memoryview(bytes(bad))
                    assert parse_round(view, 0, len(bad), -1, DELAYS) == reference(
                        view, len(bad), -1
                    )
            finally:
                sel.release()
    finally:
        await store.shutdown()
