"""Scan rate of the ``ferrymq-commitlog`` Spark data source vs a plain sequential read.

Writes a store of at least ``--gib`` GiB with ferrymq's own MessageStore (1 GiB CommitLog files,
as upstream), then, in the same run and from a warm page cache:

* baseline: a plain sequential read of the same CommitLog bytes (``readinto`` of 8 MiB chunks,
  one thread), in MB/s of CommitLog;
* the data source: ``spark.read.format("ferrymq-commitlog").load(store)`` aggregated so every
  row is produced and crosses into the JVM (``local[*]``, one partition per file), in MB/s of
  the same CommitLog bytes.

Each is timed ``--runs`` times; the median is reported with the ratio data source / baseline.
Target: >= 0.5. Usage: ``.venv/bin/python bench/spark_source_bench.py [--gib 2] [--body 1024]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from ferrymq.message import MessageInner
from ferrymq.store.config import MessageStoreConfig
from ferrymq.store.message_store import MessageStore

GIB = 1024**3
CHUNK = 8 * 1024 * 1024


async def generate(root: Path, total_bytes: int, body: int) -> tuple[int, int]:
    """Put messages until the CommitLog holds ``total_bytes``; returns (messages, bytes)."""
    config = MessageStoreConfig.model_validate(
        {"storePathRootDir": str(root), "mappedFileSizeCommitLog": GIB, "messageIndexEnable": False}
    )
    store = MessageStore(config, ("127.0.0.1", 10911))
    await store.start()
    n = 0
    payload = os.urandom(body)
    try:
        while store.max_phy_offset < total_bytes:
            for _ in range(1000):
                props = {"TAGS": f"tag{n % 8}", "KEYS": f"order-{n}", "UNIQ_KEY": f"{n:016X}"}
                msg = MessageInner.create(
                    f"BenchTopic{n % 4}",
                    n % 8,
                    payload,
                    props,
                    born_timestamp=int(time.time() * 1000),
                    born_host=("127.0.0.1", 40000),
                )
                res = await store.put_message(msg)
                if not res.is_ok:
                    raise RuntimeError(f"put failed: {res.status} {res.remark}")
                n += 1
        written = store.max_phy_offset - store.min_phy_offset
    finally:
        await store.shutdown()
    return n, written


def plain_read(files: list[Path], limit: int) -> float:
    """Seconds to read the first ``limit`` CommitLog bytes sequentially."""
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    left = limit
    start = time.perf_counter()
    for f in files:
        with open(f, "rb", buffering=0) as fh:
            while left > 0:
                got = fh.readinto(view[: min(CHUNK, left)])
                if not got:
                    break
                left -= got
        if left <= 0:
            break
    return time.perf_counter() - start


def spark_scan(spark: object, store: Path) -> tuple[float, int]:
    from pyspark.sql import functions as F

    df = spark.read.format("ferrymq-commitlog").load(str(store))  # type: ignore[attr-defined]
    start = time.perf_counter()
    row = df.agg(
        F.count("*").alias("n"),
        F.sum("storeSize").alias("bytes"),
        F.max("storeTimestamp"),
        F.countDistinct("topic"),
        F.sum(F.length("tags") + F.size("keys")),
    ).collect()[0]
    return time.perf_counter() - start, int(row["n"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gib", type=float, default=2.0, help="CommitLog size to generate (>= 2)")
    ap.add_argument("--body", type=int, default=1024, help="message body bytes")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--dir", type=Path, default=None, help="where to write the store (temp)")
    ap.add_argument("--keep", action="store_true", help="keep the generated store")
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="ferrymq-spark-bench-", dir=args.dir))
    try:
        t0 = time.perf_counter()
        messages, written = asyncio.run(generate(root, int(args.gib * GIB), args.body))
        gen_s = time.perf_counter() - t0
        files = sorted((root / "commitlog").iterdir())
        print(
            f"store: {messages} messages, {written / 1e6:.0f} MB CommitLog in {len(files)} files"
            f" ({gen_s:.0f} s to generate)"
        )
        plain_read(files, written)  # warm the page cache for both sides
        from ferrymq_spark.session import build_session

        spark = build_session("ferrymq-spark-source-bench")
        _, count = spark_scan(spark, root)  # warm-up: JVM, Python workers
        if count != messages:
            raise SystemExit(f"data source read {count} rows, the store holds {messages}")
        plain, scan = [], []
        for _ in range(args.runs):
            plain.append(plain_read(files, written))
            scan.append(spark_scan(spark, root)[0])
        plain_mbps = written / 1e6 / statistics.median(plain)
        scan_mbps = written / 1e6 / statistics.median(scan)
        result = {
            "messages": messages,
            "body_bytes": args.body,
            "commitlog_mb": round(written / 1e6, 1),
            "files": len(files),
            "cores": os.cpu_count(),
            "baseline_plain_read_mb_s": round(plain_mbps, 1),
            "datasource_scan_mb_s": round(scan_mbps, 1),
            "datasource_rows_s": round(messages / statistics.median(scan)),
            "ratio": round(scan_mbps / plain_mbps, 4),
            "runs": args.runs,
            "target_ratio": 0.5,
        }
        print(json.dumps(result, indent=2))
        if args.json:
            args.json.write_text(json.dumps(result, indent=2))
        spark.stop()
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
