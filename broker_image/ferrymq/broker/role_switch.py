"""A controller-mode broker (upstream ``ReplicasManager``): joins its group through the
controller, heartbeats, keeps its master lease, reports the SyncStateSet while master, and
switches role at run time when the controller elects someone (no restart).

Role changes, one at a time (``_lock``):

- start-up (:meth:`ControllerMode.join`, before the broker serves): register; the master of the
  answer is this broker -> master of that epoch; another broker -> compare epoch files with it
  (GET_BROKER_EPOCH_CACHE), cut the divergent tail while the store is stopped, follow it;
- slave -> master (elected): stop replicating, record ``epoch -> CommitLog end`` in the epoch
  file, start the master's HA side, register with NameServers as brokerId 0;
- master -> slave (superseded or lease lost): stop acknowledging at once (fencing), start the HA
  client, follow the new master; when this broker holds data the new master lacks it re-executes
  itself (same PID, same command line) so that start-up cuts the tail before the store opens.

Reads (upstream readUnCommitted=false): a master's store dispatches, and so serves to consumers,
only up to its confirm offset (what every SyncStateSet member holds, with
``allAckInSyncStateSet``); a slave's up to the confirm offset its master sends over the HA stream
(:class:`SlaveConfirmOffset`). A consumer's position therefore never passes a queue offset that a
new master may give to another message after a failover. A replica changing role reads its whole
log only where that log is the group's: while it is promoted (the controller made it the whole
SyncStateSet), and, after a switch of masters, once its log proved to be a prefix of the new
master's.

Fencing: a master acknowledges a write only while ``now < send time of its last successful
heartbeat + lease``, the lease being shorter than the controller's timeout
(:func:`~ferrymq.controller.decisions.broker_lease_ms`): by the time the controller may elect a
successor, the old master has stopped acknowledging, frozen or not.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
from typing import TYPE_CHECKING, Protocol

from ferrymq.broker.controller_client import (
    BrokerIdentity,
    ControllerCallError,
    ControllerClient,
    epoch_cache_body,
    fetch_epoch_cache,
)
from ferrymq.broker.controller_mode_config import ControllerModeSettings
from ferrymq.broker.role_decisions import SlaveStep, slave_step
from ferrymq.broker.sync_state_watch import SyncStateWatch
from ferrymq.controller.decisions import broker_lease_ms
from ferrymq.controller.protocol import ControllerRequestCode as Req
from ferrymq.controller.protocol import ControllerResponseCode as Resp
from ferrymq.controller.protocol import ReplicaInfo
from ferrymq.ha.auto_switch import SyncStateTracker, fenced_waiter
from ferrymq.ha.broker_ha import BrokerHA
from ferrymq.ha.epoch_file import EpochFile, truncate_offset
from ferrymq.ha.truncate import truncate_commit_log
from ferrymq.remoting.channel import Channel
from ferrymq.remoting.codes import ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.eventloop import STOP_SIGNALS
from ferrymq.store import record as rec
from ferrymq.store.config import BrokerRole
from ferrymq.store.message_store import MessageStore
from ferrymq.tasks import wait_event

if TYPE_CHECKING:
    from ferrymq.broker.config import BrokerConfig
    from ferrymq.broker.pop.wiring import PopTimerServices
    from ferrymq.broker.register import BrokerRegistration
    from ferrymq.broker.topic_config import TopicConfigManager
    from ferrymq.remoting.bodies import TopicConfig
    from ferrymq.remoting.client import RemotingClient
    from ferrymq.store.config import MessageStoreConfig

log = logging.getLogger(__name__)


class RoleHost(Protocol):
    """What controller mode uses of the broker that hosts it (``BrokerApp``): the parts a role
    change touches, nothing else. ``ha`` is replaced on every role change."""

    config: BrokerConfig
    store_config: MessageStoreConfig
    topics: TopicConfigManager
    registration: BrokerRegistration
    client: RemotingClient
    store: MessageStore | None
    ha: BrokerHA | None
    rocket5: PopTimerServices | None

    async def restart_ha(self) -> None:
        """Start the HA side of the (new) role; the old one has been shut down."""

    def slave_topic_view(self, topic: str, config: TopicConfig | None) -> TopicConfig | None:
        """A topic's config as a slave serves it (see ``TopicConfigManager.slave_view``)."""


