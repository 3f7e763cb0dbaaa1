"""CommitLog record v1: encode/decode round trip, blank record, and torn/corrupt detection."""

from __future__ import annotations

import zlib

from ferrymq.message import MessageSysFlag, decode_properties, encode_properties, pack_host
from ferrymq.store import record as rec
from hypothesis import given, settings
from hypothesis import strategies as st

_text = st.text(
    alphabet=st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)),
    max_size=20,
)
_fields = st.fixed_dictionaries(
    {
        "queue_id": st.integers(0, 2**31 - 1),
        "flag": st.integers(-(2**31), 2**31 - 1),
        "queue_offset": st.integers(0, 2**62),
        "physical_offset": st.integers(0, 2**62),
        "sys_flag": st.sampled_from([0, 2, 4, 8, 12]),
        "born_timestamp": st.integers(0, 2**50),
        "born_ip": st.ip_addresses(v=4).map(lambda ip: pack_host(str(ip))),
        "born_port": st.integers(0, 65535),
        "store_timestamp": st.integers(1, 2**50),
        "store_ip": st.ip_addresses(v=4).map(lambda ip: pack_host(str(ip))),
        "store_port": st.integers(0, 65535),
        "reconsume_times": st.integers(0, 100),
        "prepared_transaction_offset": st.integers(0, 2**62),
        "body": st.binary(max_size=300),
        "topic": st.text(
            alphabet="abcdefghijklmnopqrstuvwxyz%_-0123456789", min_size=1, max_size=127
        ).map(str.encode),
        "properties": st.dictionaries(_text.filter(bool), _text, max_size=5).map(
            lambda d: encode_properties(d).encode("utf-8")
        ),
    }
)


@settings(deadline=None)  # a shared, loaded machine: no per-example deadline
@given(_fields, st.integers(0, 64))
def test_round_trip(fields: dict, lead: int) -> None:
    size = rec.record_size(len(fields["body"]), len(fields["topic"]), len(fields["properties"]))
    buf = bytearray(lead + size + 8)
    assert rec.encode_record_into(buf, lead, **fields) == size
    check = rec.check_record(buf, lead, lead + size)
    assert check.kind is rec.RecordKind.MESSAGE and check.size == size
    r = check.record
    assert r is not None
    assert r.queue_id == fields["queue_id"] and r.flag == fields["flag"]
    assert r.queue_offset == fields["queue_offset"]
    assert r.physical_offset == fields["physical_offset"]
    assert r.sys_flag == fields["sys_flag"]
    assert r.store_timestamp == fields["store_timestamp"]
    assert r.topic.encode() == fields["topic"]
    assert bytes(buf[r.body_pos : r.body_pos + r.body_len]) == fields["body"]
    assert r.body_crc == zlib.crc32(fields["body"]) & 0x7FFFFFFF
    ext = rec.decode_message_ext(buf, lead, lead + size, check_crc=True)
    assert ext.body == fields["body"] and ext.store_size == size
    assert ext.store_host[1] == fields["store_port"]
    # Every byte is accounted for: a decoder walking the fields lands exactly on the end.
    assert list(rec.iter_records(bytes(buf[lead : lead + size]))) == [(0, size)]


def _one(body: bytes = b"payload") -> bytearray:
    buf = bytearray(rec.record_size(len(body), 1, 0))
    rec.encode_record_into(
        buf,
        0,
        queue_id=0,
        flag=0,
        queue_offset=0,
        physical_offset=0,
        sys_flag=0,
        born_timestamp=1,
        born_ip=b"\x7f\x00\x00\x01",
        born_port=1,
        store_timestamp=2,
        store_ip=b"\x7f\x00\x00\x01",
        store_port=2,
        reconsume_times=0,
        prepared_transaction_offset=0,
        body=body,
        topic=b"T",
        properties=b"",
    )
    return buf


