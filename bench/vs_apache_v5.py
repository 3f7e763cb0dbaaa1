"""RocketMQ 5.x clients through ferrymq's proxy and through Apache's, in one run (issue 30).

The same 5.x load generator (``bench/java5``: ``rocketmq-client-java`` 5.0.8, gRPC) drives three
stacks, each scenario on every stack in turn, rotating which goes first:

    ferrymq            ferrymq broker (``LocalCluster``) + ferrymq's standalone proxy
                       (``ferrymq proxy -pc rmq-proxy.json -pm cluster``)
    apache             Apache RocketMQ 5.4.0 broker + Apache's proxy (``ProxyStartup -pm cluster``)
    ferrymq_on_apache  ferrymq's proxy in front of that same Apache broker: the proxy alone
                       differs from ``apache``

Everything else is ``vs_apache.py``'s: the brokers' set-up (``async``: the same broker.conf keys
on both), the MARK start / MARK end window, CPU from /proc, the machine's load, and the results
directory ``bench/results/vs_apache_v5_<UTC stamp>/`` (``raw.jsonl``, the generator outputs,
``SUMMARY.md``). The CPU of the proxy and of the broker processes is recorded apart
(``proxy_cpu_s``, ``broker_cpu_s`` and per 1,000 messages); in ``drain`` the broker's CPU per
1,000 consumed messages is the cost of POP's bookkeeping (pop, ack, invisibility, revive).

Usage::

    .venv/bin/python bench/vs_apache_v5.py --quick            # small counts, 1 round
    .venv/bin/python bench/vs_apache_v5.py --rounds 2         # the full run
    .venv/bin/python bench/vs_apache_v5.py --only send_16t,drain_4t --stacks ferrymq,apache
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))  # bench.vs_apache
sys.path.insert(0, str(BENCH.parent / "tests"))  # proxy.conftest: the ferrymq proxy launcher

from bench.vs_apache import (  # noqa: E402
    APACHE_JVM,
    COMMON_CONF,
    GENERATOR_JVM,
    JAR,
    RESULTS,
    SETUPS,
    ApacheBroker,
    FerryBroker,
    _median,
    build_generator,
    generator_cmd,
    parser,
    record_run,
    run_generator,
    run_or_summarize,
)

JAVA5_DIR = BENCH / "java5"
JAR5 = JAVA5_DIR / "target" / "vs-bench5.jar"
SETUP = "async"  # the brokers' set-up (vs_apache.SETUPS)
WARMUP = 500  # sync sends before a window (routes, gRPC channels, JIT); --warmup
STACKS = ("ferrymq", "apache", "ferrymq_on_apache")


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    args: tuple[str, ...]
    full: tuple[int, int]  # (count, seconds)
    quick: tuple[int, int]
    fill_s: int = 0  # extra time for a backlog written before the window (drain)


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("send_1t", ("--scenario", "send", "--threads", "1"), (50_000, 20), (3_000, 6)),
    Scenario("send_16t", ("--scenario", "send", "--threads", "16"), (200_000, 20), (20_000, 6)),
    Scenario("drain_4t", ("--scenario", "drain", "--threads", "4", "--batch", "32", "--invisible-s", "30"), (100_000, 120), (5_000, 60), fill_s=900),
    Scenario("latency_100", ("--scenario", "latency", "--rate", "100"), (2_000, 20), (600, 6)),
    Scenario("latency_500", ("--scenario", "latency", "--rate", "500"), (10_000, 20), (3_000, 6)),
)  # fmt: skip


# --- the stacks ---------------------------------------------------------------------------------


@dataclass(slots=True)
class Stack:
    """A proxy in front of a broker cluster: what the generator's --endpoint reaches."""

    name: str
    namesrv: str
    endpoint: str
    proxy_pids: list[int]
    broker_pids: list[int]

    def server_pids(self) -> list[int]:
        return [*self.proxy_pids, *self.broker_pids]

    def roles(self) -> dict[str, list[int]]:
        return {"proxy": self.proxy_pids, "broker": self.broker_pids}

    def stop(self) -> None:
        """The clusters are stopped by ``stacks`` (two stacks share Apache's broker)."""


def ferrymq_proxy(run_dir: Path, namesrv: str, stack: contextlib.ExitStack) -> tuple[int, int]:
    """ferrymq's standalone proxy (the tests' launcher) until ``stack`` closes: (pid, port)."""
    from tests.proxy.conftest import FerrymqProxy, start_ferrymq_proxy

    # a generator (the tests drive it with next() and close()), though typed as an Iterator
    gen = cast(
        Generator[FerrymqProxy, None, None],
        start_ferrymq_proxy(run_dir, namesrv, rocketMQClusterName="VsBench"),
    )
    proxy = next(gen)
    stack.callback(gen.close)
    proc = proxy.proc
    assert isinstance(proc, subprocess.Popen)
    return proc.pid, proxy.port