# a failure that repeats (the controller unreachable) is logged again this often
NOTE_REPEAT_S = 10.0

# set for the new image of a broker that re-executed itself: why (logged once at start-up)
REEXEC_REASON_ENV = "FERRYMQ_REEXECUTED_BECAUSE"


def torn_record_at(store: MessageStore, offset: int) -> bool:
    """True when the CommitLog bytes at ``offset`` are an incomplete or invalid record."""
    sel = store.commit_log.get_data(offset)
    if sel is None:
        return False
    try:
        view = memoryview(sel.buffer)
        try:
            kind = rec.validate_record(view, 0, sel.size, False)[0]
        finally:
            view.release()
    finally:
        sel.release()
    return kind is rec.RecordKind.INVALID


class SlaveConfirmOffset:
    """A slave's confirm offset: what its master said the SyncStateSet holds (upstream
    ``AutoSwitchHAClient`` sets ``min(confirmOffset, maxPhyOffset)``; the store caps it at the
    CommitLog end). It starts where dispatch already is: nothing more is read until the master
    says so."""

    def __init__(self, store: MessageStore, start: int) -> None:
        self.store = store
        self.offset = start
        self.read_uncommitted = False

    def get(self) -> int:
        return self.store.max_phy_offset if self.read_uncommitted else self.offset

    def update(self, offset: int | None) -> None:
        """From the HA client: the master's value, or None for a master that sends none."""
        if offset is None:
            self.read_uncommitted = True
        else:
            self.read_uncommitted = False
            self.offset = max(self.offset, offset)
        self.store.reput.wakeup()


class ControllerRefusedError(RuntimeError):
    """The controller refused this broker's registration (bad config, wrong group, stale epoch)."""


FATAL_REGISTER_CODES = {Resp.CONTROLLER_INVALID_REQUEST, Resp.CONTROLLER_FENCED_MASTER_EPOCH}