@settings(deadline=None)  # a shared, loaded machine: no per-example deadline
@given(st.data())
def test_any_truncation_or_flip_is_detected_or_harmless(data: st.DataObject) -> None:
    buf = _one(b"0123456789" * 5)
    size = len(buf)
    cut = data.draw(st.integers(0, size - 1))
    assert rec.check_record(buf[:cut] + bytes(8), 0, cut).kind is not rec.RecordKind.MESSAGE
    pos = data.draw(st.integers(0, size - 1))
    flipped = bytearray(buf)
    flipped[pos] ^= data.draw(st.integers(1, 255))
    check = rec.check_record(flipped, 0, size)
    if check.kind is rec.RecordKind.MESSAGE:
        # Only fields the scan cannot verify may change undetected: never size/body/lengths.
        assert check.size == size and check.record is not None
        assert (
            bytes(flipped[check.record.body_pos : check.record.body_pos + 50]) == b"0123456789" * 5
        )


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=400))
def test_random_bytes_never_raise(junk: bytes) -> None:
    check = rec.check_record(junk, 0, len(junk))
    assert check.kind in set(rec.RecordKind)


def test_blank_record_and_iter_errors() -> None:
    buf = bytearray(64)
    rec.encode_blank_into(buf, 0, 64)
    check = rec.check_record(buf, 0, 64)
    assert check.kind is rec.RecordKind.BLANK and check.size == 64
    assert rec.check_record(bytes(64), 0, 64).kind is rec.RecordKind.END
    one = bytes(_one())
    assert len(list(rec.iter_records(one + one))) == 2
    try:
        list(rec.iter_records(one + one[:10]))
    except ValueError as exc:
        assert "record at byte" in str(exc) or "trailing" in str(exc)
    else:
        raise AssertionError("a truncated pull body must not decode silently")


def test_validate_lengths() -> None:
    assert rec.validate_lengths(127, 32767, 100, 4 << 20) is None
    assert "topic" in (rec.validate_lengths(128, 0, 0, 100) or "")
    assert "properties" in (rec.validate_lengths(1, 32768, 0, 100) or "")
    assert "maxMessageSize" in (rec.validate_lengths(1, 0, 101, 100) or "")


def test_compressed_body_is_inflated_on_decode() -> None:
    raw = b"abc" * 1000
    body = zlib.compress(raw)
    buf = bytearray(rec.record_size(len(body), 1, 0))
    rec.encode_record_into(
        buf,
        0,
        queue_id=0,
        flag=0,
        queue_offset=0,
        physical_offset=0,
        sys_flag=MessageSysFlag.COMPRESSED_FLAG,
        born_timestamp=1,
        born_ip=b"\x7f\x00\x00\x01",
        born_port=1,
        store_timestamp=2,
        store_ip=b"\x7f\x00\x00\x01",
        store_port=2,
        reconsume_times=0,
        prepared_transaction_offset=0,
        body=body,
        topic=b"T",
        properties=b"",
    )
    assert rec.decode_message_ext(buf).body == raw
    assert rec.decode_message_ext(buf, decompress_body=False).body == body


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_lean_parsers_agree_with_check_record(data: st.DataObject) -> None:
    """Recovery's validate_record and reput's parse_for_dispatch accept exactly what
    check_record accepts, on intact, truncated and bit-flipped records."""
    buf = _one(data.draw(st.binary(max_size=80)))
    if data.draw(st.booleans()):
        buf[data.draw(st.integers(0, len(buf) - 1))] ^= data.draw(st.integers(1, 255))
    limit = data.draw(st.integers(0, len(buf)))
    view = memoryview(bytes(buf))
    full = rec.check_record(view, 0, limit, check_crc=True)
    kind, size, phy, ts = rec.validate_record(view, 0, limit, True)
    assert kind is full.kind and size == full.size
    if full.record is not None:
        assert (phy, ts) == (full.record.physical_offset, full.record.store_timestamp)
    no_crc = rec.check_record(view, 0, limit, check_crc=False)
    dkind, dsize, fields = rec.parse_for_dispatch(view, 0, limit)
    assert dkind is no_crc.kind and dsize == no_crc.size
    if no_crc.record is not None:
        assert fields is not None
        assert fields[7] == no_crc.record.topic
        assert decode_properties(fields[8]) == no_crc.record.properties


def test_ipv6_flag_is_rejected_by_every_parser() -> None:
    buf = _one()
    buf[rec.SYS_FLAG_POS + 3] |= MessageSysFlag.BORNHOST_V6_FLAG
    view = memoryview(bytes(buf))
    assert rec.check_record(view, 0, len(buf)).kind is rec.RecordKind.INVALID
    assert rec.validate_record(view, 0, len(buf), True)[0] is rec.RecordKind.INVALID
    assert rec.parse_for_dispatch(view, 0, len(buf))[0] is rec.RecordKind.INVALID