@contextlib.contextmanager
def stacks(names: list[str], workdir: Path) -> Iterator[dict[str, Stack]]:
    """The chosen stacks, started once for the run: a ferrymq cluster with its proxy, and one
    Apache cluster with Apache's proxy and ferrymq's side by side."""
    started: dict[str, Stack] = {}
    with contextlib.ExitStack() as stack:
        if "ferrymq" in names:
            ferry = FerryBroker(workdir / "ferrymq", SETUP)
            stack.callback(ferry.stop)
            pid, port = ferrymq_proxy(workdir / "ferrymq" / "proxy", ferry.namesrv, stack)
            started["ferrymq"] = Stack(
                "ferrymq", ferry.namesrv, f"127.0.0.1:{port}", [pid], ferry.server_pids()
            )
        if {"apache", "ferrymq_on_apache"} & set(names):
            apache = ApacheBroker(workdir / "apache", SETUP)
            stack.callback(apache.stop)
            brokers = apache.server_pids()
            if "apache" in names:
                proc, _, grpc = apache.cluster.start_proxy()
                started["apache"] = Stack(
                    "apache", apache.namesrv, f"127.0.0.1:{grpc}", [proc.pid], brokers
                )
            if "ferrymq_on_apache" in names:
                run_dir = apache.cluster.data_dir / "ferrymq-proxy"
                pid, port = ferrymq_proxy(run_dir, apache.namesrv, stack)
                started["ferrymq_on_apache"] = Stack(
                    "ferrymq_on_apache", apache.namesrv, f"127.0.0.1:{port}", [pid], brokers
                )
        yield {n: started[n] for n in names}


# --- one run ------------------------------------------------------------------------------------


def create_topic(stack: Stack, topic: str, out_dir: Path, tag: str) -> None:
    """The topic (8 queues, no message.type: NORMAL) on every master, routed at the NameServer,
    by the 4.x generator's ``create-topic``: 5.x clients cannot create topics."""
    run_generator(
        stack,
        ["--scenario", "create-topic", "--topic", topic, "--queues", "8"],
        out_dir / f"{tag}.topic.out",
        300,
    )


def run_scenario(
    stack: Stack, s: Scenario, quick: bool, round_no: int, out_dir: Path, workdir: Path
) -> dict[str, Any]:
    topic = f"VsBench5_{s.name}_{stack.name}_{round_no}"
    tag = f"{stack.name}_{s.name}_{round_no}"
    create_topic(stack, topic, out_dir, tag)
    count, seconds = s.quick if quick else s.full
    # the 5.x client logs under ~/logs/rocketmq: into the run's scratch directory instead
    jvm = (*GENERATOR_JVM, f"-Duser.home={workdir}")
    cmd = [*generator_cmd(JAR5, "io.ferrymq.bench.VsBench5", jvm), "--endpoint", stack.endpoint]
    args = [*s.args, "--topic", topic, "--count", str(count), "--seconds", str(seconds),
            "--warmup", str(WARMUP)]  # fmt: skip
    return run_generator(
        stack,
        args,
        out_dir / f"{tag}.out",
        seconds + s.fill_s + 300,
        cmd=cmd,
        roles=stack.roles(),
    )


def rotation(names: list[str], shift: int) -> list[str]:
    """``names`` rotated left by ``shift``: every stack goes first in turn."""
    k = shift % len(names)
    return [*names[k:], *names[:k]]


def run_all(args: argparse.Namespace) -> Path:
    build_generator()  # the 4.x generator creates the topics
    build_generator(JAVA5_DIR, JAR5)
    stamp = datetime.now(UTC).strftime("%Y%m%d_%H%M")
    out_dir = Path(args.out) if args.out else RESULTS / f"vs_apache_v5_{stamp}"
    out_dir.mkdir(parents=True, exist_ok=True)
    chosen = [s for s in SCENARIOS if not args.only or s.name in args.only.split(",")]
    names = args.stacks.split(",")
    unknown = set(names) - set(STACKS)
    if unknown:
        raise SystemExit(f"unknown stacks {sorted(unknown)}; choose from {', '.join(STACKS)}")
    raw = out_dir / "raw.jsonl"
    workroot = Path(tempfile.mkdtemp(prefix="vs_apache_v5_", dir=args.workdir))
    try:
        for round_no in range(1, args.rounds + 1):
            with stacks(names, workroot / f"r{round_no}") as running:
                for index, s in enumerate(chosen):
                    for name in rotation(names, index + round_no - 1):
                        run = functools.partial(
                            run_scenario, running[name], s, args.quick, round_no, out_dir, workroot
                        )
                        labels = {"stack": name, "case": s.name, "round": round_no}
                        record_run(
                            raw, run, {**labels, "broker": name, "setup": SETUP}, summary_line
                        )
    finally:
        shutil.rmtree(workroot, ignore_errors=True)
    (out_dir / "SUMMARY.md").write_text(summarize(raw, args))
    return out_dir


# --- the summary --------------------------------------------------------------------------------


def summary_line(r: dict[str, Any]) -> str:
    return (
        f"{r['case']:<12} r{r['round']} {r['stack']:<18} {r.get('msgs_per_s', 0):>9,.0f} msg/s  "
        f"proxy {r.get('proxy_cpu_s_per_1k_msg', 0):6.3f} broker "
        f"{r.get('broker_cpu_s_per_1k_msg', 0):6.3f} CPU s/1k msg  "
        f"load {r.get('load_start', 0):.1f}  failed {r.get('failed_requests', 0)}"
        + (f"  ERROR {r['error'][:120]}" if "error" in r else "")
    )


