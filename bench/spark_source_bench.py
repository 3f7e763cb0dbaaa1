"""Scan rate of the ``ferrymq-commitlog`` Spark data source vs a plain sequential read.

Writes a store of at least ``--gib`` GiB with ferrymq's own MessageStore (1 GiB CommitLog files,
as upstream; or reuses ``--store``), then, in the same run and from a warm page cache:

* baseline: a plain sequential read of the same CommitLog bytes (``readinto`` of 8 MiB chunks,
  one thread), in MB/s of CommitLog;
* the data source, ``spark.read.format("ferrymq-commitlog").load(store)`` (``local[*]``,
  ``splitSize`` partitions), three ways, each timed against the same plain read:

  - **scan** (the scan rate): ``df.write.format("noop")``, as Spark's own read benchmarks time a
    full scan: every row of every column is decoded in the Python worker, crosses into the JVM
    as Arrow and is materialised there as a row, and nothing else is done with it;
  - **count**: ``df.count()`` (the same work today: a Python data source has no column pruning);
  - **aggregate** (the figure of earlier runs, kept as a correctness check and a second,
    scan-plus-aggregation figure): count; sums / min / max of the numeric columns; distinct
    topics; total length of tags, keys and uniqKey, checked against what was written (row
    count, body bytes, total store size).

  For each, the process CPU of the JVM and of the Python workers per run is also reported, so
  the cost splits into decoding (Python) and conversion plus aggregation (JVM).
* the decoder alone: the data source's reader run in this process over every partition, one
  thread (no Spark), as MB/s and microseconds per record of process CPU: what bounds the scan.

* projected scans (noop sink), the same way, over a user schema naming some columns (the data
  source decodes and sends only those; pyspark gives Python data sources no column pruning):
  **scan_issue_columns**, the columns issue 6 lists (topic, queueId, queueOffset, physicalOffset,
  storeTimestamp, bornTimestamp, bodySize, tags, keys, reconsumeTimes, sysFlag), and
  **scan_backlog_columns**, the four the backlog job reads.
* cold page cache (``--cold-runs``): before each timed run the CommitLog files are dropped from
  the page cache (``posix_fadvise(DONTNEED)``, after ``sync``), so the plain read measures the
  disk and the scans read from it too: the case of a store larger than memory.

Each is timed ``--runs`` times (plain read, scan, count, aggregate in turn); medians are reported
with the ratio data source / baseline and the load average. Target (issue 6): scan >= 0.5.
Usage: ``.venv/bin/python bench/spark_source_bench.py [--gib 2] [--body 4096] [--store DIR]``.
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

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


def spark_cpu() -> tuple[float, float]:
    """Process CPU seconds so far of (the Spark JVM, the PySpark daemon and workers) on this
    machine (local mode: the JVM is this driver's)."""
    tick = os.sysconf("SC_CLK_TCK")
    jvm = workers = 0.0
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cmd = (proc / "cmdline").read_bytes()
            if b"org.apache.spark" not in cmd and b"pyspark" not in cmd:
                continue
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        cpu = sum(int(f) for f in fields[11:15]) / tick  # utime, stime, children's
        if cmd.startswith(b"java") or b"/java\0" in cmd or b"bin/java" in cmd:
            jvm += cpu
        elif b"pyspark.daemon" in cmd or b"pyspark.worker" in cmd or b"pyspark/daemon" in cmd:
            workers += cpu
    return jvm, workers


def timed(query: Callable[[], Any]) -> tuple[float, float, float, Any]:
    """(wall s, JVM CPU s, Python worker CPU s, result) of one query."""
    jvm0, py0 = spark_cpu()
    start = time.perf_counter()
    result = query()
    wall = time.perf_counter() - start
    jvm1, py1 = spark_cpu()
    return wall, jvm1 - jvm0, py1 - py0, result


ISSUE_COLUMNS = (
    "topic string, queueId int, queueOffset long, physicalOffset long, storeTimestamp long, "
    "bornTimestamp long, bodySize int, tags string, keys array<string>, reconsumeTimes int, "
    "sysFlag int"
)


def spark_noop(
    spark: object, store: Path, options: dict[str, str], schema: str | None = None
) -> None:
    """A full scan: every column (of ``schema``, default all) of every row materialised in the
    JVM and dropped."""
    reader = spark.read.format("ferrymq-commitlog")  # type: ignore[attr-defined]
    if schema is not None:
        reader = reader.schema(schema)
    reader.options(**options).load(str(store)).write.format("noop").mode("overwrite").save()


def evict(files: list[Path]) -> None:
    """Drop the files' pages from the page cache (clean pages only: sync first)."""
    os.sync()
    for f in files:
        fd = os.open(f, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def spark_count(spark: object, store: Path, options: dict[str, str]) -> int:
    reader = spark.read.format("ferrymq-commitlog")  # type: ignore[attr-defined]
    return int(reader.options(**options).load(str(store)).count())


def spark_scan(spark: object, store: Path, options: dict[str, str]) -> tuple[float, Any]:
    """Seconds for one aggregate that reads every column of every row, and its result row."""
    wall, _jvm, _py, row = timed(lambda: spark_aggregate(spark, store, options))
    return wall, row


def spark_aggregate(spark: object, store: Path, options: dict[str, str]) -> Any:
    """One aggregate that reads every column of every row; its result row."""
    from pyspark.sql import functions as F

    reader = spark.read.format("ferrymq-commitlog")  # type: ignore[attr-defined]
    df = reader.options(**options).load(str(store))
    return df.agg(
        F.count("*").alias("n"),
        F.sum("storeSize").alias("bytes"),
        F.sum("bodySize").alias("body_bytes"),
        F.max("storeTimestamp"),
        F.min("bornTimestamp"),
        F.max("physicalOffset"),
        F.sum(F.col("queueOffset") + F.col("queueId")),
        F.sum(F.col("reconsumeTimes") + F.col("sysFlag") + F.col("flag")),
        F.countDistinct("topic").alias("topics"),
        F.sum(F.length("tags") + F.size("keys") + F.length("uniqKey")).alias("prop_chars"),
    ).collect()[0]


def decoder_only(store: Path, options: dict[str, str]) -> tuple[float, float, int]:
    """(wall s, process CPU s, rows) of the data source's reader over every partition, here."""
    from ferrymq_spark.sources.commit_log import CommitLogReader

    reader = CommitLogReader({"path": str(store), **options})
    rows = 0
    wall, cpu = time.perf_counter(), time.process_time()
    for part in reader.partitions():
        for batch in reader.read(part):
            rows += batch.num_rows
    return time.perf_counter() - wall, time.process_time() - cpu, rows


def load() -> float:
    return os.getloadavg()[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gib", type=float, default=2.0, help="CommitLog size to generate (>= 2)")
    ap.add_argument("--body", type=int, default=1024, help="message body bytes")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=2, help="untimed scans first (JIT)")
    ap.add_argument("--dir", type=Path, default=None, help="where to write the store (temp)")
    ap.add_argument("--keep", action="store_true", help="keep the generated store")
    ap.add_argument(
        "--store", type=Path, default=None, help="reuse this store (generate it when absent; kept)"
    )
    ap.add_argument(
        "--option", action="append", default=[], help="data source option key=value (repeatable)"
    )
    ap.add_argument("--master", default=None, help="Spark master (default local[*])")
    ap.add_argument(
        "--conf",
        action="append",
        default=[],
        type=lambda kv: tuple(kv.split("=", 1)),
        help="Spark conf key=value (repeatable)",
    )
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    ap.add_argument(
        "--cold-runs", type=int, default=3, help="runs from a cold page cache (0: none)"
    )
    args = ap.parse_args()
    options = dict(o.split("=", 1) for o in args.option)
    reuse = args.store is not None and (args.store / "commitlog").is_dir()
    if args.store is not None:
        root = args.store
        root.mkdir(parents=True, exist_ok=True)
    else:
        root = Path(tempfile.mkdtemp(prefix="ferrymq-spark-bench-", dir=args.dir))
    try:
        t0 = time.perf_counter()
        if not reuse:
            asyncio.run(generate(root, int(args.gib * GIB), args.body))
        gen_s = time.perf_counter() - t0
        files = sorted((root / "commitlog").iterdir())
        with open(files[0], "rb") as fh:  # body size of the first record (the bench writes one)
            body = int.from_bytes(fh.read(88)[84:88], "big")
        plain_read(files, sum(f.stat().st_size for f in files))  # warm the page cache
        dec_wall, dec_cpu, messages = decoder_only(root, options)  # also the row count
        written, message_bytes = _extent(files)
        print(
            f"store: {messages} messages of {body} B, {written / 1e6:.0f} MB CommitLog in"
            f" {len(files)} files ({'reused' if reuse else f'{gen_s:.0f} s to generate'})"
        )
        from ferrymq_spark.session import build_session

        spark = build_session(
            "ferrymq-spark-source-bench",
            master=args.master,
            conf={"spark.ui.showConsoleProgress": "false", **dict(args.conf)},
        )
        for _ in range(args.warmup):  # JVM start and JIT, Python workers and their imports
            _, row = spark_scan(spark, root, options)
            spark_noop(spark, root, options)
        if row["n"] != messages or row["body_bytes"] != messages * body:
            raise SystemExit(f"data source read {row}; the store holds {messages} messages")
        if row["bytes"] != message_bytes:
            raise SystemExit(f"rows add up to {row['bytes']} bytes, records to {message_bytes}")
        if spark_count(spark, root, options) != messages:
            raise SystemExit("count() disagrees with the store's row count")
        plain, loads = [], []
        from ferrymq_spark.jobs.backlog import STORE_TIMES_SCHEMA

        projections = {"scan_issue": ISSUE_COLUMNS, "scan_backlog": STORE_TIMES_SCHEMA}
        views: dict[str, list[tuple[float, float, float]]] = {
            "scan": [], "count": [], "agg": [], "scan_issue": [], "scan_backlog": []
        }  # fmt: skip
        for _ in range(args.runs):
            loads.append(load())
            plain.append(plain_read(files, written))
            views["scan"].append(timed(lambda: spark_noop(spark, root, options))[:3])
            views["count"].append(timed(lambda: spark_count(spark, root, options))[:3])
            views["agg"].append(timed(lambda: spark_aggregate(spark, root, options))[:3])
            for name, ddl in projections.items():
                views[name].append(timed(lambda d=ddl: spark_noop(spark, root, options, d))[:3])
        loads.append(load())
        cold_plain: list[float] = []
        cold: dict[str, list[tuple[float, float, float]]] = {"scan": [], "scan_backlog": []}
        for _ in range(args.cold_runs):
            evict(files)
            cold_plain.append(plain_read(files, written))
            evict(files)
            cold["scan"].append(timed(lambda: spark_noop(spark, root, options))[:3])
            evict(files)
            cold["scan_backlog"].append(
                timed(lambda: spark_noop(spark, root, options, STORE_TIMES_SCHEMA))[:3]
            )
        plain_read(files, written)  # leave the cache warm, as found
        dec = [decoder_only(root, options) for _ in range(max(1, args.runs // 2))]
        dec_wall = statistics.median(d[0] for d in dec)
        dec_cpu = statistics.median(d[1] for d in dec)
        plain_mbps = written / 1e6 / statistics.median(plain)

        def view(
            runs: list[tuple[float, float, float]], baseline_mbps: float = plain_mbps
        ) -> dict[str, Any]:
            wall = statistics.median(r[0] for r in runs)
            return {
                "mb_s": round(written / 1e6 / wall, 1),
                "ratio": round(written / 1e6 / wall / baseline_mbps, 4),
                "rows_s": round(messages / wall),
                "wall_s": [round(r[0], 3) for r in runs],
                "jvm_cpu_us_per_row": round(
                    statistics.median(r[1] for r in runs) / messages * 1e6, 2
                ),
                "python_cpu_us_per_row": round(
                    statistics.median(r[2] for r in runs) / messages * 1e6, 2
                ),
            }

        scan = [r[0] for r in views["agg"]]
        scan_mbps = written / 1e6 / statistics.median(scan)
        result = {
            "messages": messages,
            "body_bytes": body,
            "commitlog_mb": round(written / 1e6, 1),
            "files": len(files),
            "cores": os.cpu_count(),
            "options": options,
            "conf": dict(args.conf),
            "baseline_plain_read_mb_s": round(plain_mbps, 1),
            "plain_s": [round(x, 3) for x in plain],
            "scan_noop_sink": view(views["scan"]),
            "count": view(views["count"]),
            "aggregate": view(views["agg"]),
            "scan_issue_columns": view(views["scan_issue"]),
            "scan_backlog_columns": view(views["scan_backlog"]),
            # the aggregate under the names of earlier runs' JSON (same definition)
            "datasource_scan_mb_s": round(scan_mbps, 1),
            "datasource_rows_s": round(messages / statistics.median(scan)),
            "ratio": round(scan_mbps / plain_mbps, 4),
            "scan_s": [round(x, 3) for x in scan],
            "decoder_only_mb_s_one_thread": round(written / 1e6 / dec_wall, 1),
            "decoder_only_cpu_us_per_record": round(dec_cpu / messages * 1e6, 2),
            "decoder_only_ratio_one_thread": round(written / 1e6 / dec_wall / plain_mbps, 4),
            "loadavg_1m": [round(x, 2) for x in loads],
            "projections": {
                "scan_issue_columns": ISSUE_COLUMNS,
                "scan_backlog_columns": STORE_TIMES_SCHEMA,
            },
            "runs": args.runs,
            "warmup_scans": args.warmup,
            "target_ratio": 0.5,
            "ratio_definitions": {
                "scan_noop_sink.ratio": "full scan (noop sink, every column of every row) / plain read: the scan rate",
                "count.ratio": "count() / plain read",
                "aggregate.ratio (= ratio)": "scan + aggregate over every column / plain read (earlier runs' figure)",
                "scan_issue_columns.ratio": "noop scan of the issue's 11 columns (user schema) / plain read",
                "scan_backlog_columns.ratio": "noop scan of the backlog job's 4 columns (user schema) / plain read",
                "cold.*.ratio": "the same from a cold page cache (files evicted before each run) / the cold plain read",
            },
        }
        if cold_plain:
            cold_mbps = written / 1e6 / statistics.median(cold_plain)
            result["cold"] = {
                "plain_read_mb_s": round(cold_mbps, 1),
                "plain_s": [round(x, 3) for x in cold_plain],
                "scan_noop_sink": view(cold["scan"], cold_mbps),
                "scan_backlog_columns": view(cold["scan_backlog"], cold_mbps),
                "runs": args.cold_runs,
            }
        print(json.dumps(result, indent=2))
        if args.json:
            args.json.write_text(json.dumps(result, indent=2))
        spark.stop()
    finally:
        if args.store is None and not args.keep:
            shutil.rmtree(root, ignore_errors=True)


def _extent(files: list[Path]) -> tuple[int, int]:
    """``(CommitLog bytes, message bytes)``: the store's extent (older files whole, blank
    end-of-file records included, as ``max_phy_offset`` counts it; the newest file up to its last
    record) and the bytes of message records alone (what the rows' storeSize adds up to)."""
    import mmap

    from ferrymq.store.record import BLANK_HEAD, MESSAGE_MAGIC_CODE, MIN_RECORD_SIZE

    extent = messages = 0
    for i, f in enumerate(files):
        with open(f, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            pos = 0
            while pos + BLANK_HEAD.size <= len(mm):
                total, magic = BLANK_HEAD.unpack_from(mm, pos)
                if magic != MESSAGE_MAGIC_CODE or total < MIN_RECORD_SIZE:
                    break
                pos += total
            messages += pos
            extent += pos if i == len(files) - 1 else len(mm)
    return extent, messages


if __name__ == "__main__":
    main()
