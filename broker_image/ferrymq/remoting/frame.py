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

    Frames are cut straight from the bytes a read delivered; only a frame split across reads is
    kept, as a list of chunks joined once when it is complete (a growing bytearray would be
    copied and reallocated on every read of a large batch frame).
    """

    __slots__ = ("_chunks", "_have", "_need", "max_frame_size")

    def __init__(self, max_frame_size: int = MAX_FRAME_SIZE) -> None:
        self._chunks: list[bytes] = []
        self._have = 0  # bytes held in _chunks
        self._need = 0  # bytes the held frame needs in all (0: length not known yet)
        self.max_frame_size = max_frame_size

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        if self._chunks:
            self._chunks.append(bytes(data))
            self._have += len(data)
            if self._need == 0 and self._have >= 4:
                head = b"".join(self._chunks)
                self._chunks = [head]
                self._need = 4 + self._check(_INT.unpack_from(head, 0)[0])
            if self._have < self._need or self._need == 0:
                return []
            data = b"".join(self._chunks)
            self._chunks = []
            self._have = self._need = 0
        elif not isinstance(data, bytes):
            data = bytes(data)
        frames: list[bytes] = []
        pos = 0
        end = len(data)
        while end - pos >= 4:
            length = self._check(_INT.unpack_from(data, pos)[0])
            if end - pos - 4 < length:
                self._need = 4 + length
                break
            frames.append(data[pos + 4 : pos + 4 + length])
            pos += 4 + length
        if pos < end:
            self._chunks = [data[pos:] if pos else data]
            self._have = end - pos
        return frames

    def _check(self, length: int) -> int:
        if length < 4 or length > self.max_frame_size:
            self._chunks = []
            self._have = self._need = 0
            raise FrameError(
                f"frame length {length} outside 4..{self.max_frame_size} bytes: stream out of sync"
            )
        return length

    @property
    def buffered(self) -> int:
        return self._have