def latency_text(rows: list[dict[str, Any]]) -> str:
    """p50/p99/p99.9/max in ms of each run: end to end, else the request's."""
    parts = []
    for r in rows:
        lat = r.get("e2e_latency_us") or r.get("request_latency_us") or {}
        if lat.get("count"):
            parts.append("/".join(f"{lat[k] / 1000:.1f}" for k in ("p50", "p99", "p999", "max")))
    return "; ".join(parts) or "-"


@dataclass(slots=True)
class Cell:
    """The medians of one (scenario, stack) over the rounds."""

    rows: list[dict[str, Any]] = field(default_factory=list)

    def median(self, key: str) -> float:
        return _median(self.rows, key)


def summarize(raw: Path, args: argparse.Namespace) -> str:
    rows = [json.loads(line) for line in raw.read_text().splitlines() if line.strip()]
    names = [n for n in STACKS if any(r["stack"] == n for r in rows)]
    loads = [r["load_start"] for r in rows if "load_start" in r]
    busy = [r["machine_busy_pct"] for r in rows if "machine_busy_pct" in r]
    lines = [
        f"# RocketMQ 5.x clients: ferrymq's proxy vs Apache's, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
        "",
        f"`bench/vs_apache_v5.py {' '.join(sys.argv[1:])}`; rounds: {args.rounds}; machine: "
        f"{os.cpu_count()} CPUs; load average at the windows' starts "
        f"{min(loads, default=0):.1f}-{max(loads, default=0):.1f}, machine busy "
        f"{min(busy, default=0):.0f}-{max(busy, default=0):.0f}% (shared machine: compare "
        "ratios of the same run, not absolute figures). Medians over rounds; every run in "
        "raw.jsonl. Stacks: `ferrymq` = ferrymq broker + ferrymq proxy; `apache` = Apache "
        "broker + Apache proxy; `ferrymq_on_apache` = ferrymq proxy over the same Apache broker.",
        "",
        "| scenario | stack | msg/s | / apache | proxy CPU s per 1k msg | broker CPU s per 1k msg "
        "| latency ms p50/p99/p99.9/max | load avg at start | failed | error |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in SCENARIOS:
        cells = {
            n: Cell([r for r in rows if r["case"] == s.name and r["stack"] == n]) for n in names
        }
        if not any(c.rows for c in cells.values()):
            continue
        base = cells["apache"].median("msgs_per_s") if "apache" in cells else float("nan")
        for n, c in cells.items():
            rate = c.median("msgs_per_s")
            ratio = f"{rate / base:.2f}x" if base == base and base and rate == rate else "-"
            errors = "; ".join(str(r["error"])[:80] for r in c.rows if "error" in r) or ""
            lines.append(
                f"| {s.name} | {n} | {rate:,.0f} | {ratio} "
                f"| {c.median('proxy_cpu_s_per_1k_msg'):.3f} "
                f"| {c.median('broker_cpu_s_per_1k_msg'):.3f} | {latency_text(c.rows)} "
                f"| {c.median('load_start'):.1f} | {c.median('failed_requests'):.0f} | {errors} |"
            )
    lines += [
        "",
        "`drain_4t`: the broker's CPU per 1,000 consumed messages is POP's bookkeeping cost "
        "(pop, ack, invisibility, revive). CPU is utime+stime from /proc between the "
        "generator's MARK lines; the NameServers are not counted. `latency_*`: msg/s is the "
        "send rate achieved (below the target when the generator fell behind its schedule; "
        "the latency, from the scheduled time, then includes that lag); failed = requests that "
        "failed (the first error of each run is in raw.jsonl, `first_error`).",
        "",
        "## Configurations",
        "",
        "| | value |",
        "|---|---|",
        f"| brokers | set-up `{SETUP}`: {SETUPS[SETUP]}, {COMMON_CONF} |",
        f"| Apache broker and proxy JVMs | {' '.join(APACHE_JVM)} |",
        "| ferrymq | `LocalCluster` (one broker process) + `ferrymq proxy -pc rmq-proxy.json "
        "-pm cluster` (one process) |",
        "| Apache proxy | `ProxyStartup -pc rmq-proxy.json -pm cluster` (tests/interop launcher) |",
        f"| generator | `rocketmq-client-java` 5.0.8 (bench/java5), JVM {' '.join(GENERATOR_JVM)}; "
        f"topics by the 4.x generator ({JAR.name}) |",
        "| running together | the Apache cluster carries both proxies during every run on it |",
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    global WARMUP
    p = parser(__doc__, WARMUP)
    p.add_argument(
        "--stacks", default=",".join(STACKS), help="comma-separated, of " + ", ".join(STACKS)
    )
    args = p.parse_args()
    WARMUP = args.warmup
    return run_or_summarize(args, run_all, summarize)


if __name__ == "__main__":
    sys.exit(main())
