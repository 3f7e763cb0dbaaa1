"""Frame cutting is independent of how reads split the stream (chunks kept, joined once)."""

from __future__ import annotations

import itertools
import struct

import pytest
from ferrymq.remoting.frame import FrameDecoder, FrameError
from hypothesis import given, settings
from hypothesis import strategies as st


@settings(max_examples=300, deadline=None)
@given(
    payloads=st.lists(st.binary(min_size=0, max_size=3000), min_size=1, max_size=12),
    cuts=st.lists(st.integers(0, 40_000), max_size=30),
    as_memoryview=st.booleans(),
)
def test_any_split_yields_the_same_frames(
    payloads: list[bytes], cuts: list[int], as_memoryview: bool
) -> None:
    frames = [struct.pack(">i", 4 + len(p)) + b"HDR!" + p for p in payloads]
    wire = b"".join(frames)
    points = sorted({0, len(wire), *(c % (len(wire) + 1) for c in cuts)})
    decoder = FrameDecoder()
    out: list[bytes] = []
    for a, b in itertools.pairwise(points):
        piece = wire[a:b]
        out += decoder.feed(memoryview(piece) if as_memoryview else piece)
        assert decoder.buffered == b - sum(len(f) for f in frames[: len(out)])
    assert out == [f[4:] for f in frames]
    assert decoder.buffered == 0


def test_bad_length_in_a_later_chunk_is_refused_and_the_buffer_dropped() -> None:
    decoder = FrameDecoder(max_frame_size=1000)
    assert decoder.feed(b"\x00\x00") == []
    with pytest.raises(FrameError):
        decoder.feed(b"\x10\x00")  # 4096 > 1000
    assert decoder.buffered == 0
