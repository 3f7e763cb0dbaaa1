"""Child process of the crash test: appends under SYNC_FLUSH until killed.

Usage: ``python crash_child.py <store root> <run id>``. Prints ``ready`` once the store has
started, then one line ``ack <run> <seq> <commitlog offset> <queue id> <queue offset>`` per
message, written only after ``put_message`` returned PUT_OK (i.e. after the group commit).
Several putters run concurrently so group commit batches are real.
"""

from __future__ import annotations

import asyncio
import hashlib
import sys
from pathlib import Path

from ferrymq.message import MessageInner
from ferrymq.store.config import MessageStoreConfig
from ferrymq.store.message_store import MessageStore
from ferrymq.store.results import PutMessageStatus

QUEUES = 4
PUTTERS = 4


def crash_config(root: Path) -> MessageStoreConfig:
    return MessageStoreConfig.model_validate(
        {
            "storePathRootDir": str(root),
            "mappedFileSizeCommitLog": 32 * 1024,
            "mappedFileSizeConsumeQueue": 20 * 64,
            "flushDiskType": "SYNC_FLUSH",
            "maxHashSlotNum": 64,
            "maxIndexNum": 256,
            "flushIntervalConsumeQueue": 100,
        }
    )


def body_for(run: int, seq: int) -> bytes:
    """A self-verifying body: header plus a filler derived from it (so corruption shows)."""
    head = f"{run}:{seq}:".encode()
    digest = hashlib.sha256(head).digest()
    return head + digest * (1 + seq % 23)


def parse_body(body: bytes) -> tuple[int, int] | None:
    """(run, seq) of an intact body, None when it does not verify."""
    try:
        run_s, seq_s, _ = body.split(b":", 2)
        run, seq = int(run_s), int(seq_s)
    except ValueError:
        return None
    return (run, seq) if body == body_for(run, seq) else None


async def main(root: Path, run: int) -> None:
    store = MessageStore(crash_config(root), ("127.0.0.1", 10911))
    await store.start()
    out = sys.stdout.buffer
    out.write(b"ready\n")
    out.flush()
    counter = iter(range(10**9))

    async def putter() -> None:
        while True:
            seq = next(counter)
            qid = seq % QUEUES
            r = await store.put_message(
                MessageInner.create("CRASH", qid, body_for(run, seq), {"KEYS": f"{run}-{seq}"})
            )
            if r.status is PutMessageStatus.PUT_OK and r.append_result is not None:
                a = r.append_result
                # One write() per line: a pipe never shows half of it.
                out.write(f"ack {run} {seq} {a.wrote_offset} {qid} {a.queue_offset}\n".encode())
                out.flush()

    await asyncio.gather(*(putter() for _ in range(PUTTERS)))


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), int(sys.argv[2])))
