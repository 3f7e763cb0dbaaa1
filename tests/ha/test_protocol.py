"""Byte-level tests of the replication codecs (ferrymq.ha.protocol)."""

from __future__ import annotations

import struct

import pytest
from ferrymq.ha.protocol import (
    FRAME_HEADER,
    FrameReader,
    HAProtocolError,
    ReportReader,
    TransferFrame,
    encode_frame_header,
    encode_report,
    first_transfer_offset,
    transfer_size,
)
from hypothesis import given
from hypothesis import strategies as st


def test_report_is_eight_big_endian_bytes() -> None:
    assert encode_report(0x0102030405060708) == bytes(range(1, 9))
    with pytest.raises(ValueError, match=">= 0"):
        encode_report(-1)


def test_frame_header_is_twelve_bytes() -> None:
    assert encode_frame_header(1, 2) == struct.pack(">qi", 1, 2)
    assert FRAME_HEADER.size == 12


def test_last_complete_report_wins() -> None:
    reader = ReportReader()
    stream = encode_report(10) + encode_report(20) + encode_report(30)[:5]
    assert reader.feed(stream) == 20
    # the partial third report completes with the next read
    assert reader.feed(encode_report(30)[5:]) == 30
    assert reader.feed(b"\x00\x00") is None


def test_negative_report_is_a_protocol_error() -> None:
    with pytest.raises(HAProtocolError, match="negative"):
        ReportReader().feed(struct.pack(">q", -5))


@given(
    st.lists(st.integers(min_value=0, max_value=2**62), min_size=1, max_size=20),
    st.data(),
)
def test_reports_survive_any_split(offsets: list[int], data: st.DataObject) -> None:
    stream = b"".join(encode_report(o) for o in offsets)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=10)))
    reader = ReportReader()
    seen: list[int] = []
    prev = 0
    for cut in [*cuts, len(stream)]:
        got = reader.feed(stream[prev:cut])
        prev = cut
        if got is not None:
            seen.append(got)
    assert seen[-1] == offsets[-1]
    assert all(s in offsets for s in seen)


@given(
    st.lists(st.tuples(st.integers(0, 2**60), st.binary(max_size=300)), min_size=1, max_size=15),
    st.data(),
)
def test_frames_round_trip_under_any_split(
    frames: list[tuple[int, bytes]], data: st.DataObject
) -> None:
    stream = b"".join(encode_frame_header(o, len(b)) + b for o, b in frames)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=12)))
    reader = FrameReader()
    out: list[TransferFrame] = []
    prev = 0
    for cut in [*cuts, len(stream)]:
        out.extend(reader.feed(stream[prev:cut]))
        prev = cut
    assert [(f.offset, f.body) for f in out] == frames
    assert reader.buffered == 0


def test_heartbeat_frame() -> None:
    (frame,) = FrameReader().feed(encode_frame_header(4096, 0))
    assert frame.is_heartbeat and frame.end_offset == 4096


@pytest.mark.parametrize(
    "header",
    [struct.pack(">qi", -1, 0), struct.pack(">qi", 0, -3), struct.pack(">qi", 0, 1 << 30)],
)
def test_bad_frame_headers_are_refused(header: bytes) -> None:
    with pytest.raises(HAProtocolError, match="out of sync"):
        FrameReader().feed(header)


def test_new_empty_slave_starts_at_the_masters_last_file() -> None:
    assert first_transfer_offset(0, 0, 1024) == 0
    assert first_transfer_offset(0, 5000, 1024) == 4096
    assert first_transfer_offset(0, 4096, 1024) == 4096
    assert first_transfer_offset(777, 5000, 1024) == 777


def test_transfer_batches_are_capped() -> None:
    assert transfer_size(100_000, 32 * 1024) == 32 * 1024
    assert transfer_size(10, 32 * 1024) == 10
