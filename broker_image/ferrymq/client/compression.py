"""Body compression (upstream ``DefaultMQProducerImpl.tryToCompressMessage`` / ``UtilAll.compress``).

A single (non-batch) message whose body is larger than ``compressMsgBodyOverHowmuch`` (4 KiB) is
deflated into a zlib stream (what Java's ``Deflater`` writes, level 5 as upstream) and gets
``COMPRESSED_FLAG`` in its sysFlag; consumers inflate it when they see the flag (Java, C++, Go and
ferrymq's own record decoder all do), so compression is invisible to applications. The broker
stores the compressed bytes as sent. A body that does not shrink is sent as is.
"""

from __future__ import annotations

import zlib

from ferrymq.message import MessageSysFlag

__all__ = [
    "COMPRESS_MSG_BODY_OVER_HOW_MUCH",
    "ZIP_COMPRESS_LEVEL",
    "CompressionError",
    "compress_body",
    "decompress_body",
]

COMPRESS_MSG_BODY_OVER_HOW_MUCH = 4 * 1024
ZIP_COMPRESS_LEVEL = 5


class CompressionError(ValueError):
    """A body flagged as compressed that does not inflate."""


def compress_body(
    body: bytes,
    sys_flag: int = 0,
    *,
    threshold: int = COMPRESS_MSG_BODY_OVER_HOW_MUCH,
    level: int = ZIP_COMPRESS_LEVEL,
) -> tuple[bytes, int]:
    """``(body to send, sysFlag to send)``: compressed and flagged when over ``threshold``."""
    if len(body) <= threshold or sys_flag & MessageSysFlag.COMPRESSED_FLAG:
        return body, sys_flag
    packed = zlib.compress(body, level)
    if len(packed) >= len(body):
        return body, sys_flag
    return packed, sys_flag | MessageSysFlag.COMPRESSED_FLAG


def decompress_body(body: bytes, sys_flag: int) -> bytes:
    """The application body of a received message (inflated when flagged)."""
    if not sys_flag & MessageSysFlag.COMPRESSED_FLAG:
        return body
    try:
        return zlib.decompress(body)
    except zlib.error as exc:
        raise CompressionError(f"message body flagged compressed does not inflate: {exc}") from exc
