"""Slave side of replication (upstream ``HAService.HAClient``).

The client connects to the master's HA address (from the NameServer's answer to the slave's
registration, or the static haMasterAddress), reports its CommitLog max offset on connect, after
every batch of appended bytes and at least every haSendHeartbeatInterval, and appends the raw bytes
of each frame at exactly the offset the master names. The store's own dispatcher then builds the
slave's ConsumeQueues and index from them.

A frame whose offset is not the slave's own max offset means the two CommitLogs disagree: the
client disconnects and says why (:attr:`HAClient.last_error`) instead of writing bytes in the
wrong place. The client asks for metadata notices in its handshake and hands each one to
:attr:`HAClient.metadata_listener` (the slave's metadata sync); a master too old to know the
handshake closes the connection at once, and the next connection goes without it. A master silent for haHousekeepingInterval is dropped; reconnects wait 5 s.

A controller-mode replica also asks for the master's confirm offset and hands each value to
:attr:`HAClient.confirm_listener` (the store then dispatches only that far). A master that sends
CommitLog bytes before any confirm offset does not know the feature: the listener gets None for
that session (everything replicated is readable, as before).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from ferrymq.ha.config import HAConfig
from ferrymq.ha.handshake import (
    FEATURE_CONFIRM_OFFSET,
    FEATURE_METADATA_NOTICE,
    encode_features,
    encode_handshake,
)
from ferrymq.ha.protocol import (
    ConfirmOffset,
    FrameReader,
    HAProtocolError,
    MetadataVersions,
    TransferFrame,
    encode_report,
)
from ferrymq.ha.store_port import ReplicationSink
from ferrymq.tasks import cancel_and_wait

log = logging.getLogger(__name__)

READ_CHUNK = 256 * 1024
CONNECT_TIMEOUT_S = 3.0


class ReplicaDivergedError(Exception):
    """The master sent bytes for an offset that is not where this slave's CommitLog ends."""


def check_frame_offset(slave_max: int, frame: TransferFrame) -> str | None:
    """Why ``frame`` cannot be appended to a CommitLog ending at ``slave_max``, or None.

    An empty slave (max 0) accepts the first offset the master chooses (the start of its last file).
    """
    if slave_max != 0 and frame.offset != slave_max:
        return (
            f"master sent offset {frame.offset} but the slave's CommitLog ends at {slave_max}: "
            "the CommitLogs have diverged"
        )
    return None


