"""Single-byte corruption after an unclean exit loses at most the damaged record (issue 23,
item 2), and the checkpoint is current soon after start.

A store child process appends under SYNC_FLUSH across many small CommitLog files until it is
SIGKILLed (``tests/store/crash_child.py``). Then, 20 times, a copy of its store gets one byte
flipped anywhere in the written CommitLog or ConsumeQueue data and is reopened: every
acknowledged message except the one whose bytes were hit must be readable intact, and no
record that fails its checks is ever served. Before the fix one flipped byte lost the record
and everything after it in the file (and, after an unclean exit, everything after it).
"""

from __future__ import annotations

import importlib.util
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest
from ferrymq.store import record as rec
from ferrymq.store.checkpoint import StoreCheckpoint
from ferrymq.store.consume_queue import CQ_STORE_UNIT_SIZE
from ferrymq.store.message_store import MessageStore
from ferrymq.store.results import GetMessageStatus, PutMessageStatus
from subprocess_helpers import popen

CHILD = Path(__file__).resolve().parent.parent / "store" / "crash_child.py"
TRIALS = 20
MIN_ACKS = 700


def _child_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ferrymq_crash_child", CHILD)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


child = _child_module()
Ack = tuple[int, int, int]  # commit log offset, queue id, queue offset


def run_and_kill(root: Path) -> dict[int, Ack]:
    """seq -> where it was stored, for every message acknowledged before SIGKILL."""
    root.mkdir(parents=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    with open(root.parent / "child.stderr", "w+b") as err:
        proc = popen(
            [sys.executable, str(CHILD), str(root), "0"],
            stdout=subprocess.PIPE,
            stderr=err,
            env=env,
        )
        assert proc.stdout is not None
        acks: dict[int, Ack] = {}
        try:
            assert proc.stdout.readline() == b"ready\n"
            deadline = time.monotonic() + 120
            while len(acks) < MIN_ACKS:
                assert time.monotonic() < deadline, f"only {len(acks)} acks"
                parts = proc.stdout.readline().split()
                if len(parts) == 6 and parts[0] == b"ack":
                    _run, seq, offset, qid, queue_offset = (int(p) for p in parts[1:])
                    acks[seq] = (offset, qid, queue_offset)
            os.kill(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == -signal.SIGKILL
    for line in out.decode().splitlines():
        parts = line.split()
        if len(parts) == 6 and parts[0] == "ack":
            _run, seq, offset, qid, queue_offset = (int(p) for p in parts[1:])
            acks[seq] = (offset, qid, queue_offset)
    return acks


def record_sizes(root: Path, acks: dict[int, Ack], file_size: int) -> dict[int, int]:
    """seq -> TOTALSIZE of its record, read from the untouched files."""
    sizes = {}
    for seq, (offset, _qid, _qo) in acks.items():
        path = root / "commitlog" / f"{offset - offset % file_size:020d}"
        with open(path, "rb") as fh:
            fh.seek(offset % file_size)
            sizes[seq] = int.from_bytes(fh.read(4), "big")
    return sizes


def pick_flip(
    root: Path, acks: dict[int, Ack], sizes: dict[int, int], rng: random.Random
) -> tuple[Path, int, int | None]:
    """A random written byte of a CommitLog or ConsumeQueue file: ``(file, position, seq of the
    acknowledged message whose bytes it is, or None)``."""
    cl_size = child.crash_config(root).mapped_file_size_commit_log
    cq_size = child.crash_config(root).mapped_file_size_consume_queue
    data_end = max(offset + sizes[seq] for seq, (offset, _q, _o) in acks.items())
    if rng.random() < 0.75:
        absolute = rng.randrange(0, data_end + 64)  # a little of the tail beyond the data too
        path = root / "commitlog" / f"{absolute - absolute % cl_size:020d}"
        hit = next(
            (s for s, (o, _q, _qo) in acks.items() if o <= absolute < o + sizes[s]),
            None,
        )
        return path, absolute % cl_size, hit
    qid = rng.randrange(child.QUEUES)
    units = [(qo, s) for s, (_o, q, qo) in acks.items() if q == qid]
    queue_offset, seq = rng.choice(units)
    byte = queue_offset * CQ_STORE_UNIT_SIZE + rng.randrange(CQ_STORE_UNIT_SIZE)
    path = root / "consumequeue" / "CRASH" / str(qid) / f"{byte - byte % cq_size:020d}"
    return path, byte % cq_size, seq


def flip(path: Path, position: int, rng: random.Random) -> None:
    with open(path, "r+b") as fh:
        fh.seek(position)
        old = fh.read(1)
        fh.seek(position)
        fh.write(bytes([old[0] ^ rng.randint(1, 255)]))


async def readable(root: Path) -> tuple[dict[int, tuple[int, int]], int]:
    """seq -> (queue id, queue offset) of every message served, checking each verifies; and
    the store's count of skipped damaged records."""
    store = MessageStore(child.crash_config(root), ("127.0.0.1", 10911))
    await store.start()
    try:
        seen: dict[int, tuple[int, int]] = {}
        for qid in range(child.QUEUES):
            offset = max(store.get_min_offset_in_queue("CRASH", qid), 0)
            while True:
                res = store.get_message("checker", "CRASH", qid, offset, 32)
                try:
                    if res.status is not GetMessageStatus.FOUND:
                        if res.next_begin_offset > offset:
                            offset = res.next_begin_offset
                            continue
                        break
                    for queue_offset, raw in zip(res.queue_offsets, res.messages, strict=True):
                        check = rec.check_record(raw, 0, len(raw), check_crc=True)
                        assert check.kind is rec.RecordKind.MESSAGE, check.reason
                        assert check.record is not None
                        r = check.record
                        ident = child.parse_body(bytes(raw[r.body_pos : r.body_pos + r.body_len]))
                        assert ident is not None, "a damaged record was served"
                        assert (r.queue_id, r.queue_offset) == (qid, queue_offset)
                        seen[ident[1]] = (qid, queue_offset)
                    offset = res.next_begin_offset
                finally:
                    res.release()
        # the log takes new messages after the repair
        put = await store.put_message(child.MessageInner.create("CRASH", 0, b"after", {}))
        assert put.status is PutMessageStatus.PUT_OK
        return seen, store.corrupt_records_skipped
    finally:
        await store.shutdown()


async def test_twenty_single_byte_flips_lose_at_most_the_damaged_record(tmp_path: Path) -> None:
    await run_flips(tmp_path, TRIALS)


@pytest.mark.slow
async def test_two_hundred_single_byte_flips_soak(tmp_path: Path) -> None:
    await run_flips(tmp_path, 200)


async def run_flips(tmp_path: Path, trials: int) -> None:
    seed = int(os.environ.get("FERRYMQ_TEST_SEED") or int.from_bytes(os.urandom(4), "big"))
    print(f"corruption test seed {seed}")  # shown on failure, to replay the flips
    rng = random.Random(seed)
    pristine = tmp_path / "pristine"
    acks = run_and_kill(pristine)
    cl_size = child.crash_config(pristine).mapped_file_size_commit_log
    assert len(list((pristine / "commitlog").iterdir())) >= 5  # a multi-file store
    sizes = record_sizes(pristine, acks, cl_size)
    lost_damaged = 0
    for trial in range(trials):
        root = tmp_path / f"trial-{trial}"
        shutil.copytree(pristine, root)
        path, position, hit = pick_flip(root, acks, sizes, rng)
        flip(path, position, rng)
        seen, skipped = await readable(root)
        where = f"trial {trial}: byte {position} of {path.relative_to(root)} (message {hit})"
        missing = {seq for seq in acks if seq not in seen}
        assert missing <= ({hit} if hit is not None else set()), f"{where}: lost {missing}"
        for seq in acks.keys() & seen.keys():
            assert seen[seq] == acks[seq][1:], f"{where}: message {seq} moved"
        assert skipped <= 1, where
        lost_damaged += len(missing)
        shutil.rmtree(root)
    print(f"{trials} flips: {lost_damaged} damaged messages not served, nothing else lost")


async def test_checkpoint_is_written_soon_after_start(tmp_path: Path) -> None:
    """Before the fix the first checkpoint came 60 s after start: every crash in the first
    minute made recovery scan from the first CommitLog file."""
    config = child.crash_config(tmp_path / "store")
    store = MessageStore(config, ("127.0.0.1", 10911))
    await store.start()
    try:
        put = await store.put_message(child.MessageInner.create("CRASH", 0, b"x", {}))
        assert put.status is PutMessageStatus.PUT_OK and put.append_result is not None
        stamp = put.append_result.store_timestamp
        deadline = time.monotonic() + 10  # far below the 60 s thorough interval
        while True:
            on_disk = StoreCheckpoint(config.checkpoint_path)
            if on_disk.physic_msg_timestamp >= stamp and on_disk.logics_msg_timestamp >= stamp:
                break
            assert time.monotonic() < deadline, "checkpoint not written"
            await child.asyncio.sleep(0.05)  # polling a file with a deadline
    finally:
        await store.shutdown()
