"""Store benchmark (``ferrymq bench store``, ``bench/store_bench.py``): every figure is measured
in the same run as its baseline and reported as a ratio to it.

- baseline: raw copies of 1 KiB records into an mmap (the ceiling for any append path);
- CommitLog append of 1 KiB messages, singly and in SEND_BATCH bodies of 32, through
  ``MessageStore.put_message(s)`` with ASYNC_FLUSH (reput and flush running, as in a broker);
  and of batches whose bodies vary in length (0.75-1.25 KiB records, 1 KiB on average), which
  cannot take the one-struct path of batches with one message shape;
- dispatch rate: rebuilding every ConsumeQueue and index entry from the CommitLog;
- recovery time per GiB: abnormal start-up scan (CRC checked) of the written CommitLog.
"""

from __future__ import annotations

import asyncio
import mmap
import os
import random
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from ferrymq.message import Message, MessageInner, encode_batch, encode_properties
from ferrymq.store import record as rec
from ferrymq.store.config import MessageStoreConfig
from ferrymq.store.message_store import MessageStore
from ferrymq.store.results import PutMessageResult, PutMessageStatus

RECORD = 1024
STORE_HOST = ("127.0.0.1", 10911)


@dataclass(slots=True)
class Figure:
    """One measured path; ``ratio`` is its rate over the baseline's, both summed over the same
    interleaved rounds (so a busy moment on a shared machine hits every path alike)."""

    name: str
    messages: int
    seconds: float
    bytes: int
    baseline_rate: float = 0.0

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
    dispatch_msgs_per_s: float = 0.0
    dispatch_ratio: float = 0.0
    recovery_s_per_gib: float = 0.0
    rebuild_s_per_gib: float = 0.0
    notes: list[str] = field(default_factory=list)


def _properties(i: int) -> dict[str, str]:
    """What a RocketMQ client sends with every message (UNIQ_KEY, WAIT) plus a tag."""
    return {"UNIQ_KEY": f"7F000001{i:024X}", "WAIT": "true", "TAGS": "TagA"}


def _body_len(topic: str) -> int:
    props = len(encode_properties(_properties(0)).encode())
    return RECORD - rec.MIN_RECORD_SIZE - len(topic) - props


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


class _Baseline:
    """Raw copies of 1 KiB records into a mapped file (the ceiling for any append path)."""

    def __init__(self, path: Path, count: int) -> None:
        self.size = count * RECORD
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        os.ftruncate(self.fd, self.size)
        self.mm = mmap.mmap(self.fd, self.size)
        self.payload = os.urandom(RECORD)
        self.pos = 0

    def run(self, n: int) -> float:
        mm, payload, pos = self.mm, self.payload, self.pos
        started = time.perf_counter()
        for _ in range(n):
            mm[pos : pos + RECORD] = payload
            pos += RECORD
        elapsed = time.perf_counter() - started
        self.pos = pos
        return elapsed

    def close(self) -> None:
        self.mm.close()
        os.close(self.fd)


async def _timed_puts(
    store: MessageStore,
    put: Callable[[MessageInner], Awaitable[PutMessageResult]],
    items: list[MessageInner],
    fig: Figure,
) -> float:
    """Puts every item with ``put`` (the store's single or batch put); adds the bytes appended to
    ``fig`` and returns the seconds taken."""
    started = time.perf_counter()
    before = store.max_phy_offset
    for item in items:
        r = await put(item)
        if r.status is not PutMessageStatus.PUT_OK:
            raise RuntimeError(f"put failed: {r.status} {r.remark}")
    elapsed = time.perf_counter() - started
    fig.bytes += store.max_phy_offset - before
    return elapsed