class HAClient:
    """Keeps one connection to the master while running; reconnects until stopped."""

    def __init__(self, sink: ReplicationSink, config: HAConfig) -> None:
        self._sink = sink
        self._config = config
        self.master_address: str | None = config.master_ha_address
        self._address_changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        # set by shutdown(): the loop ends even if the cancel itself is lost (below)
        self._stopped = False
        self._writer: asyncio.StreamWriter | None = None
        self.connected = False
        self.current_reported_offset = 0
        self.last_error = ""
        self.connects = 0
        self.bytes_received = 0
        # controller mode: announce this brokerId before the first report (ha/handshake.py)
        self.handshake_broker_id: int | None = None
        # ask the master for metadata notices (ha/protocol.py) and hand them to this listener
        self.metadata_listener: Callable[[MetadataVersions], None] | None = None
        self.notices_received = 0
        # controller mode: ask for the master's confirm offset and hand each to this listener
        # (None: this session's master sends none)
        self.confirm_listener: Callable[[int | None], None] | None = None
        self.master_confirm_offset: int | None = None
        # the last master closed on our features block before sending anything: leave it out once
        self._skip_features_once = False
        self.features_fallbacks = 0

    def update_master_address(self, address: str | None) -> None:
        """Point at a (new) master HA address; a live connection to another address is dropped."""
        address = address or None
        if address == self.master_address:
            return
        log.info("HA client: master address %s -> %s", self.master_address, address)
        self.master_address = address
        self._address_changed.set()
        if self._writer is not None:
            self._writer.close()

    def start(self) -> None:
        if self._task is None:
            self._stopped = False
            self._task = asyncio.create_task(self._run(), name="ha-client")

    async def shutdown(self) -> None:
        """Stop the loop and wait for it. The flag, not the cancel alone, ends it: on Python 3.11
        ``asyncio.wait_for`` returns the inner result (or raises its error) when the cancel
        arrives as the inner operation completes, so a cancel landing as the master closed the
        connection became an ordinary "connection lost", the loop went on reconnecting for good
        and this await never returned (a controller-mode promotion hung here on the real node:
        the elected broker stayed a slave of the old master's closed port)."""
        task, self._task = self._task, None
        self._stopped = True
        self._address_changed.set()  # cut the reconnect wait short
        await cancel_and_wait(task)

    async def _run(self) -> None:
        while not self._stopped:
            address = self.master_address
            if address:
                try:
                    await self._session(address)
                except (OSError, ConnectionError, TimeoutError) as exc:
                    self._note_error(f"connection to master {address}: {exc or type(exc).__name__}")
                except (HAProtocolError, ReplicaDivergedError) as exc:
                    self._note_error(f"disconnected from master {address}: {exc}")
                finally:
                    self.connected = False
                    self._writer = None
            if self._stopped:
                return
            if address and self.master_address != address:
                continue  # pointed at a new master while connected: go there now
            # Upstream waits 5 s before the next connect; a new master address cuts it short.
            self._address_changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self._address_changed.wait(), self._config.reconnect_interval_s
                )

    def _note_error(self, message: str) -> None:
        self.last_error = message
        log.warning("HA client: %s", message)

    def _report(self, writer: asyncio.StreamWriter, offset: int) -> None:
        writer.write(encode_report(offset))
        self.current_reported_offset = offset

    async def _session(self, address: str) -> None:
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise HAProtocolError(f"master HA address {address!r} is not host:port")
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(
                host.strip("[]"),
                int(port),
                limit=READ_CHUNK,
                ssl=self._config.client_ssl,
                server_hostname=host.strip("[]") if self._config.client_ssl else None,
            ),
            CONNECT_TIMEOUT_S,
        )
        self._writer = writer
        self.connected = True
        self.connects += 1
        log.info("HA client: connected to master %s", address)
        config = self._config
        bits = (FEATURE_METADATA_NOTICE if self.metadata_listener is not None else 0) | (
            FEATURE_CONFIRM_OFFSET if self.confirm_listener is not None else 0
        )
        features = bits != 0 and not self._skip_features_once
        self._skip_features_once = False
        frames = FrameReader(
            accept_notices=features and bool(bits & FEATURE_METADATA_NOTICE),
            accept_confirm=features and bool(bits & FEATURE_CONFIRM_OFFSET),
        )
        # a master that knows the feature sends its confirm offset before any CommitLog bytes
        confirm_pending = frames.accept_confirm
        sink = self._sink
        got_data = False
        try:
            if features:
                writer.write(encode_features(bits))
            if self.handshake_broker_id is not None:
                writer.write(encode_handshake(self.handshake_broker_id))
            self._report(writer, sink.max_offset())
            await writer.drain()
            last_report = last_read = time.monotonic()
            while True:
                until_report = config.heartbeat_interval_s - (time.monotonic() - last_report)
                try:
                    data = await asyncio.wait_for(reader.read(READ_CHUNK), max(until_report, 0.001))
                except TimeoutError:
                    data = None
                except ConnectionResetError:
                    self._note_early_close(address, features and not got_data)
                    raise
                now = time.monotonic()
                if data == b"":
                    if self.master_address != address:
                        return  # we hung up to follow a new master address
                    self._note_early_close(address, features and not got_data)
                    raise ConnectionError("master closed the connection")
                if data:
                    got_data = True
                    last_read = now
                    self.bytes_received += len(data)
                    for frame in frames.feed(data):
                        if isinstance(frame, MetadataVersions):
                            self._notice(frame)
                        elif isinstance(frame, ConfirmOffset):
                            confirm_pending = False
                            self._confirm(frame.offset)
                        else:
                            if confirm_pending and frame.body:
                                confirm_pending = False
                                self._confirm(None)
                            self._apply(frame)
                    current = sink.max_offset()
                    if current > self.current_reported_offset:
                        self._report(writer, current)
                        last_report = now
                        await writer.drain()
                if now - last_report >= config.heartbeat_interval_s:
                    self._report(writer, sink.max_offset())
                    last_report = now
                    await writer.drain()
                if now - last_read > config.housekeeping_interval_s:
                    raise ConnectionError(
                        f"no data from the master for {config.housekeeping_interval_s:g} s"
                    )
        finally:
            writer.close()
            with contextlib.suppress(OSError, ConnectionError):
                await writer.wait_closed()

    def _note_early_close(self, address: str, refused_features: bool) -> None:
        if refused_features:
            # an older ferrymq master reads the features magic as a negative offset and hangs
            # up: reconnect without it (that session gets no metadata notices, only the
            # periodic sync); the connection after it asks again
            self._skip_features_once = True
            self.features_fallbacks += 1
            log.info(
                "HA client: master %s closed the connection after the features handshake; "
                "the next connection goes without it",
                address,
            )

    def _notice(self, versions: MetadataVersions) -> None:
        self.notices_received += 1
        listener = self.metadata_listener
        if listener is not None:
            listener(versions)

    def _confirm(self, offset: int | None) -> None:
        if offset is None:
            log.warning(
                "HA client: master %s sends no confirm offset: serving all it replicates",
                self.master_address,
            )
        self.master_confirm_offset = offset
        listener = self.confirm_listener
        if listener is not None:
            listener(offset)

    def _apply(self, frame: TransferFrame) -> None:
        reason = check_frame_offset(self._sink.max_offset(), frame)
        if reason is not None:
            raise ReplicaDivergedError(reason)
        if frame.is_heartbeat:
            return
        if not self._sink.append(frame.offset, frame.body):
            raise ReplicaDivergedError(
                f"the local store refused {len(frame.body)} bytes at offset {frame.offset}"
            )
