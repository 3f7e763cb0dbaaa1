"""The fused pull-body decoder (``decode_messages``) agrees with the per-record reference decoder
(``decode_message_ext``) on good bodies and raises ValueError on every kind of bad one."""

from __future__ import annotations

import dataclasses
import struct
import zlib

import pytest
from ferrymq.message import MessageExt, MessageSysFlag, decode_properties, encode_properties
from ferrymq.store import record as R
from hypothesis import given, settings
from hypothesis import strategies as st

IP = b"\x7f\x00\x00\x01"


def body_of(
    n: int,
    *,
    uniq: bool = True,
    compressed: bool = False,
    props: dict[str, str] | None = None,
    topic: bytes = b"DecodeTopic",
) -> bytes:
    buf = bytearray(n * 2048)
    pos = 0
    for i in range(n):
        properties = dict(props or {"TAGS": f"t{i % 3}", "KEYS": f"k{i}"})
        if uniq:
            properties["UNIQ_KEY"] = f"7F000001{i:024X}"
        payload = f"body-{i}".encode() * 20
        sys_flag = 0
        if compressed:
            payload = zlib.compress(payload)
            sys_flag = MessageSysFlag.COMPRESSED_FLAG
        pos += R.encode_record_into(
            buf,
            pos,
            queue_id=i % 4,
            flag=i,
            queue_offset=i,
            physical_offset=1000 + pos,
            sys_flag=sys_flag,
            born_timestamp=1_700_000_000_000 + i,
            born_ip=b"\x0a\x00\x00\x05",
            born_port=5000 + i,
            store_timestamp=1_700_000_000_100 + i,
            store_ip=IP,
            store_port=10911,
            reconsume_times=i % 2,
            prepared_transaction_offset=0,
            body=payload,
            topic=topic,
            properties=encode_properties(properties).encode(),
        )
    return bytes(buf[:pos])


def reference(buf: bytes) -> list[MessageExt]:
    return [R.decode_message_ext(buf, p, p + s) for p, s in R.iter_records(buf)]


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"uniq": False}, {"compressed": True}, {"props": {}}, {"topic": "主题".encode()}],
)
def test_matches_reference_decoder(kwargs: dict[str, object]) -> None:
    buf = body_of(7, **kwargs)  # type: ignore[arg-type]
    got = R.decode_messages(buf)
    assert got == reference(buf)
    assert len(got) == 7
    if kwargs.get("compressed"):
        assert got[0].body == b"body-0" * 20
    if kwargs.get("uniq", True):
        assert got[3].msg_id == f"7F000001{3:024X}"
    else:
        assert got[3].msg_id == got[3].offset_msg_id
    assert got[2].born_host == ("10.0.0.5", 5002)
    assert got[2].store_host == ("127.0.0.1", 10911)


def test_memoryview_and_bytearray_inputs() -> None:
    buf = body_of(3)
    assert R.decode_messages(memoryview(buf)) == R.decode_messages(bytearray(buf)) == reference(buf)


def test_empty_body_is_no_messages() -> None:
    assert R.decode_messages(b"") == []


def corrupt(buf: bytes, pos: int, fmt: str, value: int) -> bytes:
    out = bytearray(buf)
    struct.pack_into(fmt, out, pos, value)
    return bytes(out)


def test_bad_bodies_raise_value_error() -> None:
    good = body_of(3)
    size0 = struct.unpack_from(">i", good, 0)[0]
    body_len0 = struct.unpack_from(">i", good, R.BODY_LEN_POS)[0]
    bad = {
        "truncated": good[:-5],
        "trailing": good + b"\x00\x00",
        "size too small": corrupt(good, 0, ">i", 10),
        "bad magic in 2nd": corrupt(good, size0 + R.MAGIC_POS, ">I", 0x12345678),
        "blank magic": corrupt(good, R.MAGIC_POS, ">I", R.BLANK_MAGIC_CODE),
        "ipv6 flag": corrupt(good, R.SYS_FLAG_POS, ">i", MessageSysFlag.BORNHOST_V6_FLAG),
        "body length": corrupt(good, R.BODY_LEN_POS, ">i", body_len0 + 7),
        "negative body length": corrupt(good, R.BODY_LEN_POS, ">i", -1),
        "topic length negative": corrupt(good, R.BODY_POS + body_len0, ">b", -3),
        "topic length zero": corrupt(good, R.BODY_POS + body_len0, ">b", 0),
        "bad utf-8 topic": corrupt(good, R.BODY_POS + body_len0 + 1, ">B", 0xFF),
        "not inflatable": corrupt(
            corrupt(good, R.SYS_FLAG_POS, ">i", MessageSysFlag.COMPRESSED_FLAG), 0, ">i", size0
        ),
    }
    for name, buf in bad.items():
        with pytest.raises(ValueError):
            R.decode_messages(buf)
        # the reference decoder agrees that the body is bad
        with pytest.raises(ValueError):
            reference(buf)
        assert name


