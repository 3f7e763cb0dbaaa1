"""Round trips of the frame and command codecs, in both header encodings, and their refusals."""

from __future__ import annotations

import struct

import pytest
from ferrymq.remoting import fastjson
from ferrymq.remoting.command import (
    SERIALIZE_JSON,
    SERIALIZE_ROCKETMQ,
    CommandDecodeError,
    RemotingCommand,
    decode_command,
)
from ferrymq.remoting.frame import FrameDecoder, FrameError
from hypothesis import given
from hypothesis import strategies as st

ext_maps = st.dictionaries(st.text(min_size=1, max_size=20), st.text(max_size=50), max_size=8)


@given(
    code=st.integers(-32768, 32767),
    opaque=st.integers(0, 2**31 - 1),
    flag=st.integers(0, 3),
    remark=st.none() | st.text(max_size=40),
    ext=ext_maps,
    body=st.binary(max_size=300),
    serialize=st.sampled_from([SERIALIZE_JSON, SERIALIZE_ROCKETMQ]),
    chunk=st.integers(1, 64),
)
def test_command_round_trip_through_frames(
    code: int,
    opaque: int,
    flag: int,
    remark: str | None,
    ext: dict[str, str],
    body: bytes,
    serialize: int,
    chunk: int,
) -> None:
    cmd = RemotingCommand(
        code=code,
        ext_fields=ext,
        body=body or None,
        opaque=opaque,
        flag=flag,
        remark=remark,
        serialize_type=serialize,
    )
    wire = cmd.to_bytes() * 2
    decoder = FrameDecoder()
    frames: list[bytes] = []
    for i in range(0, len(wire), chunk):  # slow-drip delivery
        frames += decoder.feed(wire[i : i + chunk])
    assert len(frames) == 2 and decoder.buffered == 0
    out = decode_command(frames[0])
    assert (out.code, out.opaque, out.flag, out.ext_fields) == (code, opaque, flag, ext)
    assert out.remark == (remark if serialize == SERIALIZE_JSON or remark else None)
    assert out.body_bytes() == body
    assert out.serialize_type == serialize


def test_response_extfields_are_strings() -> None:
    req = RemotingCommand.request(11, {"queueId": 3})
    resp = req.response(0, ext_fields={"nextBeginOffset": 42, "flag": True, "skip": None})
    raw = resp.encode_header()
    assert b'"nextBeginOffset":"42"' in raw and b'"flag":"true"' in raw and b"skip" not in raw
    assert resp.opaque == req.opaque and resp.is_response


def test_lenient_inbound_header() -> None:
    header = b'{"code":34,"language":1,"opaque":7,"flag":0,"extFields":{"a":1,"b":true,"c":"x"}}'
    frame = struct.pack(">i", len(header)) + header
    cmd = decode_command(frame)
    assert cmd.language == "CPP" and cmd.ext_fields == {"a": "1", "b": "true", "c": "x"}


@pytest.mark.parametrize(
    "frame",
    [
        b"\x00",
        struct.pack(">i", 100) + b"{}",
        struct.pack(">i", 2) + b"[]",
        struct.pack(">i", 8) + b'{"x":1}}',
        struct.pack(">i", (7 << 24) | 2) + b"{}",
        struct.pack(">i", (1 << 24) | 3) + b"\x00\x01\x02",
    ],
)
def test_bad_headers_raise_decode_error(frame: bytes) -> None:
    with pytest.raises(CommandDecodeError):
        decode_command(frame)


def test_oversized_and_negative_frames_are_refused() -> None:
    with pytest.raises(FrameError):
        FrameDecoder().feed(struct.pack(">i", 16 * 1024 * 1024 + 1))
    with pytest.raises(FrameError):
        FrameDecoder().feed(struct.pack(">i", -5))


def test_fastjson_object_keys_round_trip() -> None:
    key = fastjson.ObjectKey.of({"topic": "t", "brokerName": "b", "queueId": 0})
    data = {"offsetTable": {key: {"brokerOffset": 5, "consumerOffset": 3}}, "consumeTps": 1.5}
    text = fastjson.dumps(data)
    assert text.startswith(b'{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"t"}:')
    back = fastjson.loads(text)
    assert back["offsetTable"][key] == {"brokerOffset": 5, "consumerOffset": 3}
    assert fastjson.loads(b'{"brokerAddrs":{0:"127.0.0.1:10911"}}') == {
        "brokerAddrs": {0: "127.0.0.1:10911"}
    }
