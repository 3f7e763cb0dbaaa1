"""The replica handshake of controller mode, in front of the 4.x replication stream.

A controller-mode master must know *which* replica each HA connection is, to keep the
SyncStateSet and to wait for every member's ack (``allAckInSyncStateSet``); the 4.x stream names
no one. So a controller-mode slave opens with 16 bytes::

    int64 HANDSHAKE_MAGIC   negative, so it can never be a 4.x offset report
    int64 brokerId          the replica's controller-mode brokerId

and then reports offsets as usual. A master reads the first 8 bytes: the magic means a handshake
follows; anything else is a plain 4.x slave's first report and is handed on unchanged.
"""

from __future__ import annotations

import asyncio

from ferrymq.ha.protocol import REPORT, HAProtocolError

HANDSHAKE_MAGIC = -0x4645_5252_594D_51  # "FERRYMQ", negated


def encode_handshake(broker_id: int) -> bytes:
    return REPORT.pack(HANDSHAKE_MAGIC) + REPORT.pack(broker_id)


async def read_handshake(reader: asyncio.StreamReader, timeout: float) -> tuple[int | None, bytes]:
    """``(brokerId or None, bytes to feed the report reader)`` from the start of a connection.

    Raises HAProtocolError when the slave goes away or stays silent first.
    """
    try:
        first = await asyncio.wait_for(reader.readexactly(REPORT.size), timeout)
        (value,) = REPORT.unpack(first)
        if value != HANDSHAKE_MAGIC:
            return None, first
        raw = await asyncio.wait_for(reader.readexactly(REPORT.size), timeout)
    except asyncio.IncompleteReadError:
        raise HAProtocolError("slave closed the connection before its first report") from None
    except TimeoutError:
        raise HAProtocolError(f"no first report from the slave for {timeout:g} s") from None
    (broker_id,) = REPORT.unpack(raw)
    if broker_id < 1:
        raise HAProtocolError(f"slave handshake names brokerId {broker_id}")
    return int(broker_id), b""
