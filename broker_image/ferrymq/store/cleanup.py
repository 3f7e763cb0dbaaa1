"""Retention (upstream ``CleanCommitLogService`` / ``CleanConsumeQueueService``): pure
decisions plus the deletes.

Every ``cleanResourceInterval`` (10 s):
- CommitLog files untouched for ``fileReservedTime`` hours are deleted at the ``deleteWhen``
  hour(s), or at any hour once disk use passes ``diskMaxUsedSpaceRatio``;
- past ``diskSpaceCleanForciblyRatio`` (85 %) the oldest files go even if not expired
  (``cleanFileForciblyEnable``); past ``diskSpaceWarningLevelRatio`` (90 %) the store is marked
  disk-full and refuses puts until use falls again;
- then ConsumeQueue and index files wholly before the CommitLog's first byte are deleted.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ferrymq.store.config import MessageStoreConfig
from ferrymq.tasks import Periodic

log = logging.getLogger(__name__)

DiskUsage = Callable[[Path], float]
"""Returns the used fraction (0..1) of the filesystem holding a path."""


def disk_used_ratio(path: Path) -> float:
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    usage = shutil.disk_usage(probe)
    # Blocks in use over all blocks, as upstream (Java File.getFreeSpace counts reserved blocks
    # as free); root-reserved space does not count as used.
    return usage.used / usage.total if usage.total else 0.0


@dataclass(slots=True, frozen=True)
class CleanDecision:
    delete: bool  # run expiry this turn
    clean_immediately: bool  # delete the oldest files even if not expired
    disk_full: bool  # refuse puts
    reason: str


def decide_cleanup(
    hour: int,
    used_ratio: float,
    config: MessageStoreConfig,
    manual: bool = False,
) -> CleanDecision:
    """Whether this turn deletes, and how hard. Pure."""
    used = used_ratio * 100
    disk_full = used >= config.disk_space_warning_level_ratio
    over_max = used >= config.disk_max_used_space_ratio
    forcibly = used >= config.disk_space_clean_forcibly_ratio
    is_time = hour in config.delete_hours
    clean_immediately = config.clean_file_forcibly_enable and (forcibly or disk_full)
    delete = is_time or over_max or clean_immediately or manual
    if disk_full:
        reason = f"disk is {used:.1f}% used (diskSpaceWarningLevelRatio {config.disk_space_warning_level_ratio}%)"
    elif forcibly:
        reason = f"disk is {used:.1f}% used; forcing cleanup"
    elif over_max:
        reason = (
            f"disk is {used:.1f}% used (diskMaxUsedSpaceRatio {config.disk_max_used_space_ratio}%)"
        )
    elif is_time:
        reason = f"deleteWhen hour {hour:02d}"
    elif manual:
        reason = "manual"
    else:
        reason = "nothing to do"
    return CleanDecision(delete, clean_immediately, disk_full, reason)


class CleanupService:
    """Runs the decision every ``cleanResourceInterval`` and calls back into the store."""

    def __init__(
        self,
        config: MessageStoreConfig,
        disk_usage: DiskUsage,
        delete_commit_log: Callable[[bool], int],
        delete_derived: Callable[[], int],
        set_disk_full: Callable[[bool, str], None],
    ) -> None:
        self.config = config
        self.disk_usage = disk_usage
        self.delete_commit_log = delete_commit_log
        self.delete_derived = delete_derived
        self.set_disk_full = set_disk_full
        self._loop = Periodic(
            "cleanup",
            self.run_once,
            lambda: self.config.clean_resource_interval / 1000,
            first_now=True,
        )
        self.manual_delete_requests = 0

    def execute_delete_files_manually(self) -> None:
        """Upstream ``executeDeleteFilesManually``: expire regardless of the hour, once."""
        self.manual_delete_requests += 1

    async def run_once(self, now_ms: int | None = None) -> CleanDecision:
        now = time.time() if now_ms is None else now_ms / 1000
        hour = time.localtime(now).tm_hour
        ratio = await asyncio.to_thread(self.disk_usage, self.config.commit_log_dir)
        manual = self.manual_delete_requests > 0
        decision = decide_cleanup(hour, ratio, self.config, manual)
        self.set_disk_full(decision.disk_full, decision.reason)
        if decision.delete:
            if manual:
                self.manual_delete_requests -= 1
            deleted = await asyncio.to_thread(self.delete_commit_log, decision.clean_immediately)
            if deleted:
                log.info("deleted %d CommitLog file(s): %s", deleted, decision.reason)
        self.delete_derived()
        return decision

    def start(self) -> None:
        self._loop.start()

    async def stop(self) -> None:
        await self._loop.stop()
