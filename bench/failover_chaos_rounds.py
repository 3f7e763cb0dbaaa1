"""The chaos test's failover loop for any number of rounds, outside pytest (for runs longer than
the default test's 5 rounds, shorter than the slow variant's 100): NameServer + controller + 3
replicas (allAckInSyncStateSet, SYNC_FLUSH), a producer and a PushConsumer running, the master
SIGKILLed at a random moment each round, every check of
``tests/controller/test_failover_chaos.py::run_failovers`` after each round and at the end.

Prints the rounds passed, the write outage p50/max, and where the data dir (logs of every
process incarnation, ``processes.txt``) is; a failure prints the processes and raises.

Usage: ``nice -n 5 python bench/failover_chaos_rounds.py --rounds 40 --seed 100 [--keep]``
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from controller.failover_helpers import failover_cluster, outage_summary
from controller.test_failover_chaos import run_failovers


async def main(rounds: int, seed: int, data_dir: Path) -> None:
    started = time.monotonic()
    with failover_cluster(data_dir / "cluster") as cluster:
        outages = await run_failovers(cluster, rounds=rounds, seed=seed, consume=True)
    print(
        f"{len(outages)} rounds passed (seed {seed}) in {time.monotonic() - started:.0f} s: "
        f"{outage_summary(outages)}"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--seed", type=int, default=100)
    parser.add_argument("--keep", action="store_true", help="keep the data dir even on success")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="ferrymq-chaos-"))
    print(f"data dir {root}", flush=True)
    ok = False
    try:
        asyncio.run(main(args.rounds, args.seed, root))
        ok = True
    finally:
        if ok and not args.keep:
            shutil.rmtree(root, ignore_errors=True)
