"""Sans-I/O codecs of the master/slave replication stream (upstream ``HAConnection`` / ``HAClient``).

Two one-way byte streams share one TCP connection, big-endian (seed 001, digest 3.10):

Slave -> master, ``REPORT`` repeated::

    int64 maxPhyOffset     the slave's CommitLog max offset: on connect, on progress, every 5 s

The master only acts on the **last complete** 8-byte report it has read (upstream rounds the read
position down to a multiple of 8); partial trailing bytes wait for the next read.

Master -> slave, ``FRAME_HEADER`` + body repeated::

    int64 phyOffset        CommitLog offset of the first body byte
    int32 bodySize         0 = heartbeat; otherwise raw CommitLog bytes, at most haTransferBatchSize
    bytes body             may cut a record in half: it is raw bytes, not messages

Metadata notices, master -> slave, only to a slave that announced ``FEATURE_METADATA_NOTICE`` in
its handshake (``handshake.py``), so a slave that never asked sees the stream above unchanged::

    int64 -1               METADATA_NOTICE_OFFSET: not a CommitLog offset
    int32 bodySize         >= 24 (later versions may append fields; a reader skips them)
    int64 topicConfig      the master's topic config version (its DataVersion counter)
    int64 subscriptionGroup    the subscription group config version
    int64 consumerOffset   a counter of committed-offset changes

The master sends one when the slave connects and again whenever a version moves (checked on every
writer round, at most 100 ms apart); the slave fetches what moved over the remoting port at once
instead of waiting for its haSlaveSyncInterval round (upstream has only that round).

Confirm offset notices, master -> slave, only to a slave that announced ``FEATURE_CONFIRM_OFFSET``
(a controller-mode replica)::

    int64 -2               CONFIRM_OFFSET_NOTICE_OFFSET
    int32 bodySize         >= 8 (a reader skips fields appended later)
    int64 confirmOffset    the master's confirm offset: what every SyncStateSet member holds

Upstream carries the same value in every transfer header of its controller-mode stream
(``AutoSwitchHAConnection``); here it is a notice sent before the first frame and whenever the
value moves, so the plain 4.x frames stay as they are. A slave dispatches (serves) only up to
``min(confirmOffset, its own end)``.

Nothing here touches a socket; ``master.py`` and ``slave.py`` feed bytes in and act on the result.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

# slave -> master: the slave's max CommitLog offset
REPORT = struct.Struct(">q")
# master -> slave: phyOffset (int64), bodySize (int32)
FRAME_HEADER = struct.Struct(">qi")

# master -> slave metadata notice: its frame offset, and the body's versions (see module docstring)
METADATA_NOTICE_OFFSET = -1
METADATA_NOTICE = struct.Struct(">qqq")
# a notice body beyond this is a broken stream (24 bytes today; room for fields added later)
MAX_NOTICE_BODY = 4096

# master -> slave confirm offset notice: its frame offset, and the body
CONFIRM_OFFSET_NOTICE_OFFSET = -2
CONFIRM_OFFSET_NOTICE = struct.Struct(">q")

# A frame body larger than this is a broken stream, not a big batch: the master never sends more
# than haTransferBatchSize (32 KiB by default) and a CommitLog file is at most 2 GiB.
MAX_FRAME_BODY = 64 * 1024 * 1024


class HAProtocolError(Exception):
    """The peer sent bytes that cannot be a replication stream: close the connection."""


def encode_report(offset: int) -> bytes:
    """The 8-byte report a slave sends (its CommitLog max offset)."""
    if offset < 0:
        raise ValueError(f"a slave offset report must be >= 0, got {offset}")
    return REPORT.pack(offset)


def encode_frame_header(offset: int, size: int) -> bytes:
    """The 12-byte header of a transfer frame; ``size == 0`` makes it a heartbeat."""
    if offset < 0 or size < 0:
        raise ValueError(f"frame offset and size must be >= 0, got offset={offset} size={size}")
    return FRAME_HEADER.pack(offset, size)


@dataclass(frozen=True, slots=True)
class MetadataVersions:
    """Versions of a master's metadata files; only compared for equality, never ordered."""

    topic_config: int
    subscription_group: int
    consumer_offset: int


def encode_metadata_notice(versions: MetadataVersions) -> bytes:
    """One whole notice frame (header and body)."""
    return FRAME_HEADER.pack(METADATA_NOTICE_OFFSET, METADATA_NOTICE.size) + METADATA_NOTICE.pack(
        versions.topic_config, versions.subscription_group, versions.consumer_offset
    )


@dataclass(frozen=True, slots=True)
class ConfirmOffset:
    """The master's confirm offset (upstream ``AutoSwitchHAService#computeConfirmOffset``)."""

    offset: int


def encode_confirm_offset(offset: int) -> bytes:
    """One whole confirm offset notice frame (header and body)."""
    if offset < 0:
        raise ValueError(f"a confirm offset must be >= 0, got {offset}")
    return FRAME_HEADER.pack(
        CONFIRM_OFFSET_NOTICE_OFFSET, CONFIRM_OFFSET_NOTICE.size
    ) + CONFIRM_OFFSET_NOTICE.pack(offset)


