"""Store benchmark (``ferrymq bench store``, ``bench/store_bench.py``): every figure is measured
in the same run as its baseline and reported as a ratio to it.

- baseline: raw copies of 1 KiB records into an mmap (the ceiling for any append path);
- CommitLog append of 1 KiB messages, singly and in SEND_BATCH bodies of 32, through
  ``MessageStore.put_message(s)`` with ASYNC_FLUSH (reput and flush running, as in a broker);
- dispatch rate: rebuilding every ConsumeQueue and index entry from the CommitLog;
- recovery time per GiB: abnormal start-up scan (CRC checked) of the written CommitLog.
"""

from __future__ import annotations

import asyncio
import mmap
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ferrymq.message import Message, MessageInner, encode_batch
from ferrymq.store.config import MessageStoreConfig
from ferrymq.store.message_store import MessageStore
from ferrymq.store.results import PutMessageStatus

RECORD = 1024
STORE_HOST = ("127.0.0.1", 10911)


@dataclass(slots=True)
class Figure:
    name: str
    messages: int
    seconds: float
    bytes: int
    baseline_rate: float = 0.0  # msgs/s of the baseline in this run (0 for the baseline itself)

    @property
    def msgs_per_s(self) -> float:
        return self.messages / self.seconds if self.seconds > 0 else 0.0

    @property
    def mb_per_s(self) -> float:
        return self.bytes / self.seconds / 1e6 if self.seconds > 0 else 0.0

    @property
    def ratio(self) -> float:
        return self.msgs_per_s / self.baseline_rate if self.baseline_rate else 1.0


@dataclass(slots=True)
class BenchReport:
    figures: list[Figure] = field(default_factory=list)
    recovery_s_per_gib: float = 0.0
    rebuild_s_per_gib: float = 0.0
    notes: list[str] = field(default_factory=list)


def raw_mmap_baseline(directory: Path, count: int) -> Figure:
    """Copy ``count`` 1 KiB records into a mapped file: the ceiling for the append path."""
    size = count * RECORD
    path = directory / "baseline.bin"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.ftruncate(fd, size)
        mm = mmap.mmap(fd, size)
        payload = os.urandom(RECORD)
        started = time.perf_counter()
        pos = 0
        for _ in range(count):
            mm[pos : pos + RECORD] = payload
            pos += RECORD
        elapsed = time.perf_counter() - started
        mm.close()
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    return Figure("raw mmap copy (baseline)", count, elapsed, size)


def _config(root: Path, file_size: int) -> MessageStoreConfig:
    return MessageStoreConfig.model_validate(
        {
            "storePathRootDir": str(root),
            "mappedFileSizeCommitLog": file_size,
            "flushDiskType": "ASYNC_FLUSH",
            "maxHashSlotNum": 500_000,
            "maxIndexNum": 2_000_000,
            # Keep the benchmark's own cleanup out of the figures.
            "cleanResourceInterval": 3_600_000,
        }
    )


def _body_len() -> int:
    # Whole record = 1 KiB: header 91 + topic "BENCH" (5) + properties (0).
    return RECORD - 91 - 5


async def _append_single(store: MessageStore, count: int) -> float:
    body = os.urandom(_body_len())
    started = time.perf_counter()
    for i in range(count):
        r = await store.put_message(MessageInner.create("BENCH", i & 7, body))
        if r.status is not PutMessageStatus.PUT_OK:
            raise RuntimeError(f"put failed: {r.status} {r.remark}")
    return time.perf_counter() - started


async def _append_batched(store: MessageStore, count: int, batch: int) -> float:
    body = os.urandom(_body_len())
    encoded = encode_batch([Message("BENCH", body) for _ in range(batch)])
    started = time.perf_counter()
    for i in range(count // batch):
        r = await store.put_messages(MessageInner.create("BENCH", i & 7, encoded))
        if r.status is not PutMessageStatus.PUT_OK:
            raise RuntimeError(f"batch put failed: {r.status} {r.remark}")
    return time.perf_counter() - started


async def _store_run(root: Path, count: int, file_size: int, batch: int) -> tuple[float, int]:
    store = MessageStore(_config(root, file_size), STORE_HOST)
    await store.start()
    try:
        if batch > 1:
            elapsed = await _append_batched(store, count, batch)
        else:
            elapsed = await _append_single(store, count)
        wrote = store.max_phy_offset
        return elapsed, wrote
    finally:
        await store.shutdown()


async def _measure_start(root: Path, file_size: int) -> tuple[float, int]:
    store = MessageStore(_config(root, file_size), STORE_HOST)
    started = time.perf_counter()
    await store.start()
    elapsed = time.perf_counter() - started
    redispatched = int(store.recovery_stats.get("redispatchedMessages", "0"))
    await store.shutdown()
    return elapsed, redispatched


def run_benchmark(
    count: int = 100_000,
    batch: int = 32,
    file_size: int = 64 * 1024 * 1024,
    directory: Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> BenchReport:
    """Run every figure once (a few hundred MB of disk under ``directory``)."""
    say = progress or (lambda _text: None)
    report = BenchReport()
    tmp = Path(tempfile.mkdtemp(prefix="ferrymq-bench-", dir=directory))
    try:
        say("baseline: raw mmap copy")
        base = raw_mmap_baseline(tmp, count)
        report.figures.append(base)
        rate = base.msgs_per_s

        say("append: single")
        elapsed, wrote = asyncio.run(_store_run(tmp / "single", count, file_size, 1))
        report.figures.append(Figure("CommitLog append, single", count, elapsed, wrote, rate))

        say(f"append: batches of {batch}")
        root = tmp / "batch"
        n = count - count % batch
        elapsed, wrote = asyncio.run(_store_run(root, n, file_size, batch))
        report.figures.append(Figure(f"CommitLog append, batch {batch}", n, elapsed, wrote, rate))

        say("recovery: abnormal start-up scan")
        (root / "abort").touch()
        elapsed, _ = asyncio.run(_measure_start(root, file_size))
        report.recovery_s_per_gib = elapsed / (wrote / 2**30)

        say("dispatch: rebuild ConsumeQueue and index from the CommitLog")
        shutil.rmtree(root / "consumequeue", ignore_errors=True)
        shutil.rmtree(root / "index", ignore_errors=True)
        elapsed, redispatched = asyncio.run(_measure_start(root, file_size))
        report.figures.append(
            Figure("dispatch (CQ + index rebuild)", redispatched, elapsed, wrote, rate)
        )
        report.rebuild_s_per_gib = elapsed / (wrote / 2**30)
        report.notes.append(
            f"{count} records of {RECORD} B; files of {file_size // 2**20} MiB; ASYNC_FLUSH; "
            "reput and flush tasks running during appends"
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return report


def format_report(report: BenchReport) -> list[str]:
    lines = [f"{'figure':36} {'msgs/s':>12} {'MB/s':>9} {'x baseline':>11}"]
    for f in report.figures:
        lines.append(f"{f.name:36} {f.msgs_per_s:12,.0f} {f.mb_per_s:9.1f} {f.ratio:11.3f}")
    lines.append(f"recovery (abnormal scan, CRC):      {report.recovery_s_per_gib:.2f} s/GiB")
    lines.append(f"rebuild (scan + dispatch):          {report.rebuild_s_per_gib:.2f} s/GiB")
    lines.extend(report.notes)
    return lines
