"""Master side of replication (upstream ``HAService.AcceptSocketService`` + ``HAConnection``).

The master listens on haListenPort. Each slave connection gets one :class:`HAConnection` with two
tasks on the event loop:

- reader: keeps the **last complete** 8-byte offset report (the slave's ack), feeds it to the
  SYNC_MASTER waiters, and drops the slave after haHousekeepingInterval (20 s) of silence;
- writer: waits for the first report, decides where to start (a new empty slave starts at the
  start of the master's last CommitLog file), then pushes ``[offset][size][raw bytes]`` frames of
  at most haTransferBatchSize, and a size-0 heartbeat after haSendHeartbeatInterval (5 s) idle.

A slave that asked for metadata notices in its handshake also gets one when it connects and one
whenever the broker's metadata versions move (checked by the writer on every round, at least every
100 ms), so a topic config change reaches it at once instead of with its next periodic sync.

A controller-mode slave that asked for it (``FEATURE_CONFIRM_OFFSET``) gets the master's confirm
offset before the first frame and whenever it moves (:attr:`HAMaster.confirm_offset_source`), so
it serves only what the SyncStateSet holds.

A slave whose first report cannot continue the master's CommitLog (ahead of it, before its oldest
file, or in the middle of a record) has diverged: it is refused, the connection is closed and the
reason is logged and kept in :attr:`HAMaster.refusals`, rather than fed bytes that would corrupt it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from ferrymq.ha.config import HAConfig
from ferrymq.ha.handshake import FEATURE_CONFIRM_OFFSET, FEATURE_METADATA_NOTICE, read_handshake
from ferrymq.ha.protocol import (
    HAProtocolError,
    MetadataVersions,
    ReportReader,
    encode_confirm_offset,
    encode_frame_header,
    encode_metadata_notice,
    first_transfer_offset,
)
from ferrymq.ha.store_port import ReplicationSource
from ferrymq.tasks import wait_event

log = logging.getLogger(__name__)

READ_CHUNK = 64 * 1024
# The writer re-checks for new data at least this often even without a wake-up (upstream 100 ms).
WRITER_IDLE_WAIT_S = 0.1


class WaitNotify:
    """Wakes every idle writer at once when new CommitLog data is there (upstream WaitNotifyObject)."""

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self._waiting = 0

    def wakeup_all(self) -> None:
        # called for every dispatched message: with no writer waiting there is nothing to wake
        # (a later waiter starts on a fresh event either way), so skip the new Event
        if not self._waiting:
            return
        event, self._event = self._event, asyncio.Event()
        event.set()

    async def wait(self, timeout: float) -> None:
        self._waiting += 1
        try:
            await wait_event(self._event, timeout)
        finally:
            self._waiting -= 1


def check_slave_start(source: ReplicationSource, slave_offset: int) -> str | None:
    """Why a slave reporting ``slave_offset`` cannot be continued, or None when it can.

    0 is an empty slave and is always fine (it starts at the master's last file).
    """
    if slave_offset == 0:
        return None
    master_max = source.max_offset()
    if slave_offset > master_max:
        return (
            f"slave offset {slave_offset} is ahead of the master's CommitLog end {master_max}: "
            "the slave holds data the master does not have (diverged)"
        )
    master_min = source.min_offset()
    if slave_offset < master_min:
        return (
            f"slave offset {slave_offset} is before the master's oldest CommitLog data "
            f"{master_min}: the bytes in between are gone, the slave cannot catch up"
        )
    if slave_offset != master_max and not source.is_record_boundary(slave_offset):
        return (
            f"slave offset {slave_offset} falls inside a record of the master's CommitLog: "
            "the slave's CommitLog has diverged from the master's"
        )
    return None


@dataclass(frozen=True, slots=True)
class Refusal:
    peer: str
    slave_offset: int
    reason: str
    at: float


class HAConnection:
    """One connected slave: a reader task and a writer task (upstream Read/WriteSocketService)."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        source: ReplicationSource,
        config: HAConfig,
        notify: WaitNotify,
        on_report: Callable[[int], None],
        on_refuse: Callable[[Refusal], None],
        metadata_versions: Callable[[], MetadataVersions] | None = None,
        confirm_offset: Callable[[], int | None] | None = None,
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._source = source
        self._config = config
        self._notify = notify
        self._on_report = on_report
        self._on_refuse = on_refuse
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.slave_ack_offset = -1
        self.slave_request_offset = -1
        self.next_transfer_from = -1
        # controller mode: the replica's brokerId from its handshake (None: a 4.x slave)
        self.slave_broker_id: int | None = None
        # feature bits from the slave's handshake (ha/handshake.py); 0 for a 4.x slave
        self.slave_features = 0
        self._metadata_versions = metadata_versions
        self.sent_versions: MetadataVersions | None = None
        self.notices_sent = 0
        self._confirm_offset = confirm_offset
        self.sent_confirm_offset = -1
        self.close_reason = ""
        self._first_report = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    def close(self) -> None:
        """Stop both directions; :meth:`run` then closes the socket and returns."""
        for task in self._tasks:
            task.cancel()

    async def run(self) -> None:
        """Serve the slave until either direction ends; then close the socket."""
        tasks = self._tasks = [
            asyncio.create_task(self._read_loop(), name=f"ha-read {self.peer}"),
            asyncio.create_task(self._write_loop(), name=f"ha-write {self.peer}"),
        ]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                if task.cancelled():
                    self.close_reason = self.close_reason or "master shutting down"
                    continue
                exc = task.exception()
                if isinstance(exc, HAProtocolError | OSError | ConnectionError):
                    self.close_reason = self.close_reason or str(exc) or type(exc).__name__
                elif exc is not None:
                    self.close_reason = f"internal error: {exc!r}"
                    log.error("HA connection %s failed", self.peer, exc_info=exc)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self._writer.close()
            with contextlib.suppress(OSError, ConnectionError):
                await self._writer.wait_closed()
            log.info("HA connection to slave %s closed: %s", self.peer, self.close_reason or "-")

    async def _read_loop(self) -> None:
        reports = ReportReader()
        housekeeping = self._config.housekeeping_interval_s
        handshake = await read_handshake(self._reader, housekeeping)
        self.slave_broker_id, self.slave_features = handshake.broker_id, handshake.features
        pending = handshake.pending
        # answer a features handshake at once, before the first report is judged: the slave
        # learns this master understood it even when it then refuses the slave (slave.py
        # falls back to the plain stream only after a hang-up with nothing received)
        self._send_notice_if_moved(self._writer)
        while True:
            try:
                data = pending or await asyncio.wait_for(
                    self._reader.read(READ_CHUNK), housekeeping
                )
                pending = b""
            except TimeoutError:
                self.close_reason = f"no report from the slave for {housekeeping:g} s"
                return
            if not data:
                self.close_reason = "slave closed the connection"
                return
            offset = reports.feed(data)
            if offset is None:
                continue
            if self.slave_request_offset < 0:
                refusal = check_slave_start(self._source, offset)
                if refusal is not None:
                    self.close_reason = f"refused: {refusal}"
                    self._on_refuse(Refusal(self.peer, offset, refusal, time.time()))
                    log.warning("HA: refusing slave %s: %s", self.peer, refusal)
                    return
                self.slave_request_offset = offset
                self._first_report.set()
            elif self.next_transfer_from >= 0 and offset > self.next_transfer_from:
                raise HAProtocolError(
                    f"slave acked offset {offset} beyond what was sent ({self.next_transfer_from})"
                )
            self.slave_ack_offset = offset
            self._on_report(offset)

    async def _write_loop(self) -> None:
        await self._first_report.wait()
        source = self._source
        config = self._config
        writer = self._writer
        self.next_transfer_from = first_transfer_offset(
            self.slave_request_offset, source.max_offset(), source.file_size
        )
        log.info(
            "HA: slave %s reported %d, transferring from %d",
            self.peer,
            self.slave_request_offset,
            self.next_transfer_from,
        )
        last_write = time.monotonic()
        while True:
            self._send_notice_if_moved(writer)
            self._send_confirm_if_moved(writer)
            data = source.read(self.next_transfer_from, config.transfer_batch_size)
            if data:
                # one write per frame: one send on the socket, no header-only segment
                writer.write(encode_frame_header(self.next_transfer_from, len(data)) + data)
                self.next_transfer_from += len(data)
                await writer.drain()
                # drain() returns without yielding while the socket takes everything: yield
                # anyway so catching up a long backlog never starves the broker's requests
                await asyncio.sleep(0)
                last_write = time.monotonic()
                continue
            if self.next_transfer_from < source.min_offset():
                # retention deleted the bytes this slave still needs: it can never catch up
                raise HAProtocolError(
                    f"the slave needs offset {self.next_transfer_from} but the master's oldest "
                    f"CommitLog data starts at {source.min_offset()} (expired)"
                )
            if time.monotonic() - last_write >= config.heartbeat_interval_s:
                writer.write(encode_frame_header(self.next_transfer_from, 0))
                await writer.drain()
                last_write = time.monotonic()
            wait = min(
                WRITER_IDLE_WAIT_S, config.heartbeat_interval_s - (time.monotonic() - last_write)
            )
            await self._notify.wait(max(wait, 0.001))

    def _send_confirm_if_moved(self, writer: asyncio.StreamWriter) -> None:
        """Tell a controller-mode slave the master's confirm offset when it moved."""
        if self._confirm_offset is None or not self.slave_features & FEATURE_CONFIRM_OFFSET:
            return
        offset = self._confirm_offset()
        if offset is not None and offset != self.sent_confirm_offset:
            writer.write(encode_confirm_offset(offset))
            self.sent_confirm_offset = offset

    def _send_notice_if_moved(self, writer: asyncio.StreamWriter) -> None:
        """Tell a slave that asked for it that the master's metadata moved (protocol.py)."""
        if self._metadata_versions is None or not self.slave_features & FEATURE_METADATA_NOTICE:
            return
        versions = self._metadata_versions()
        if versions != self.sent_versions:
            writer.write(encode_metadata_notice(versions))
            self.sent_versions = versions
            self.notices_sent += 1


class HAMaster:
    """The HA listener and its connections (upstream AcceptSocketService + connectionList)."""

    def __init__(
        self,
        source: ReplicationSource,
        config: HAConfig,
        *,
        on_report: Callable[[int], None],
        metadata_versions: Callable[[], MetadataVersions] | None = None,
    ) -> None:
        self._source = source
        self._config = config
        self._on_report = on_report
        self._metadata_versions = metadata_versions
        self.notify = WaitNotify()
        # controller mode: the master's confirm offset, told to slaves that ask (ha/auto_switch)
        self.confirm_offset_source: Callable[[], int] | None = None
        self.connections: list[HAConnection] = []
        self.refusals: deque[Refusal] = deque(maxlen=32)
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Future[None]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._accept,
            self._config.listen_host,
            self._config.listen_port,
            limit=READ_CHUNK,
            ssl=self._config.server_ssl,
        )

    @property
    def listening(self) -> bool:
        return self._server is not None and bool(self._server.sockets)

    @property
    def port(self) -> int:
        if self._server is None or not self._server.sockets:
            raise RuntimeError("HA listener is not started")
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def connection_count(self) -> int:
        return len(self.connections)

    def wakeup_writers(self) -> None:
        self.notify.wakeup_all()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = HAConnection(
            reader,
            writer,
            source=self._source,
            config=self._config,
            notify=self.notify,
            on_report=self._on_report,
            on_refuse=self.refusals.append,
            metadata_versions=self._metadata_versions,
            confirm_offset=self._current_confirm_offset,
        )
        log.info("HA: slave connected from %s", conn.peer)
        self.connections.append(conn)
        done = asyncio.get_running_loop().create_future()
        self._handlers.add(done)
        try:
            await conn.run()
        finally:
            self.connections.remove(conn)
            self._handlers.discard(done)
            done.set_result(None)

    def _current_confirm_offset(self) -> int | None:
        source = self.confirm_offset_source
        return None if source is None else source()

    async def shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        # Close connections rather than cancel the stream handlers: asyncio's stream protocol
        # logs a cancelled handler task as an error.
        for conn in list(self.connections):
            conn.close()
        if self._handlers:
            await asyncio.wait(list(self._handlers), timeout=5)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)
        self._server = None

    def slave_ack_offsets(self) -> dict[str, int]:
        return {c.peer: c.slave_ack_offset for c in self.connections}
