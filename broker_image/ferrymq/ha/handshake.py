"""What a ferrymq slave may send before its first offset report, on top of the 4.x stream.

Two optional blocks, each a negative int64 magic (so neither can be a 4.x offset report) and one
int64 value, in this order::

    int64 FEATURES_MAGIC    then int64 feature bits: what the slave understands from the master
    int64 HANDSHAKE_MAGIC   then int64 brokerId: the replica's controller-mode brokerId

and then offset reports as usual. The features block is how a slave asks for metadata notices
(``FEATURE_METADATA_NOTICE``, see ``protocol.py``): a master sends them to no one else, so a
slave that does not send the block sees the plain 4.x stream. A controller-mode master must know
*which* replica each HA connection is, to keep the SyncStateSet and to wait for every member's ack
(``allAckInSyncStateSet``); the 4.x stream names no one, hence the brokerId block.

A master reads 8 bytes at a time: a magic means its block follows; anything else is a plain 4.x
slave's first report and is handed on unchanged. A master older than the features block refuses
it (a negative offset): the slave then connects again without it (``slave.py``).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from ferrymq.ha.protocol import REPORT, HAProtocolError

HANDSHAKE_MAGIC = -0x4645_5252_594D_51  # "FERRYMQ", negated
FEATURES_MAGIC = -0x4645_5252_594D_46  # "FERRYMF", negated
# the slave reads metadata notices (protocol.METADATA_NOTICE) between transfer frames
FEATURE_METADATA_NOTICE = 1
# the slave reads confirm offset notices (protocol.CONFIRM_OFFSET_NOTICE): a controller-mode
# replica serves only what its master's SyncStateSet confirmed
FEATURE_CONFIRM_OFFSET = 2


def encode_handshake(broker_id: int) -> bytes:
    return REPORT.pack(HANDSHAKE_MAGIC) + REPORT.pack(broker_id)


def encode_features(features: int) -> bytes:
    return REPORT.pack(FEATURES_MAGIC) + REPORT.pack(features)


@dataclass(frozen=True, slots=True)
class Handshake:
    """What the slave said before its reports; ``pending`` are bytes for the report reader."""

    broker_id: int | None = None
    features: int = 0
    pending: bytes = b""


async def read_handshake(reader: asyncio.StreamReader, timeout: float) -> Handshake:
    """The handshake blocks at the start of a connection (none for a 4.x slave).

    Raises HAProtocolError when the slave goes away or stays silent first.
    """
    features = 0
    try:
        first = await asyncio.wait_for(reader.readexactly(REPORT.size), timeout)
        (value,) = REPORT.unpack(first)
        if value == FEATURES_MAGIC:
            raw = await asyncio.wait_for(reader.readexactly(REPORT.size), timeout)
            (features,) = REPORT.unpack(raw)
            first = await asyncio.wait_for(reader.readexactly(REPORT.size), timeout)
            (value,) = REPORT.unpack(first)
        if value != HANDSHAKE_MAGIC:
            return Handshake(features=features, pending=first)
        raw = await asyncio.wait_for(reader.readexactly(REPORT.size), timeout)
    except asyncio.IncompleteReadError:
        raise HAProtocolError("slave closed the connection before its first report") from None
    except TimeoutError:
        raise HAProtocolError(f"no first report from the slave for {timeout:g} s") from None
    (broker_id,) = REPORT.unpack(raw)
    if broker_id < 1:
        raise HAProtocolError(f"slave handshake names brokerId {broker_id}")
    return Handshake(broker_id=int(broker_id), features=features)