class ControllerMode:
    def __init__(self, app: RoleHost, settings: ControllerModeSettings) -> None:
        if app.config.broker_id < 1:
            raise ValueError(
                f"brokerId {app.config.broker_id}: in controller mode each replica needs its own "
                "brokerId >= 1 (the elected master registers with NameServers as 0)"
            )
        self.app = app
        self.settings = settings
        self.replica_id = app.config.broker_id
        self.epoch_file = EpochFile(app.store_config.store_path_root_dir)
        self.lease_ms = broker_lease_ms(
            settings.controller_heart_beat_timeout_mills, settings.broker_heartbeat_interval
        )
        self.interval_s = settings.broker_heartbeat_interval / 1000
        self.client: ControllerClient | None = None
        self.is_master = False
        self.master_epoch = 0
        self.superseded = False
        self.lease_until = 0.0
        self.known: ReplicaInfo | None = None
        self.following: str | None = None
        self.tracker: SyncStateTracker | None = None
        self.slave_confirm: SlaveConfirmOffset | None = None
        self.role_changes = 0
        self.sync_watch = SyncStateWatch(app.config.broker_name, self.replica_id)
        self._lock = asyncio.Lock()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._pending: set[asyncio.Task[None]] = set()
        self._last_error = ""
        self._last_error_at = 0.0

    # --- state the broker reads ---------------------------------------------------------------

    @property
    def may_ack(self) -> bool:
        return self.is_master and not self.superseded and time.monotonic() < self.lease_until

    @property
    def fenced(self) -> bool:
        """True when this broker must not take writes (a slave, or a master without a lease)."""
        return not self.may_ack

    def runtime_info(self) -> dict[str, str]:
        info = {
            "controllerMode": "true",
            "controllerReplicaId": str(self.replica_id),
            "controllerMasterEpoch": str(self.known.master_epoch if self.known else 0),
            "controllerIsMaster": str(self.is_master).lower(),
            "controllerFenced": str(self.fenced).lower(),
            "controllerRoleChanges": str(self.role_changes),
            "epochFile": ",".join(f"{e.epoch}:{e.start_offset}" for e in self.epoch_file.entries),
        }
        if self.known is not None:
            info["controllerSyncStateSet"] = ",".join(map(str, sorted(self.known.sync_state_set)))
        sync = self.sync_watch.figures()
        info["controllerInSyncStateSet"] = str(sync.in_sync_state_set).lower()
        info["controllerOutOfSyncStateSetSeconds"] = f"{sync.out_of_sync_seconds:.1f}"
        if self.tracker is not None:
            info["controllerAckedWatermark"] = str(self.tracker.acked_watermark)
        return info

    def _store(self) -> MessageStore:
        assert self.app.store is not None
        return self.app.store

    def _apply_role(self, master: bool, epoch: int) -> None:
        app = self.app
        # registrations carry the epoch of the role (DataVersion.stateVersion): a NameServer
        # ignores one older than the entry it holds
        app.topics.next_version(state_version=epoch)
        app.store_config.broker_role = BrokerRole.SYNC_MASTER if master else BrokerRole.SLAVE
        app.config.broker_id = 0 if master else self.replica_id
        app.registration.broker_role = app.store_config.broker_role.value
        # a slave serves topics its ConsumeQueues hold beyond the synced config; a master not
        app.topics.slave_view = None if master else app.slave_topic_view

    # --- start-up -------------------------------------------------------------------------------

    async def join(self, store: MessageStore) -> MessageStore:
        """Register and settle this broker's role before it serves; may cut the store's tail
        (returning a new, restarted store). Raises ControllerRefusedError when refused."""
        why = os.environ.pop(REEXEC_REASON_ENV, None)
        if why is not None:
            log.warning("started again by re-execution (pid %d): %s", os.getpid(), why)
        await asyncio.to_thread(self.epoch_file.load)
        cfg = self.app.config
        self.client = ControllerClient(
            self.app.client,
            self.settings.controller_addrs,
            BrokerIdentity(
                cfg.broker_cluster_name, cfg.broker_name, self.replica_id, cfg.broker_addr
            ),
        )
        while True:
            sent = time.monotonic()
            try:
                info = await self.client.register(
                    epoch=self.epoch_file.last_epoch,
                    max_offset=store.max_phy_offset,
                    timeout_ms=self.settings.controller_heart_beat_timeout_mills,
                    ha_addr="",
                )
            except ControllerCallError as exc:
                if exc.code in FATAL_REGISTER_CODES:
                    raise ControllerRefusedError(
                        f"controller refused the registration: {exc}"
                    ) from None
                self._note(f"controller {self.client.addr} not answering: {exc}; retrying")
                await asyncio.sleep(self.interval_s)
                continue
            if info.master_broker_id == self.replica_id:
                await self._begin_term(info, sent, store.max_phy_offset)
                self._apply_role(True, info.master_epoch)
                return store
            if info.master_broker_id is not None and info.master_addr:
                try:
                    cache = await fetch_epoch_cache(self.app.client, info.master_addr)
                except ControllerCallError as exc:
                    self._note(f"cannot read the master's epoch file: {exc}; retrying")
                    await asyncio.sleep(self.interval_s)
                    continue
                cut = truncate_offset(
                    self.epoch_file.entries, store.max_phy_offset, cache.entries, cache.max_offset
                )
                if cut < store.max_phy_offset:
                    store = await self._truncate_stopped(store, cut)
                await asyncio.to_thread(self.epoch_file.adopt, cache.entries)
                self.known = info
                self.following = info.master_addr
                self._apply_role(False, info.master_epoch)
                return store
            self._note(f"group {cfg.broker_name} has no master yet; waiting")
            await asyncio.sleep(self.interval_s)

    async def _truncate_stopped(self, store: MessageStore, cut: int) -> MessageStore:
        log.warning(
            "this broker holds CommitLog data up to %d that the master lacks: cutting at %d",
            store.max_phy_offset,
            cut,
        )
        await store.shutdown()
        await asyncio.to_thread(truncate_commit_log, self.app.store_config, cut)
        fresh = MessageStore(
            store.config, store.store_host, hold_unconfirmed=store.hold_unconfirmed
        )
        await fresh.start()
        return fresh

    async def _begin_term(self, info: ReplicaInfo, sent: float | None, start: int) -> None:
        await asyncio.to_thread(self.epoch_file.begin_epoch, info.master_epoch, start)
        self.is_master = True
        self.superseded = False
        self.master_epoch = info.master_epoch
        self.known = info
        self.following = None
        if sent is not None:
            self.lease_until = sent + self.lease_ms / 1000

    # --- HA wiring (called by the broker after each HA start) ---------------------------------

    def on_ha_started(self, ha: BrokerHA) -> None:
        store = self._store()
        if self.is_master:
            accepted = self.known.sync_state_set if self.known else frozenset()
            entries = self.epoch_file.entries
            self.slave_confirm = None
            master = ha.service.master

            def confirm_moved() -> None:
                store.reput.wakeup()
                if master is not None:
                    master.wakeup_writers()

            self.tracker = SyncStateTracker(
                ha.service,
                master_id=self.replica_id,
                max_offset=lambda: store.max_phy_offset,
                max_gap=ha.config.max_gap_not_in_sync,
                epoch_start_offset=entries[-1].start_offset if entries else 0,
                accepted=accepted,
                timeout_s=ha.config.sync_flush_timeout_s,
                all_ack=self.settings.all_ack_in_sync_state_set,
                on_confirm_moved=confirm_moved,
                max_time_not_catchup_s=ha.config.max_time_slave_not_catchup_s,
            )
            store.set_confirm_offset_source(self.tracker.confirm_offset)
            if master is not None:
                master.confirm_offset_source = self.tracker.confirm_offset
            inner = (
                self.tracker.wait_all
                if self.settings.all_ack_in_sync_state_set
                else ha.service.wait_for_replica
            )
            store.set_replica_waiter(fenced_waiter(inner, lambda: self.may_ack))
            return
        self.tracker = None
        self.slave_confirm = SlaveConfirmOffset(store, store.reput.reput_from_offset)
        store.set_confirm_offset_source(self.slave_confirm.get)
        if ha.service.client is not None:
            ha.service.client.handshake_broker_id = self.replica_id
            ha.service.client.confirm_listener = self.slave_confirm.update
        if ha.slave_sync is not None:
            # consumer offsets (and topics) reach a replica every heartbeat interval, not every
            # 10 s: a consumer moved to an elected replica re-reads at most that much
            ha.slave_sync.interval_s = min(ha.slave_sync.interval_s, self.interval_s)
        if self.known is not None and self.following:
            self._point_at(ha, self.known)

    def _point_at(self, ha: BrokerHA, info: ReplicaInfo) -> None:
        if info.master_ha_addr:
            ha.service.update_master_address(info.master_ha_addr)
        if ha.slave_sync is not None and info.master_addr:
            ha.slave_sync.set_master_addr(info.master_addr)

    # --- requests served by the broker ----------------------------------------------------------

    def register_to(self, server: object) -> None:
        from ferrymq.remoting.server import RemotingServer

        assert isinstance(server, RemotingServer)
        server.register(Req.GET_BROKER_EPOCH_CACHE, self._epoch_cache)
        server.register(Req.NOTIFY_BROKER_ROLE_CHANGED, self._notified)

    def _epoch_cache(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        cfg = self.app.config
        body = epoch_cache_body(
            self.epoch_file.entries,
            self._store().max_phy_offset,
            cluster_name=cfg.broker_cluster_name,
            broker_name=cfg.broker_name,
            broker_id=cfg.broker_id,  # as registered: 0 while master (upstream's brokerConfig)
        )
        return request.response(ResponseCode.SUCCESS, None, None, body)

    def _notified(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        try:
            info = ReplicaInfo.parse(request.ext_fields, request.body_bytes())
        except ValueError as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, str(exc))
        task = asyncio.get_running_loop().create_task(self._apply_guarded(info, None))
        self._pending.add(task)
        task.add_done_callback(self._notified_done)
        return request.response(ResponseCode.SUCCESS)

    def _notified_done(self, task: asyncio.Task[None]) -> None:
        """A role change started by a notification that failed is logged at once (nobody awaits
        the task; the next heartbeat round retries the change)."""
        self._pending.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.error("role change on the controller's notification failed", exc_info=exc)

    # --- the heartbeat loop ---------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        for task in [self._task, *self._pending]:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        self._task = None

    def _note(self, message: str) -> None:
        """Log a failure; the same one again only every NOTE_REPEAT_S (a controller that stays
        unreachable must show in the log, not as one line and then silence)."""
        now = time.monotonic()
        if message != self._last_error or now - self._last_error_at >= NOTE_REPEAT_S:
            log.warning("%s", message)
            self._last_error_at = now
        self._last_error = message

    async def _run(self) -> None:
        while True:
            try:
                await self.tick()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("controller-mode heartbeat round failed")
            self._wake.clear()
            await wait_event(self._wake, self.interval_s)

    async def tick(self) -> None:
        assert self.client is not None
        store = self._store()
        sent = time.monotonic()
        epoch = self.master_epoch if self.is_master else self.epoch_file.last_epoch
        # mid-promotion the new HA listener may not be up: publish none rather than a guess
        ha = self.app.ha
        ha_addr = (ha.ha_server_addr() or "") if self.is_master and ha is not None else ""
        args = {
            "epoch": epoch,
            "max_offset": store.max_phy_offset,
            "timeout_ms": self.settings.controller_heart_beat_timeout_mills,
            "ha_addr": ha_addr,
        }
        try:
            try:
                info = await self.client.heartbeat(**args)  # type: ignore[arg-type]
            except ControllerCallError as exc:
                if exc.code != Resp.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED:
                    raise
                info = await self.client.register(**args)  # type: ignore[arg-type]
        except ControllerCallError as exc:
            self._note(f"controller heartbeat failed: {exc}")
            return
        self._last_error = ""
        self.sync_watch.observe(info, detail=self._replication_detail())
        if self._lock.locked():
            return  # a role change is under way: its heartbeats keep going, it settles first
        await self._apply_guarded(info, sent)
        await self._maybe_alter_sync_state_set()

    def _replication_detail(self) -> str:
        """For the out-of-SyncStateSet warning: where this replica's replication stands."""
        ha = self.app.ha
        client = ha.service.client if ha is not None else None
        if self.is_master or client is None:
            return ""
        state = "connected" if client.connected else "not connected"
        return f"HA client {state} to {client.master_address or 'no address'}"

    async def _maybe_alter_sync_state_set(self) -> None:
        tracker, client, known = self.tracker, self.client, self.known
        if tracker is None or client is None or known is None or not self.may_ack:
            return
        proposal = tracker.proposal()
        if proposal is None:
            return
        tracker.propose(proposal)
        try:
            info = await client.alter_sync_state_set(
                master_epoch=self.master_epoch,
                sync_state_set_epoch=known.sync_state_set_epoch,
                members=proposal,
            )
        except ControllerCallError as exc:
            tracker.proposed = None
            self._note(f"SyncStateSet change to {sorted(proposal)} refused: {exc}")
            if exc.code in (Resp.CONTROLLER_FENCED_MASTER_EPOCH, Resp.CONTROLLER_INVALID_MASTER):
                self.superseded = True
                self._wake.set()
            return
        tracker.settle(info.sync_state_set)
        self.known = info
        log.info(
            "SyncStateSet %s (epoch %d)", sorted(info.sync_state_set), info.sync_state_set_epoch
        )

    async def _apply_guarded(self, info: ReplicaInfo, sent: float | None) -> None:
        async with self._lock:
            await self._apply(info, sent)

    async def _apply(self, info: ReplicaInfo, sent: float | None) -> None:
        me = self.replica_id
        newest = max(self.master_epoch, self.known.master_epoch if self.known else 0)
        if info.master_epoch < newest:
            # a stale answer: a heartbeat answered before an election whose notification got
            # here first. Applied, it superseded the master just elected (which then never
            # acknowledged again, nor grew its SyncStateSet: found by the partition harness)
            log.info(
                "ignoring the controller's answer of epoch %d: epoch %d is known",
                info.master_epoch,
                newest,
            )
            return
        if self.is_master:
            if info.master_broker_id == me and info.master_epoch == self.master_epoch:
                if sent is not None and not self.superseded:
                    self.lease_until = max(self.lease_until, sent + self.lease_ms / 1000)
                known = self.known
                if (
                    self.tracker is not None
                    and self.tracker.proposed is None
                    and (known is None or info.sync_state_set_epoch > known.sync_state_set_epoch)
                ):
                    self.tracker.settle(info.sync_state_set)
                self.known = info
                return
            if info.master_broker_id == me and info.master_epoch > self.master_epoch:
                # re-elected after the controller had given up on this broker: a new term
                start = self._store().max_phy_offset
                await self._begin_term(info, sent, start)
                if self.tracker is not None:
                    self.tracker.epoch_start_offset = start
                    self.tracker.settle(info.sync_state_set)
                self.app.topics.next_version(state_version=info.master_epoch)
                self.app.registration.trigger()
                return
            if not self.superseded:
                log.warning(
                    "superseded: master is now %s (epoch %d); no more acknowledgements here",
                    info.master_broker_id,
                    info.master_epoch,
                )
            self.superseded = True
            if info.master_broker_id is None:
                return
            await self._demote(info)
        if info.master_broker_id == me:
            await self._promote(info, sent)
            return
        step = slave_step(
            info,
            following=self.following,
            known_epoch=self.known.master_epoch if self.known is not None else None,
        )
        if step is SlaveStep.WAIT:
            self.known = info if self.known is None else self.known
            return  # no master yet, or it has not published its HA address yet
        if step is SlaveStep.FOLLOW:
            await self._follow(info)
            return
        self.known = info
        if self.app.ha is not None:
            # the same master, maybe with its HA address only now published (the replica
            # registered before the master's HA listener was up): point at it whenever it is
            # known, else this replica never replicates (both calls are no-ops when unchanged)
            self._point_at(self.app.ha, info)

    async def _promote(self, info: ReplicaInfo, sent: float | None) -> None:
        app = self.app
        ha, app.ha = app.ha, None  # registrations in between publish no HA address
        if ha is not None:
            await ha.shutdown()  # no more bytes from the old master from here on
        # elected: the controller made this replica the whole SyncStateSet, its log is the
        # group's (dispatch must reach its end before the queues continue from it)
        self._store().set_confirm_offset_source(None)
        await self._take_queue_offsets()
        start = self._store().max_phy_offset
        await self._begin_term(info, sent, start)
        self._apply_role(True, info.master_epoch)
        await app.restart_ha()
        if app.rocket5 is not None:  # POP revive and timer delivery run on the master only
            await app.rocket5.promote()
        app.registration.trigger()
        self.role_changes += 1
        self._wake.set()  # heartbeat now: publishes the HA address and takes the lease
        log.warning(
            "promoted to master of %s, epoch %d, from CommitLog offset %d",
            app.config.broker_name,
            info.master_epoch,
            start,
        )

    async def _settle_replicated_tail(self) -> None:
        """Once replication has stopped: let dispatch catch up, and cut a torn last record.

        Replication frames cut records anywhere, so a replica's CommitLog may end inside a
        record (a master that died mid-transfer). Dispatch stops in front of it; nothing refers
        to those bytes, so the CommitLog is cut there: a master must not write behind half a
        record, and a new master refuses a replica reporting an offset inside one.
        """
        store = self._store()
        commit_log = store.commit_log
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while store.dispatch_behind_bytes() > 0 and loop.time() < deadline:
            if torn_record_at(store, store.reput.reput_from_offset):
                break
            await asyncio.sleep(0.005)  # dispatch of the last replicated bytes, bounded
        end = store.reput.reput_from_offset
        if end < commit_log.max_offset:
            log.warning(
                "cutting the incomplete replicated record at %d (CommitLog ended at %d)",
                end,
                commit_log.max_offset,
            )
            await asyncio.to_thread(commit_log.mapped_file_queue.truncate_dirty_files, end)

    async def _take_queue_offsets(self) -> None:
        """Before its first write, a promoted slave continues every queue where the replicated
        data ends: the CommitLog's next queue offsets are taken from the ConsumeQueues (as at
        start-up; replicated bytes never advanced them)."""
        await self._settle_replicated_tail()
        store = self._store()
        store.commit_log.topic_queue_table = store.consume_queues.topic_queue_table()

    async def _demote(self, info: ReplicaInfo) -> None:
        app = self.app
        self.is_master = False
        self.tracker = None
        ha, app.ha = app.ha, None
        if ha is not None:
            await ha.shutdown()
        self._apply_role(False, info.master_epoch)
        self.following = None
        if app.rocket5 is not None:
            await app.rocket5.shutdown()
        await app.restart_ha()
        app.registration.trigger()
        self.role_changes += 1
        log.warning("demoted to slave of %s", app.config.broker_name)

    async def _follow(self, info: ReplicaInfo) -> None:
        app = self.app
        ha = app.ha
        if ha is not None:
            ha.service.update_master_address(None)  # stop taking bytes while comparing
        try:
            cache = await fetch_epoch_cache(app.client, info.master_addr)
        except ControllerCallError as exc:
            self._note(f"cannot read the new master's epoch file: {exc}; retrying")
            return
        store = self._store()
        local_max = store.max_phy_offset
        cut = truncate_offset(self.epoch_file.entries, local_max, cache.entries, cache.max_offset)
        if cut < local_max:
            self._reexec(
                f"holding CommitLog data up to {local_max} that master {info.master_addr} "
                f"(epoch {info.master_epoch}) lacks beyond {cut}"
            )
        # what this replica holds is a prefix of the new master's log, which its election made
        # the group's: dispatch it all, cut a torn last record, then read confirmed data only
        confirm = self.slave_confirm
        store.set_confirm_offset_source(None)
        await self._settle_replicated_tail()
        if confirm is not None:
            confirm.offset = max(confirm.offset, store.reput.reput_from_offset)
            store.set_confirm_offset_source(confirm.get)
        await asyncio.to_thread(self.epoch_file.adopt, cache.entries)
        self.known = info
        self.following = info.master_addr
        if app.ha is not None:
            self._point_at(app.ha, info)
        log.info("following master %s (epoch %d)", info.master_addr, info.master_epoch)

    def _reexec(self, why: str) -> None:
        """Start over as the same process (PID, arguments): the start-up path cuts the tail
        while the store is closed, the one place where the store may be truncated safely.

        What the new image keeps: stdout/stderr (the log; flushed first), the environment (with
        the reason, logged again at start-up) and a stop signal: SIGTERM/SIGINT are blocked
        across the exec, so one arriving before the new image installs its handlers waits for
        them (GracefulShutdown.install unblocks) instead of ending the process silently.
        Every other descriptor (sockets, store files, locks) is close-on-exec."""
        log.warning("%s: re-executing (pid %d) to truncate and rejoin as a slave", why, os.getpid())
        for handler in logging.getLogger().handlers:
            with contextlib.suppress(Exception):
                handler.flush()
        sys.stdout.flush()
        sys.stderr.flush()
        os.environ[REEXEC_REASON_ENV] = why
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            os.execv(sys.executable, sys.orig_argv)
        except OSError:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
            os.environ.pop(REEXEC_REASON_ENV, None)
            raise