def records(specs: list[dict[str, object]]) -> bytes:
    """Back-to-back records, each from ``encode_record_into`` keyword overrides."""
    buf = bytearray(len(specs) * 4096)
    pos = 0
    for i, spec in enumerate(specs):
        fields: dict[str, object] = {
            "queue_id": 1,
            "flag": 0,
            "queue_offset": i,
            "physical_offset": 5000 + pos,
            "sys_flag": 0,
            "born_timestamp": 1_700_000_000_000 + i,
            "born_ip": b"\x0a\x00\x00\x05",
            "born_port": 5000,
            "store_timestamp": 1_700_000_000_100 + i,
            "store_ip": IP,
            "store_port": 10911,
            "reconsume_times": 0,
            "prepared_transaction_offset": 0,
            "body": b"b%d" % i,
            "topic": b"T",
            "properties": b"",
            **spec,
        }
        pos += R.encode_record_into(buf, pos, **fields)  # type: ignore[arg-type]
    return bytes(buf[:pos])


def test_topics_and_hosts_change_between_records() -> None:
    # each record's own topic and hosts, even where neighbours differ (the decoder shares hosts
    # between records and looks one up only when it changes)
    specs: list[dict[str, object]] = [
        {"topic": b"A", "born_ip": b"\x0a\x00\x00\x01", "born_port": 1},
        {"topic": b"A", "born_ip": b"\x0a\x00\x00\x01", "born_port": 2},
        {"topic": b"B", "born_ip": b"\x0a\x00\x00\x02", "born_port": 1, "store_port": 10921},
        {"topic": b"%RETRY%g", "store_ip": b"\x0a\x00\x00\x09"},
        {"topic": "主题".encode(), "born_ip": b"\x0a\x00\x00\x01", "born_port": 1},
        {"topic": b"A", "store_ip": b"\x0a\x00\x00\x09"},
    ]
    buf = records(specs)
    got = R.decode_messages(buf)
    assert got == reference(buf)
    assert [m.topic for m in got] == ["A", "A", "B", "%RETRY%g", "主题", "A"]
    assert [m.born_host for m in got] == [
        ("10.0.0.1", 1),
        ("10.0.0.1", 2),
        ("10.0.0.2", 1),
        ("10.0.0.5", 5000),
        ("10.0.0.1", 1),
        ("10.0.0.5", 5000),
    ]
    assert [m.store_host for m in got] == [
        ("127.0.0.1", 10911),
        ("127.0.0.1", 10911),
        ("127.0.0.1", 10921),
        ("10.0.0.9", 10911),
        ("127.0.0.1", 10911),
        ("10.0.0.9", 10911),
    ]
    # no UNIQ_KEY: the offset msgId of each record's own store host
    assert [m.msg_id for m in got] == [m.offset_msg_id for m in got]


@pytest.mark.parametrize(
    "text",
    [
        "",
        "\x02",
        "\x02\x02",
        "UNIQ_KEY\x01AB\x02",
        "UNIQ_KEY\x01AB",  # no trailing separator (other clients)
        "TAGS\x01t\x02KEYS\x01k1 k2\x02",
        "TAGS\x01t\x02KEYS\x01k1\x02\x02",
        "a\x01b\x01c\x02",  # the value keeps a later name/value separator
        "\x01v\x02noseparator\x02k\x01\x02",  # empty name, no separator, empty value
        "k\x01first\x02k\x01second\x02",
        "键\x01值\x02",
    ],
)
def test_properties_as_decode_properties(text: str) -> None:
    buf = records([{"properties": text.encode()}, {"properties": text.encode()}])
    got = R.decode_messages(buf)
    assert got == reference(buf)
    assert got[0].properties == decode_properties(text) == got[1].properties
    assert got[0].properties is not got[1].properties  # each message owns its dict


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from("ab\x01\x02é€"), max_size=24))
def test_any_properties_text_as_decode_properties(text: str) -> None:
    buf = records([{"properties": text.encode()}])
    (got,) = R.decode_messages(buf)
    assert got.properties == decode_properties(text)
    assert [got] == reference(buf)


def test_lengths_past_the_body_raise_value_error() -> None:
    good = records([{"body": b"x" * 10, "topic": b"T"}])
    topic_len_pos = R.BODY_POS + 10
    props_len_pos = topic_len_pos + 2
    for buf in (
        corrupt(good, topic_len_pos, ">B", 120),  # the topic runs past the end of the body
        corrupt(good, props_len_pos, ">H", 0x7FFF),  # so do the properties
        corrupt(good, props_len_pos, ">H", 0x8001),  # a negative properties length
        corrupt(good, topic_len_pos, ">B", 200),  # a negative topic length
    ):
        with pytest.raises(ValueError):
            R.decode_messages(buf)
        with pytest.raises(ValueError):
            reference(buf)


def test_decoded_messages_are_ordinary_message_ext() -> None:
    buf = body_of(2)
    first = R.decode_messages(buf)[0]
    built = MessageExt(**{f.name: getattr(first, f.name) for f in dataclasses.fields(MessageExt)})
    assert type(first) is MessageExt and first == built
    assert repr(first) == repr(built)
    assert dataclasses.replace(first, topic="other").topic == "other"
    first.topic = "changed"
    first.reconsume_times += 1
    assert (first.topic, first.reconsume_times) == ("changed", built.reconsume_times + 1)
