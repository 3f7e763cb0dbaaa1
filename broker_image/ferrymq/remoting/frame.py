"""Sans-I/O frame codec of the remoting protocol (upstream NettyDecoder/NettyEncoder).

Wire layout, big-endian::

    int32 totalLength      bytes after this field: 4 + headerLength + bodyLength
    int32 headerMark       (serializeType << 24) | headerLength
    bytes header           JSON (serializeType 0) or the compact binary form (serializeType 1)
    bytes body

``FrameDecoder`` only cuts frames; ``command.decode_command`` parses one. A frame over the 16 MiB cap
or with a nonsense length raises ``FrameError``: the connection that sent it is closed, never read on.
"""

from __future__ import annotations

import struct

MAX_FRAME_SIZE = 16 * 1024 * 1024
_INT = struct.Struct(">i")


class FrameError(Exception):
    """A frame that cannot be cut: the stream is out of sync and the connection must close."""


class FrameDecoder:
    """Accumulates bytes and yields complete frames (without their 4-byte length prefix).

    The buffer is consumed from the front in one slice per feed, so slow-drip input stays linear.
    """

    __slots__ = ("_buf", "max_frame_size")

    def __init__(self, max_frame_size: int = MAX_FRAME_SIZE) -> None:
        self._buf = bytearray()
        self.max_frame_size = max_frame_size

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        buf = self._buf
        buf += data
        frames: list[bytes] = []
        pos = 0
        end = len(buf)
        while end - pos >= 4:
            (length,) = _INT.unpack_from(buf, pos)
            if length < 4 or length > self.max_frame_size:
                self._buf = bytearray()
                raise FrameError(
                    f"frame length {length} outside 4..{self.max_frame_size} bytes: stream out of sync"
                )
            if end - pos - 4 < length:
                break
            frames.append(bytes(buf[pos + 4 : pos + 4 + length]))
            pos += 4 + length
        if pos:
            del buf[:pos]
        return frames

    @property
    def buffered(self) -> int:
        return len(self._buf)