async def _append_rounds(
    tmp: Path, count: int, batch: int, rounds: int, file_size: int, report: BenchReport
) -> Path:
    topic = "BENCH"
    body = os.urandom(_body_len(topic))
    per_round = max(batch, (count // rounds) // batch * batch)
    baseline = _Baseline(tmp / "baseline.bin", per_round * rounds)
    single = MessageStore(_config(tmp / "single", file_size), STORE_HOST)
    batched = MessageStore(_config(tmp / "batch", file_size), STORE_HOST)
    mixed = MessageStore(_config(tmp / "mixed", file_size), STORE_HOST)
    await single.start()
    await batched.start()
    await mixed.start()
    base_fig = Figure("raw mmap copy (baseline)", 0, 0.0, 0)
    single_fig = Figure("CommitLog append, single", 0, 0.0, 0)
    batch_fig = Figure(f"CommitLog append, batch {batch}", 0, 0.0, 0)
    mixed_fig = Figure(f"CommitLog batch {batch}, mixed sizes", 0, 0.0, 0)
    # Bodies of len(body) +- 25%, uniformly: 1 KiB records on average.
    spread = len(body) // 4
    doubled = body * 2
    lengths = random.Random(len(body))
    seq = 0
    try:
        for _ in range(rounds):
            # Prepared outside the timed loops: requests arrive already decoded by the broker.
            singles = [
                MessageInner.create(topic, i & 7, body, _properties(seq + i))
                for i in range(per_round)
            ]
            seq += per_round
            bodies = [
                encode_batch(
                    [
                        Message(topic, body, properties=_properties(seq + j * batch + k))
                        for k in range(batch)
                    ]
                )
                for j in range(per_round // batch)
            ]
            seq += per_round
            batches = [MessageInner.create(topic, j & 7, b) for j, b in enumerate(bodies)]
            mixed_batches = [
                MessageInner.create(
                    topic,
                    j & 7,
                    encode_batch(
                        [
                            Message(
                                topic,
                                doubled[: len(body) - spread + lengths.randrange(2 * spread + 1)],
                                properties=_properties(seq + j * batch + k),
                            )
                            for k in range(batch)
                        ]
                    ),
                )
                for j in range(per_round // batch)
            ]
            seq += per_round

            t_base = baseline.run(per_round)

            t_single = await _timed_puts(single, single.put_message, singles, single_fig)
            t_batch = await _timed_puts(batched, batched.put_messages, batches, batch_fig)
            t_mixed = await _timed_puts(mixed, mixed.put_messages, mixed_batches, mixed_fig)

            for fig, t in (
                (base_fig, t_base),
                (single_fig, t_single),
                (batch_fig, t_batch),
                (mixed_fig, t_mixed),
            ):
                fig.messages += per_round
                fig.seconds += t
        base_fig.bytes = base_fig.messages * RECORD
        for fig in (single_fig, batch_fig, mixed_fig):
            fig.baseline_rate = base_fig.msgs_per_s
        report.figures.extend([base_fig, single_fig, batch_fig, mixed_fig])
    finally:
        baseline.close()
        await single.shutdown()
        await batched.shutdown()
        await mixed.shutdown()
    return tmp / "batch"


async def _measure_start(root: Path, file_size: int) -> tuple[float, int, int]:
    store = MessageStore(_config(root, file_size), STORE_HOST)
    started = time.perf_counter()
    await store.start()
    elapsed = time.perf_counter() - started
    redispatched = int(store.recovery_stats.get("redispatchedMessages", "0"))
    size = store.max_phy_offset
    await store.shutdown()
    return elapsed, redispatched, size


def run_benchmark(
    count: int = 64_000,
    batch: int = 32,
    rounds: int = 8,
    file_size: int = 64 * 1024 * 1024,
    directory: Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> BenchReport:
    """Run every figure once (about ``4 * count`` KiB of disk under ``directory``)."""
    say = progress or (lambda _text: None)
    report = BenchReport()
    tmp = Path(tempfile.mkdtemp(prefix="ferrymq-bench-", dir=directory))
    try:
        say(f"append: baseline, single and batch {batch}, {rounds} interleaved rounds")
        root = asyncio.run(_append_rounds(tmp, count, batch, rounds, file_size, report))
        base_rate = report.figures[0].msgs_per_s

        say("recovery: abnormal start-up (CRC scan from the checkpoint's file)")
        (root / "abort").touch()
        elapsed, _, size = asyncio.run(_measure_start(root, file_size))
        report.recovery_s_per_gib = elapsed / (size / 2**30)

        say("dispatch: rebuild ConsumeQueue and index from the CommitLog")
        shutil.rmtree(root / "consumequeue", ignore_errors=True)
        shutil.rmtree(root / "index", ignore_errors=True)
        # Baseline again right before, for a same-moment ratio.
        n_base = max(8192, count // 2)
        baseline = _Baseline(tmp / "baseline2.bin", n_base)
        t_base = baseline.run(n_base)
        baseline.close()
        elapsed, redispatched, size = asyncio.run(_measure_start(root, file_size))
        report.rebuild_s_per_gib = elapsed / (size / 2**30)
        report.dispatch_msgs_per_s = redispatched / elapsed if elapsed else 0.0
        report.dispatch_ratio = report.dispatch_msgs_per_s / (n_base / t_base)
        report.notes.append(
            f"{report.figures[0].messages} records of {RECORD} B per path (UNIQ_KEY, WAIT, TAGS "
            f"properties as real clients send); files of {file_size // 2**20} MiB; ASYNC_FLUSH; "
            f"baseline {base_rate:,.0f} records/s; dispatch includes the CRC-checked "
            "recovery scan and ConsumeQueue + index builds"
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return report


def format_report(report: BenchReport) -> list[str]:
    lines = [f"{'figure':32} {'msgs/s':>10} {'MB/s':>8} {'x baseline':>11}"]
    for f in report.figures:
        lines.append(f"{f.name:32} {f.msgs_per_s:10,.0f} {f.mb_per_s:8.1f} {f.ratio:11.3f}")
    lines.append(
        f"{'dispatch (rebuild CQ + index)':32} {report.dispatch_msgs_per_s:10,.0f} "
        f"{'':8} {report.dispatch_ratio:11.3f}"
    )
    lines.append(f"recovery, abnormal (CRC scan): {report.recovery_s_per_gib:.2f} s/GiB")
    lines.append(f"rebuild (scan + dispatch):     {report.rebuild_s_per_gib:.2f} s/GiB")
    lines.extend(report.notes)
    return lines