def transfer_size(available: int, batch_size: int) -> int:
    """How many of ``available`` bytes go into the next frame (upstream ``haTransferBatchSize``)."""
    return min(available, batch_size)


def first_transfer_offset(slave_offset: int, master_max_offset: int, file_size: int) -> int:
    """Where the master starts pushing to a slave that has just reported ``slave_offset``.

    A slave with an empty store (report 0) starts at the start of the master's last CommitLog file,
    not at 0 (upstream ``WriteSocketService``: ``masterOffset - masterOffset % fileSize``), so a
    new slave does not copy the whole retention window. Any other slave continues where it is.
    """
    if slave_offset != 0:
        return slave_offset
    return max(0, master_max_offset - master_max_offset % file_size)


class ReportReader:
    """Master side: feed bytes from the slave, get the latest complete offset report.

    The buffer never holds more than 7 bytes between feeds, whatever the slave sends.
    """

    __slots__ = ("_tail",)

    def __init__(self) -> None:
        self._tail = b""

    def feed(self, data: bytes | bytearray | memoryview) -> int | None:
        """Return the last complete report in ``data`` (with earlier leftovers), or None."""
        buf = self._tail + bytes(data)
        whole = len(buf) - len(buf) % REPORT.size
        self._tail = buf[whole:]
        if whole == 0:
            return None
        (offset,) = REPORT.unpack_from(buf, whole - REPORT.size)
        if offset < 0:
            raise HAProtocolError(f"slave reported a negative offset {offset}")
        return int(offset)


@dataclass(frozen=True, slots=True)
class TransferFrame:
    """One master -> slave frame. ``body`` is empty for a heartbeat."""

    offset: int
    body: bytes

    @property
    def is_heartbeat(self) -> bool:
        return not self.body

    @property
    def end_offset(self) -> int:
        return self.offset + len(self.body)


Frame = TransferFrame | MetadataVersions | ConfirmOffset


class FrameReader:
    """Slave side: feed bytes from the master, get complete transfer frames (and, when
    ``accept_notices`` / ``accept_confirm``, the metadata / confirm offset notices between
    them, in stream order).

    Consumed bytes are dropped once per feed, so a slow drip of bytes stays linear.
    """

    __slots__ = ("_buf", "accept_confirm", "accept_notices", "max_body")

    def __init__(
        self,
        max_body: int = MAX_FRAME_BODY,
        *,
        accept_notices: bool = False,
        accept_confirm: bool = False,
    ) -> None:
        self._buf = bytearray()
        self.max_body = max_body
        self.accept_notices = accept_notices
        self.accept_confirm = accept_confirm

    def feed(self, data: bytes | bytearray | memoryview) -> list[Frame]:
        buf = self._buf
        buf += data
        frames: list[Frame] = []
        pos = 0
        end = len(buf)
        head = FRAME_HEADER.size
        while end - pos >= head:
            offset, size = FRAME_HEADER.unpack_from(buf, pos)
            notice = offset == METADATA_NOTICE_OFFSET and self.accept_notices
            confirm = offset == CONFIRM_OFFSET_NOTICE_OFFSET and self.accept_confirm
            if notice and not METADATA_NOTICE.size <= size <= MAX_NOTICE_BODY:
                self._buf = bytearray()
                raise HAProtocolError(
                    f"bad metadata notice: size={size} (must be "
                    f"{METADATA_NOTICE.size}..{MAX_NOTICE_BODY}): stream out of sync"
                )
            if confirm and not CONFIRM_OFFSET_NOTICE.size <= size <= MAX_NOTICE_BODY:
                self._buf = bytearray()
                raise HAProtocolError(
                    f"bad confirm offset notice: size={size} (must be "
                    f"{CONFIRM_OFFSET_NOTICE.size}..{MAX_NOTICE_BODY}): stream out of sync"
                )
            if not (notice or confirm) and (offset < 0 or size < 0 or size > self.max_body):
                self._buf = bytearray()
                raise HAProtocolError(
                    f"bad transfer frame header: offset={offset} size={size} "
                    f"(size must be 0..{self.max_body}): stream out of sync"
                )
            if end - pos - head < size:
                break
            if notice:
                frames.append(MetadataVersions(*METADATA_NOTICE.unpack_from(buf, pos + head)))
            elif confirm:
                (value,) = CONFIRM_OFFSET_NOTICE.unpack_from(buf, pos + head)
                if value < 0:
                    self._buf = bytearray()
                    raise HAProtocolError(f"negative confirm offset {value}")
                frames.append(ConfirmOffset(int(value)))
            else:
                with memoryview(buf) as view:  # one copy out of the buffer, not two
                    body = bytes(view[pos + head : pos + head + size])
                frames.append(TransferFrame(offset, body))
            pos += head + size
        if pos:
            del buf[:pos]
        return frames

    @property
    def buffered(self) -> int:
        """Bytes received but not yet part of a complete frame."""
        return len(self._buf)
