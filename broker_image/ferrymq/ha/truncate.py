"""Cutting a stopped store's CommitLog at an offset (a demoted master's divergent tail).

Runs while the store is shut down: the CommitLog is cut (the file holding the offset is wiped
beyond it, later files deleted) and fsynced, so the stale bytes cannot come back after a crash;
the next ``MessageStore.start`` recovery then stops at the cut and drops ConsumeQueue and index
entries beyond it, as after any torn tail.
"""

from __future__ import annotations

import logging
import os

from ferrymq.store.config import MessageStoreConfig
from ferrymq.store.mapped_file import RESERVE_STEP
from ferrymq.store.mapped_file_queue import MappedFileQueue

log = logging.getLogger(__name__)


def truncate_commit_log(config: MessageStoreConfig, offset: int) -> None:
    """Cut the CommitLog of a *stopped* store at ``offset``. Blocking."""
    # loading reserves no more blocks than a step per file (the cut frees them anyway)
    mfq = MappedFileQueue(
        config.commit_log_dir, config.mapped_file_size_commit_log, reserve_step=RESERVE_STEP
    )
    mfq.load()
    try:
        mfq.truncate_dirty_files(offset)
        kept = mfq.files
    finally:
        mfq.shutdown()
    if kept:
        fd = os.open(kept[-1].path, os.O_RDWR)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    dir_fd = os.open(config.commit_log_dir, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    log.warning("CommitLog cut at offset %d (divergent tail removed)", offset)
