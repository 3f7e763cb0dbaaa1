"""The store facade (upstream ``DefaultMessageStore``): load order, recovery, put/get, services.

Start-up order (written once, here): abort-file check -> checkpoint -> map CommitLog, queues and
index files -> recover queues -> scan the CommitLog (normal or abnormal start), skip damaged
records and cut the torn tail -> cut queue units / index files beyond it, blank units of damaged
records -> check every ConsumeQueue against the CommitLog (files cut short, last entry) -> choose
where dispatch resumes (early enough to rebuild what a check cut) and catch up -> rebuild the
per-queue offset table -> create the abort file -> start flush, reput and cleanup.

A full disk: every mapped file's blocks are reserved before it is mapped (no SIGBUS). A CommitLog
file that cannot be reserved refuses puts (SERVICE_NOT_AVAILABLE, remark naming the file and the
free bytes) until the disk has room for one; a ConsumeQueue/index file that cannot be reserved
stops dispatch where it is (retried every second from the CommitLog, nothing lost) and refuses
puts meanwhile.

All public methods run on the event loop that called :meth:`MessageStore.start`. Appends are
synchronous on that loop; ``put_*`` awaits only the durability waits (group commit and, when a
replica waiter is set, the replica ack). Reads return raw CommitLog slices that the caller
releases.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import shutil
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any

from ferrymq.message import (
    Message,
    MessageConst,
    MessageExt,
    MessageInner,
)
from ferrymq.store import record as rec
from ferrymq.store import recovery
from ferrymq.store.checkpoint import StoreCheckpoint
from ferrymq.store.cleanup import CleanupService, DiskUsage, disk_used_ratio
from ferrymq.store.commit_log import AppendError, CommitLog
from ferrymq.store.config import BrokerRole, FlushDiskType, MessageStoreConfig
from ferrymq.store.consume_queue import BLANK_UNIT_SIZE, ConsumeQueue
from ferrymq.store.consume_queue_store import ConsumeQueueStore
from ferrymq.store.dispatch import (
    BuildConsumeQueue,
    BuildIndex,
    CommitLogDispatcher,
    DispatchListener,
    DispatchRoundListener,
    ReputService,
)
from ferrymq.store.flush import FlushConsumeQueueService, FlushRealTimeService, GroupCommitService
from ferrymq.store.get_message import MessageFilter, PullLimits, offset_status, read_queue
from ferrymq.store.index_service import IndexService
from ferrymq.store.mapped_file import (
    RESERVE_STEP,
    DiskFullError,
    SelectMappedBufferResult,
    StoreFileError,
    free_bytes,
)
from ferrymq.store.put_stats import PutStats
from ferrymq.store.results import (
    AppendMessageResult,
    AppendMessageStatus,
    GetMessageResult,
    GetMessageStatus,
    PutMessageResult,
    PutMessageStatus,
    QueryMessageResult,
)

log = logging.getLogger(__name__)

ReplicaWaiter = Callable[[int], Awaitable[PutMessageStatus]]
"""Awaited with the end offset of a put on a SYNC_MASTER; returns PUT_OK or why not."""


def _wait_store_msg_ok(properties: dict[str, str]) -> bool:
    raw = properties.get(MessageConst.PROPERTY_WAIT_STORE_MSG_OK)
    return raw is None or raw.lower() == "true"


def _physical_memory() -> int:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return 8 << 30


class MessageStore:
    def __init__(
        self,
        config: MessageStoreConfig,
        store_host: tuple[str, int],
        *,
        disk_usage: DiskUsage = disk_used_ratio,
        hold_unconfirmed: bool = False,
    ) -> None:
        self.config = config
        self.store_host = store_host
        # Controller mode with allAckInSyncStateSet (upstream readUnCommitted=false): from the
        # start, dispatch only up to the confirm offset saved in the checkpoint (capped at the
        # recovered CommitLog end) until the HA layer sets the live one.
        self.hold_unconfirmed = hold_unconfirmed
        self.commit_log = CommitLog(
            config.commit_log_dir,
            config.mapped_file_size_commit_log,
            store_host,
            config.max_message_size,
        )
        self.consume_queues = ConsumeQueueStore(
            config.consume_queue_dir, config.mapped_file_size_consume_queue
        )
        self.index_service = IndexService(
            config.index_dir, config.max_hash_slot_num, config.max_index_num
        )
        self.checkpoint = StoreCheckpoint(config.checkpoint_path)
        self._cq_builder = BuildConsumeQueue(self.consume_queues)
        dispatchers: list[CommitLogDispatcher] = [self._cq_builder]
        if config.message_index_enable:
            dispatchers.append(BuildIndex(self.index_service))
        self.reput = ReputService(self.commit_log, dispatchers, config.delay_levels_ms)
        self._disk_usage = disk_usage
        self._replica_waiter: ReplicaWaiter | None = None
        self._group_commit: GroupCommitService | None = None
        self._flush_commit_log: FlushRealTimeService | None = None
        self._flush_cq: FlushConsumeQueueService | None = None
        self._cleanup: CleanupService | None = None
        self._running = False
        self._shutdown = False
        self.disk_full = False
        self.disk_full_reason = ""
        self._reserve_failed = ""  # why a CommitLog file could not be reserved ("" when none)
        self.writeable = True
        self.last_exit_ok: bool | None = None
        self.recovery_stats: dict[str, str] = {}
        self._recovery_skipped_records = 0
        self._recovery_skipped_bytes = 0
        self.consume_queues_rebuilt = 0
        self._put_times_total = 0
        self._put_size_total = 0
        self.put_stats = PutStats()
        self._boot_time = time.time()
        self._get_found_total = 0
        self._get_miss_total = 0
        self._limits = PullLimits(
            max_bytes=config.max_transfer_bytes_on_message_in_memory,
            max_count=config.max_transfer_count_on_message_in_memory,
            memory_budget=_physical_memory() * config.access_message_in_memory_max_ratio // 100,
        )

    # --- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        """Load, recover, catch dispatch up, create the abort file, start the services."""
        self.config.store_path_root_dir.mkdir(parents=True, exist_ok=True)
        self.last_exit_ok = not self.config.abort_path.exists()
        await asyncio.to_thread(self._load_and_recover, self.last_exit_ok)
        await asyncio.to_thread(self._create_abort_file)
        cfg = self.config
        mfq = self.commit_log.mapped_file_queue
        if cfg.flush_disk_type is FlushDiskType.SYNC_FLUSH:
            self._group_commit = GroupCommitService(mfq, self.checkpoint)
            self._group_commit.start()
        else:
            self._flush_commit_log = FlushRealTimeService(
                mfq,
                self.checkpoint,
                cfg.flush_interval_commit_log,
                cfg.flush_commit_log_least_pages,
                cfg.flush_commit_log_thorough_interval,
            )
            self._flush_commit_log.start()
        self._flush_cq = FlushConsumeQueueService(
            self._flush_derived,
            self.checkpoint,
            cfg.flush_interval_consume_queue,
            cfg.flush_consume_queue_least_pages,
            cfg.flush_consume_queue_thorough_interval,
            self._confirm_offset_to_save,
        )
        self._flush_cq.start()
        self.reput.start()
        self._cleanup = CleanupService(
            cfg,
            self._disk_usage,
            self._delete_expired_commit_log,
            self._delete_expired_derived,
            self._set_disk_full,
        )
        self._cleanup.start()
        self._running = True

    def _load_and_recover(self, last_exit_ok: bool) -> None:
        started = time.monotonic()
        cfg = self.config
        mfq = self.commit_log.mapped_file_queue
        mfq.load()
        self.consume_queues.load()
        if cfg.message_index_enable:
            self.index_service.load(last_exit_ok, self.checkpoint.index_msg_timestamp)
        self.consume_queues.recover()
        files = mfq.files
        trusted_ms = self.checkpoint.min_timestamp(cfg.message_index_safe)
        if last_exit_ok:
            start = recovery.normal_start_index(len(files))
        else:
            start = recovery.abnormal_start_index(files, trusted_ms)
        queue_check = recovery.QueueEndCheck(
            {(cq.topic.encode(), cq.queue_id): cq.max_offset_in_queue for cq in self.consume_queues}
        )
        scan = recovery.scan_valid_end(
            files, start, cfg.check_crc_on_recover, trusted_ms, queue_check
        )
        end = scan.end_offset
        # After a crash, records newer than the checkpoint may be missing from some queue.
        abnormal_start = None if last_exit_ok else scan.first_after
        mfq.truncate_dirty_files(end)
        mfq.flushed_where = end
        self._note_damaged(scan)
        if not files:
            # An empty CommitLog makes every derived file meaningless.
            self.consume_queues.destroy_all()
            self.index_service.destroy_all()
        else:
            self.consume_queues.truncate_dirty(end)
            self.index_service.drop_beyond(end)
        commit_min = max(self.commit_log.min_offset, 0)
        blanked = self.consume_queues.blank_units_in(scan.damaged)
        rebuild_from = self._check_consume_queues(commit_min) if files else None
        self.consume_queues.correct_min_offsets(commit_min)
        reput_from = recovery.choose_reput_offset(
            commit_min,
            end,
            self.consume_queues.max_physic_offset(),
            self.index_service.resume_offset() if cfg.message_index_enable else None,
            abnormal_start,
        )
        if self.hold_unconfirmed:
            # within what the CommitLog holds (as upstream's recovery): never above the
            # recovered end (an unflushed tail the crash lost), never below expired files
            saved = min(max(commit_min, self.checkpoint.confirm_phy_offset), end)
            self.checkpoint.confirm_phy_offset = saved
            self.reput.end_offset = lambda: saved
        if rebuild_from is not None:
            reput_from = max(commit_min, min(reput_from, rebuild_from))
        if 0 <= queue_check.rebuild_from < reput_from:
            # A queue lacks records the CommitLog holds before where dispatch would resume (a
            # file of it deleted or cut): dispatch from the first of them rebuilds it.
            names = sorted(
                f"{t.decode(errors='replace')}-{q}"
                for (t, q), first in queue_check.short.items()
                if first < reput_from
            )
            log.error(
                "ConsumeQueue(s) %s lack records the CommitLog holds from offset %d; rebuilt",
                ", ".join(names),
                queue_check.rebuild_from,
            )
            self.consume_queues_rebuilt += len(names)
            reput_from = max(commit_min, queue_check.rebuild_from)
        self.reput.reput_from_offset = reput_from
        redispatched = self.reput.do_reput(notify=False)
        self.commit_log.topic_queue_table = self.consume_queues.topic_queue_table()
        self.recovery_stats = {
            "lastExitOk": str(last_exit_ok).lower(),
            "recoverStartFile": files[start].path.name if files else "",
            "recoveredCommitLogEnd": str(end),
            "recoverStopReason": scan.stop_reason,
            "recoveredMessages": str(scan.messages),
            "recoverDamagedRecords": str(len(scan.damaged)),
            "recoverDamagedUnitsBlanked": str(blanked),
            "consumeQueuesRebuilt": str(self.consume_queues_rebuilt),
            "reputFromOffset": str(reput_from),
            "savedConfirmOffset": (
                str(self.checkpoint.confirm_phy_offset) if self.hold_unconfirmed else ""
            ),
            "redispatchedMessages": str(redispatched),
            "recoverTimeMs": str(int((time.monotonic() - started) * 1000)),
        }
        log.info("store recovered: %s", self.recovery_stats)

    def _note_damaged(self, scan: recovery.ScanResult) -> None:
        """Damaged records the scan skipped: logged with offsets, counted, and handed to
        dispatch so it steps over them without counting them again."""
        for (start, stop), why in zip(scan.damaged, scan.damaged_reasons, strict=True):
            log.error(
                "damaged CommitLog record skipped at recovery: offsets %d..%d (%d bytes): %s",
                start,
                stop,
                stop - start,
                why,
            )
            self._recovery_skipped_bytes += stop - start
        self._recovery_skipped_records += len(scan.damaged)
        self.reput.skip_ranges.update(scan.damaged)

    def _check_consume_queues(self, commit_min: int) -> int | None:
        """Every ConsumeQueue against the CommitLog (files cut short, last entry); returns the
        CommitLog offset from which dispatch must run to rebuild what was cut (None: none)."""
        matches = self.commit_log.record_matches
        rebuild_from: int | None = None
        for cq in self.consume_queues:

            def check(offset: int, size: int, queue_offset: int, cq: ConsumeQueue = cq) -> bool:
                # Units of expired CommitLog files cannot be checked and need no rebuild.
                return offset < commit_min or matches(
                    offset, size, cq.topic, cq.queue_id, queue_offset
                )

            rebuild, why = cq.check_units(check)
            if not rebuild:
                continue
            start = cq.max_physic_offset if cq.max_physic_offset >= 0 else commit_min
            log.error(
                "ConsumeQueue %s-%d: %s; rebuilt from the CommitLog from offset %d",
                cq.topic,
                cq.queue_id,
                why,
                start,
            )
            self.consume_queues_rebuilt += 1
            rebuild_from = start if rebuild_from is None else min(rebuild_from, start)
        return rebuild_from

    @property
    def corrupt_records_skipped(self) -> int:
        """Damaged CommitLog records skipped since start (by recovery and by dispatch); each
        is logged at ERROR with its offsets."""
        return self._recovery_skipped_records + self.reput.corrupt_records_skipped

    @property
    def corrupt_bytes_skipped(self) -> int:
        return self._recovery_skipped_bytes + self.reput.corrupt_bytes_skipped

    def _create_abort_file(self) -> None:
        path = self.config.abort_path
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    async def shutdown(self) -> None:
        """Stop the services, flush everything, write the checkpoint, remove the abort file."""
        if self._shutdown:
            return
        self._shutdown = True
        if self._cleanup is not None:
            await self._cleanup.stop()
        if self._running:
            await self.reput.stop()
        for service in (self._group_commit, self._flush_commit_log):
            if service is not None:
                await service.stop()
        if self._flush_cq is not None:
            await self._flush_cq.stop()
        clean = self._running
        self._running = False
        self.checkpoint.confirm_phy_offset = self._confirm_offset_to_save()
        if clean and self.reput.behind() == 0:
            try:
                await asyncio.to_thread(self._final_sync)
            except OSError as exc:
                # The abort file stays: the next start recovers as after a crash.
                log.error("final flush at shutdown failed: %s", exc)
            else:
                self.config.abort_path.unlink(missing_ok=True)
        elif clean:
            # dispatch held back (unconfirmed bytes): recovery runs as after a crash, but the
            # confirm offset is saved (the timestamps in memory were each true when set)
            try:
                await asyncio.to_thread(self.checkpoint.flush)
            except OSError as exc:
                log.error("checkpoint write at shutdown failed: %s", exc)
        self.commit_log.mapped_file_queue.shutdown()
        self.consume_queues.shutdown()
        self.index_service.shutdown()

    def _final_sync(self) -> None:
        mfq = self.commit_log.mapped_file_queue
        mfq.flush(0)
        if mfq.store_timestamp:
            self.checkpoint.physic_msg_timestamp = mfq.store_timestamp
        logics, index = self._flush_derived(0)
        if logics:
            self.checkpoint.logics_msg_timestamp = logics
        if index:
            self.checkpoint.index_msg_timestamp = index
        self.checkpoint.flush()

    def _flush_derived(self, least_pages: int) -> tuple[int, int]:
        """Blocking: ConsumeQueues then index files; the timestamps now durable."""
        logics_ts = self._cq_builder.last_store_timestamp
        if not self.consume_queues.flush(least_pages):
            logics_ts = 0  # some queue still has units only in memory: the time cannot move
        # the index timestamp reaches the checkpoint only from thorough (least 0) rounds
        index = self.config.message_index_enable
        index_ts = self.index_service.flush(data=least_pages == 0) if index else 0
        return logics_ts, index_ts

    # --- status -----------------------------------------------------------------------------

    @property
    def is_disk_full(self) -> bool:
        """The disk check's verdict, or a file that could not be reserved (puts are refused)."""
        return self.disk_full or bool(self._reserve_failed or self.reput.dispatch_error)

    def _set_disk_full(self, full: bool, reason: str) -> None:
        if full != self.disk_full:
            (log.error if full else log.info)("disk full: %s (%s)", full, reason)
        self.disk_full = full
        self.disk_full_reason = reason if full else ""

    def set_replica_waiter(self, waiter: ReplicaWaiter | None) -> None:
        """HA hook: awaited with the end offset of each put on a SYNC_MASTER."""
        self._replica_waiter = waiter

    def add_dispatch_listener(self, listener: DispatchListener) -> None:
        """``cb(topic, queue_id, logic_offset, tags_code, store_timestamp, properties)``, called
        on the loop once a message is in its ConsumeQueue (wakes held pulls)."""
        self.reput.listeners.append(listener)

    def add_dispatch_round_listener(self, listener: DispatchRoundListener) -> None:
        """``cb(requests)`` once per reput round with the records that entered their
        ConsumeQueue (see ``dispatch.DispatchRoundListener``); cheaper than a per-record
        listener for the broker's own hooks (held pulls, HA writers, the schedule service)."""
        self.reput.round_listeners.append(listener)

    def _refuse_put(self) -> PutMessageResult | None:
        if not self._running or self._shutdown:
            return PutMessageResult(
                PutMessageStatus.SERVICE_NOT_AVAILABLE, remark="store is not running"
            )
        if self.config.broker_role is BrokerRole.SLAVE:
            return PutMessageResult(
                PutMessageStatus.SERVICE_NOT_AVAILABLE, remark="a slave broker does not accept puts"
            )
        if not self.writeable:
            return PutMessageResult(
                PutMessageStatus.SERVICE_NOT_AVAILABLE, remark="store is not writeable"
            )
        if self.disk_full:
            return PutMessageResult(
                PutMessageStatus.SERVICE_NOT_AVAILABLE, remark=self.disk_full_reason
            )
        if self._reserve_failed and not self._space_returned():
            return PutMessageResult(
                PutMessageStatus.SERVICE_NOT_AVAILABLE, remark=self._reserve_failed
            )
        if self.reput.dispatch_error:
            # Dispatch cannot reserve a ConsumeQueue or index file: the messages it has not
            # indexed stay in the CommitLog and are indexed once it can; new ones wait.
            return PutMessageResult(
                PutMessageStatus.SERVICE_NOT_AVAILABLE, remark=self.reput.dispatch_error
            )
        return None

    def _space_returned(self) -> bool:
        """After CommitLog blocks could not be reserved: whether the disk now has room for one
        reservation step (a statvfs, not a new attempt per put, which on a nearly full disk
        would allocate and free a step each time)."""
        step = min(self.config.mapped_file_size_commit_log, RESERVE_STEP)
        if free_bytes(self.config.commit_log_dir) < step:
            return False
        log.warning("store disk has room again; puts resume")
        self._reserve_failed = ""
        return True

    def _put_file_failed(self, exc: StoreFileError) -> PutMessageResult:
        if isinstance(exc, DiskFullError):
            if not self._reserve_failed:
                log.error("puts refused until space returns: %s", exc)
            self._reserve_failed = f"disk full: {exc}"
            return PutMessageResult(
                PutMessageStatus.SERVICE_NOT_AVAILABLE, remark=self._reserve_failed
            )
        log.error("put failed: %s", exc)
        return PutMessageResult(PutMessageStatus.CREATE_MAPPED_FILE_FAILED, remark=str(exc))

    # --- put --------------------------------------------------------------------------------

    async def put_message(self, msg: MessageInner) -> PutMessageResult:
        result = self.put_message_nowait(msg)
        if isinstance(result, PutMessageResult):
            return result
        return await result

    def put_message_nowait(
        self, msg: MessageInner
    ) -> PutMessageResult | Coroutine[Any, Any, PutMessageResult]:
        """``put_message`` without a coroutine when it needs no durability wait (ASYNC_FLUSH,
        no replica waiter): the result itself, else a coroutine to await for it. The append
        happens here either way."""
        started = time.perf_counter()
        refused = self._refuse_put()
        if refused is not None:
            self.put_stats.record_failed_put()
            return refused
        try:
            result = self.commit_log.put_message(msg)
        except AppendError as exc:
            self.put_stats.record_failed_put()
            return self._append_failed(exc)
        except StoreFileError as exc:
            self.put_stats.record_failed_put()
            return self._put_file_failed(exc)
        self._put_times_total += 1
        self._put_size_total += result.wrote_bytes
        self.reput.wakeup()
        if self._group_commit is None and self._replica_waiter is None:
            self.put_stats.record_put((time.perf_counter() - started) * 1000)
            return PutMessageResult(PutMessageStatus.PUT_OK, result)
        return self._timed(self._wait_durable(result, msg.properties), started)

    async def _timed(
        self, waiting: Coroutine[Any, Any, PutMessageResult], started: float
    ) -> PutMessageResult:
        """A put's durability wait, its whole time recorded (upstream times the put until its
        flush and replica waits are done)."""
        result = await waiting
        self.put_stats.record_put((time.perf_counter() - started) * 1000)
        if result.status is not PutMessageStatus.PUT_OK:
            self.put_stats.record_failed_put()
        return result

    async def put_messages(self, batch: MessageInner | Sequence[MessageInner]) -> PutMessageResult:
        """A batch: a MessageInner whose body is a SEND_BATCH_MESSAGE body, or a list of
        MessageInner of one topic and queue (stored contiguously)."""
        refused = self._refuse_put()
        if refused is not None:
            return refused
        if isinstance(batch, MessageInner):
            try:
                result = self.commit_log.put_batch_body(batch, batch.body)
            except AppendError as exc:
                return self._append_failed(exc)
            except StoreFileError as exc:
                return self._put_file_failed(exc)
            # As upstream, the batch's own properties decide whether to wait for the disk.
            return await self._after_append(result, batch.properties)
        else:
            if not batch:
                return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, remark="empty batch")
            header = batch[0]
            if any(m.topic != header.topic or m.queue_id != header.queue_id for m in batch):
                return PutMessageResult(
                    PutMessageStatus.MESSAGE_ILLEGAL,
                    remark="a batch must target one topic and queue",
                )
            items = [Message(m.topic, m.body, m.flag, dict(m.properties)) for m in batch]
        try:
            result = self.commit_log.put_messages(header, items)
        except AppendError as exc:
            return self._append_failed(exc)
        except StoreFileError as exc:
            return self._put_file_failed(exc)
        wait = all(_wait_store_msg_ok(m.properties) for m in items) and _wait_store_msg_ok(
            header.properties
        )
        return await self._after_append(result, {} if wait else {"WAIT": "false"})

    @staticmethod
    def _append_failed(exc: AppendError) -> PutMessageResult:
        status = (
            PutMessageStatus.PROPERTIES_SIZE_EXCEEDED
            if exc.status is AppendMessageStatus.PROPERTIES_SIZE_EXCEEDED
            else PutMessageStatus.MESSAGE_ILLEGAL
        )
        return PutMessageResult(status, remark=exc.reason)

    async def _after_append(
        self, result: AppendMessageResult, properties: dict[str, str]
    ) -> PutMessageResult:
        self._put_times_total += result.msg_num
        self._put_size_total += result.wrote_bytes
        self.reput.wakeup()
        if self._group_commit is None and self._replica_waiter is None:
            return PutMessageResult(PutMessageStatus.PUT_OK, result)
        return await self._wait_durable(result, properties)

    async def _wait_durable(
        self, result: AppendMessageResult, properties: dict[str, str]
    ) -> PutMessageResult:
        """The group commit and replica waits of an appended put (SYNC_FLUSH / SYNC_MASTER)."""
        wait = _wait_store_msg_ok(properties)
        waits: list[Awaitable[PutMessageStatus]] = []
        if self._group_commit is not None and wait:
            waits.append(self._wait_flush(result.end_offset))
        if (
            self._replica_waiter is not None
            and wait
            and self.config.broker_role is BrokerRole.SYNC_MASTER
        ):
            waits.append(self._wait_replica(self._replica_waiter, result.end_offset))
        status = PutMessageStatus.PUT_OK
        for outcome in await asyncio.gather(*waits):
            if outcome is not PutMessageStatus.PUT_OK and status is PutMessageStatus.PUT_OK:
                status = outcome
        remark = "" if status is PutMessageStatus.PUT_OK else status.value
        return PutMessageResult(status, result, remark)

    @staticmethod
    async def _wait_replica(waiter: ReplicaWaiter, end_offset: int) -> PutMessageStatus:
        """The HA hook's verdict; a failing hook means "stored, not replicated"."""
        try:
            return await waiter(end_offset)
        except Exception:
            log.exception("replica waiter failed for end offset %d", end_offset)
            return PutMessageStatus.SLAVE_NOT_AVAILABLE

    async def _wait_flush(self, end_offset: int) -> PutMessageStatus:
        assert self._group_commit is not None
        fut = self._group_commit.put_request(end_offset)
        try:
            ok = await asyncio.wait_for(
                asyncio.shield(fut), timeout=self.config.sync_flush_timeout / 1000
            )
        except TimeoutError:
            return PutMessageStatus.FLUSH_DISK_TIMEOUT
        return PutMessageStatus.PUT_OK if ok else PutMessageStatus.FLUSH_DISK_TIMEOUT

    # --- replication (HA) ----------------------------------------------------------------------

    def get_commit_log_data(self, offset: int) -> SelectMappedBufferResult | None:
        """Bytes from ``offset`` to the end of written data in its file, held until
        ``.release()``; ``.buffer`` is the memoryview, ``.start_offset`` its CommitLog offset."""
        return self.commit_log.get_data(offset)

    def append_to_commit_log(self, start_offset: int, data: bytes | memoryview) -> bool:
        """Slave: append raw CommitLog bytes at exactly ``start_offset``; dispatch follows."""
        was_empty = self.commit_log.mapped_file_queue.is_empty()
        try:
            ok = self.commit_log.append_data(start_offset, data)
        except StoreFileError:
            log.exception("slave append at %d failed", start_offset)
            return False
        if ok:
            if was_empty:
                # An empty slave starts where the master's data starts, maybe mid-file.
                self.reput.reput_from_offset = start_offset
            self.reput.wakeup()
            if self._group_commit is not None:
                self._group_commit.wakeup()
        return ok

    @property
    def max_phy_offset(self) -> int:
        return self.commit_log.max_offset

    @property
    def min_phy_offset(self) -> int:
        return max(self.commit_log.min_offset, 0)

    @property
    def confirm_offset(self) -> int:
        """Upstream ``getConfirmOffset``: the CommitLog offset up to which records reach the
        ConsumeQueues, and so consumers (the pull, the queue offsets it reports, the long-poll
        wake-up). The CommitLog end unless a source is set (controller mode)."""
        return self.reput.reput_end_offset()

    def _confirm_offset_to_save(self) -> int:
        """What the checkpoint keeps as ``confirmPhyOffset`` (upstream setConfirmPhyOffset)."""
        return self.confirm_offset

    def set_confirm_offset_source(self, source: Callable[[], int] | None) -> None:
        """Read only up to ``source()`` (capped at the CommitLog end) from now on (upstream
        readUnCommitted=false), or, with None, everything written. Records already dispatched
        stay; dispatch is woken, since a raised or removed limit may let it go on."""
        self.reput.end_offset = source
        self.reput.wakeup()

    @property
    def flushed_offset(self) -> int:
        return self.commit_log.mapped_file_queue.flushed_where

    def dispatch_behind_bytes(self) -> int:
        return self.reput.behind()

    # --- get --------------------------------------------------------------------------------

    def get_message(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_msg_nums: int,
        message_filter: MessageFilter | None = None,
    ) -> GetMessageResult:
        """Up to ``max_msg_nums`` messages from queue offset ``offset`` (upstream getMessage),
        as raw record slices; call ``release()`` on the result once they are sent."""
        del group  # kept for the upstream signature (per-group statistics live in the broker)
        config = self.config
        # upstream nextOffsetCorrection: a slave never moves a consumer's offset
        correct = config.broker_role is not BrokerRole.SLAVE or config.offset_check_in_slave
        cq = self.consume_queues.find(topic, queue_id)
        if cq is None:
            self._get_miss_total += 1
            return GetMessageResult(
                GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, next_begin_offset=0 if correct else offset
            )
        min_offset = cq.min_offset_in_queue
        max_offset = cq.max_offset_in_queue
        refused = offset_status(offset, min_offset, max_offset, correct=correct)
        if refused is not None:
            self._get_miss_total += 1
            status, next_begin = refused
            return GetMessageResult(status, next_begin, min_offset, max_offset)
        started = time.perf_counter()
        result = read_queue(cq, self.commit_log, offset, max_msg_nums, message_filter, self._limits)
        self.put_stats.record_get((time.perf_counter() - started) * 1000)
        if result.status is GetMessageStatus.FOUND:
            self._get_found_total += 1
        else:
            self._get_miss_total += 1
        return result

    # --- lookups ----------------------------------------------------------------------------

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.consume_queues.find(topic, queue_id)
        return cq.max_offset_in_queue if cq else 0

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.consume_queues.find(topic, queue_id)
        return cq.min_offset_in_queue if cq else -1

    def check_in_mem_by_consume_offset(self, topic: str, queue_id: int, cq_offset: int) -> bool:
        """Upstream ``checkInMemByConsumeOffset`` (batch of one): the message at ``cq_offset``
        exists and lies within the memory budget behind the CommitLog tail, the same notion
        of "in memory" as the pull's slave suggestion (upstream asks the page cache)."""
        cq = self.consume_queues.find(topic, queue_id)
        unit = cq.get_unit(cq_offset) if cq else None
        if unit is None or unit[1] == BLANK_UNIT_SIZE:
            return False
        return self.commit_log.max_offset - unit[0] <= self._limits.memory_budget

    def get_commit_log_offset_in_queue(self, topic: str, queue_id: int, cq_offset: int) -> int:
        cq = self.consume_queues.find(topic, queue_id)
        unit = cq.get_unit(cq_offset) if cq else None
        return unit[0] if unit and unit[1] != BLANK_UNIT_SIZE else 0

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        cq = self.consume_queues.find(topic, queue_id)
        if cq is None:
            return 0
        return cq.get_offset_in_queue_by_time(timestamp_ms, self.commit_log.pickup_store_timestamp)

    def get_message_store_timestamp(self, topic: str, queue_id: int, cq_offset: int) -> int:
        cq = self.consume_queues.find(topic, queue_id)
        unit = cq.get_unit(cq_offset) if cq else None
        if unit is None or unit[1] == BLANK_UNIT_SIZE:
            return -1
        return self.commit_log.pickup_store_timestamp(unit[0], unit[1])

    def get_earliest_message_time(self, topic: str, queue_id: int) -> int:
        cq = self.consume_queues.find(topic, queue_id)
        if cq is None:
            return -1
        for index in range(cq.min_offset_in_queue, cq.max_offset_in_queue):
            unit = cq.get_unit(index)
            if unit is None:
                return -1
            if unit[1] != BLANK_UNIT_SIZE:
                return self.commit_log.pickup_store_timestamp(unit[0], unit[1])
        return -1

    def look_message_by_offset(self, commit_log_offset: int) -> MessageExt | None:
        size = self.commit_log.get_record_size(commit_log_offset)
        if size < rec.MIN_RECORD_SIZE:
            return None
        sel = self.commit_log.get_message(commit_log_offset, size)
        if sel is None:
            return None
        try:
            # CRC-checked, and the record must name its own offset: a damaged record (or an
            # index entry pointing into the middle of one) is never served by id or key.
            found = rec.decode_message_ext(sel.buffer, 0, size, check_crc=True)
        except ValueError:
            return None
        finally:
            sel.release()
        return found if found.commit_log_offset == commit_log_offset else None

    def query_message(
        self, topic: str, key: str, max_num: int, begin: int, end: int
    ) -> QueryMessageResult:
        """Messages whose KEYS or UNIQ_KEY equal ``key``, stored in [begin, end] ms (newest
        first). Hash collisions are filtered out by comparing the stored keys."""
        out = QueryMessageResult()
        if not self.config.message_index_enable:
            return out
        offsets, last_ts, last_phy = self.index_service.query_offsets(
            topic, key, max_num * 2, begin, end
        )
        out.index_last_update_timestamp = last_ts
        out.index_last_update_phyoffset = last_phy
        for phy in offsets:
            if len(out.phy_offsets) >= max_num:
                break
            msg = self.look_message_by_offset(phy)
            if msg is None or msg.topic != topic:
                continue
            if key in msg.keys or msg.uniq_key == key:
                out.phy_offsets.append(phy)
                out.messages.append(msg)
        return out

    def check_in_disk_by_commit_offset(self, offset: int) -> bool:
        return self.commit_log.max_offset - offset > 0

    # --- admin --------------------------------------------------------------------------------

    def delete_topics(self, names: Sequence[str]) -> int:
        deleted = 0
        wanted = set(names)
        for topic in wanted:
            if self.consume_queues.delete_topic(topic):
                deleted += 1
        table = self.commit_log.topic_queue_table
        for key in list(table):
            if key.rsplit("-", 1)[0] in wanted:
                del table[key]
        return deleted

    def execute_delete_files_manually(self) -> None:
        if self._cleanup is not None:
            self._cleanup.execute_delete_files_manually()

    async def run_cleanup_once(self) -> None:
        """One retention turn now (admin tools and tests)."""
        if self._cleanup is not None:
            await self._cleanup.run_once()

    def _delete_expired_commit_log(self, clean_immediately: bool) -> int:
        cfg = self.config
        return self.commit_log.mapped_file_queue.delete_expired_files_by_time(
            cfg.file_reserved_time * 3600 * 1000,
            cfg.delete_commit_log_files_interval,
            cfg.destroy_maped_file_interval_forcibly,
            clean_immediately,
        )

    def _delete_expired_derived(self) -> int:
        min_offset = self.min_phy_offset
        deleted = self.consume_queues.delete_expired(min_offset)
        if self.config.message_index_enable:
            deleted += self.index_service.delete_expired(min_offset)
        return deleted

    def apply_flush_settings(self) -> None:
        """Hand the flush settings of ``config``, changed at run time (UPDATE_BROKER_CONFIG), to
        the running flushers; they read them from their next turn on."""
        cfg = self.config
        if self._flush_commit_log is not None:
            self._flush_commit_log.interval_ms = cfg.flush_interval_commit_log
            self._flush_commit_log.least_pages = cfg.flush_commit_log_least_pages
            self._flush_commit_log.thorough_interval_ms = cfg.flush_commit_log_thorough_interval
        if self._flush_cq is not None:
            self._flush_cq.interval_ms = cfg.flush_interval_consume_queue
            self._flush_cq.least_pages = cfg.flush_consume_queue_least_pages
            self._flush_cq.thorough_interval_ms = cfg.flush_consume_queue_thorough_interval

    def _upstream_runtime_info(self, commit_log_ratio: float) -> dict[str, str]:
        """The rest of upstream DefaultMessageStore's runtime keys, as ferrymq's store has them."""
        cfg = self.config
        min_offset = self.min_phy_offset
        size = self.commit_log.get_record_size(min_offset) if self.commit_log.max_offset else 0
        earliest = self.commit_log.pickup_store_timestamp(min_offset, size) if size > 0 else -1
        unflushed = self.commit_log.max_offset - self.commit_log.mapped_file_queue.flushed_where
        info = {
            f"commitLogDiskRatio_{cfg.commit_log_dir}": f"{commit_log_ratio:.4f}",
            "earliestMessageTimeStamp": str(earliest),
            "remainHowManyDataToFlush": human_readable_bytes(max(0, unflushed)),
            # no transient store pool: upstream answers Integer.MAX_VALUE then
            "remainTransientStoreBufferNumbs": str(2**31 - 1),
            # the reput task dispatches from the CommitLog itself: no dispatch buffer
            "dispatchMaxBuffer": "0",
            # puts append under no lock that a reader could wait on
            "pageCacheLockTimeMills": "0",
            "runtime": format_runtime(time.time() - self._boot_time),
        }
        try:
            info["consumeQueueDiskRatio"] = f"{self._disk_usage(cfg.consume_queue_dir):.4f}"
            total, _, free = shutil.disk_usage(cfg.store_path_root_dir)
            info["commitLogDirCapacity"] = (
                f"Total : {human_readable_bytes(total)}, Free : {human_readable_bytes(free)}."
            )
        except OSError:
            pass  # a directory not there yet: upstream leaves the keys out too
        return info

    def runtime_info(self) -> dict[str, str]:
        """Upstream-style runtime figures, all strings (they go into GET_BROKER_RUNTIME_INFO)."""
        mfq = self.commit_log.mapped_file_queue
        try:
            ratio = self._disk_usage(self.config.commit_log_dir)
        except OSError:
            ratio = -1.0
        info = {
            "commitLogMaxOffset": str(self.commit_log.max_offset),
            "confirmOffset": str(self.confirm_offset),
            "commitLogMinOffset": str(self.min_phy_offset),
            "commitLogFlushedOffset": str(mfq.flushed_where),
            "commitLogDiskRatio": f"{ratio:.4f}",
            "commitLogFileCount": str(len(mfq.files)),
            "dispatchBehindBytes": str(self.reput.behind()),
            "dispatchedMessages": str(self.reput.dispatched_messages),
            "putMessageTimesTotal": str(self._put_times_total),
            "putMessageSizeTotal": str(self._put_size_total),
            "getMessageFoundTotal": str(self._get_found_total),
            "getMessageMissTotal": str(self._get_miss_total),
            "consumeQueueCount": str(sum(1 for _ in self.consume_queues)),
            "indexFileCount": str(len(self.index_service.files)),
            "diskFull": str(self.is_disk_full).lower(),
            "commitLogCorruptRecordsSkipped": str(self.corrupt_records_skipped),
            "commitLogCorruptBytesSkipped": str(self.corrupt_bytes_skipped),
            "dispatchErrors": str(self.reput.dispatch_errors),
            "flushDiskType": self.config.flush_disk_type.value,
            "physicMsgTimestamp": str(self.checkpoint.physic_msg_timestamp),
            "logicsMsgTimestamp": str(self.checkpoint.logics_msg_timestamp),
            "indexMsgTimestamp": str(self.checkpoint.index_msg_timestamp),
        }
        if self._group_commit is not None:
            info["groupCommitFlushes"] = str(self._group_commit.flushes)
            info["groupCommitRequests"] = str(self._group_commit.requests_served)
        info.update(self.put_stats.runtime_info(self._put_times_total, self._put_size_total))
        info.update(self._upstream_runtime_info(ratio))
        info.update(self.recovery_stats)
        return info


def human_readable_bytes(count: int) -> str:
    """Upstream MixAll.humanReadableByteCount(bytes, false): "512 B", "1.5 KiB", "3.0 GiB"."""
    if count < 1024:
        return f"{count} B"
    exp = min(6, int(math.log(count) / math.log(1024)))
    return f"{count / 1024**exp:.1f} {'KMGTPE'[exp - 1]}iB"


def format_runtime(seconds: float) -> str:
    """Upstream StoreStatsService.getFormatRuntime: "[ 0 days, 1 hours, 2 minutes, 3 seconds ]"."""
    whole = int(seconds)
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    return f"[ {days} days, {hours} hours, {minutes} minutes, {secs} seconds ]"


__all__ = [
    "GetMessageResult",
    "GetMessageStatus",
    "MessageFilter",
    "MessageStore",
    "PutMessageResult",
    "PutMessageStatus",
    "ReplicaWaiter",
]
