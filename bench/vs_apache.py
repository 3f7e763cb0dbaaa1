"""ferrymq against Apache RocketMQ, driven by the same Java load generator (``bench/java``).

One command runs every scenario on both brokers, alternating which goes first (round 1: ferrymq
first on even scenarios, round 2 reversed), each broker in its own cluster started with the
equivalent configuration (``CONFIGS`` below, printed side by side in the note), and writes to
``bench/results/vs_apache_<UTC date and time>/``:

    raw.jsonl      one record per (round, scenario, broker): the generator's RESULT line, the
                   servers' CPU over the measured window (utime+stime from /proc/PID/stat,
                   between the generator's "MARK start" and "MARK end" lines), the machine's
                   load average and busy share over that window
    <broker>_<scenario>_<round>.out   the generator's output
    SUMMARY.md     the table: msg/s per broker, ferrymq / RocketMQ ratio, server CPU (% of a
                   core and microseconds per message), load

Usage::

    .venv/bin/python bench/vs_apache.py --quick              # small counts, 1 round (~15 min)
    .venv/bin/python bench/vs_apache.py --rounds 2           # the full run
    .venv/bin/python bench/vs_apache.py --only sync_64t,async_w1000 --rounds 2

Performance claims are ratios of the same run on the same machine; absolute figures move with
the machine's load, which is why each record carries it.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # bench.* and tests.interop.* (the Apache launcher)

from ferrymq.broker.local_cluster import LocalCluster  # noqa: E402

JAVA_DIR = Path(__file__).resolve().parent / "java"
JAR = JAVA_DIR / "target" / "vs-bench.jar"
RESULTS = Path(__file__).resolve().parent / "results"
COMMITLOG_FILE_SIZE = 128 * 1024 * 1024
CLK_TCK = os.sysconf("SC_CLK_TCK")

# --- broker set-ups: the same keys for both brokers (upstream names) -------------------------

SETUPS: dict[str, dict[str, str]] = {
    "async": {"flushDiskType": "ASYNC_FLUSH", "brokerRole": "ASYNC_MASTER"},
    # 10,000 queues: ConsumeQueue files of 30,000 entries (600 KB): ferrymq reserves every
    # store file's blocks up front, and 10,000 of upstream's 6 MB files would not fit the disk
    "q10k": {
        "flushDiskType": "ASYNC_FLUSH",
        "brokerRole": "ASYNC_MASTER",
        "mappedFileSizeConsumeQueue": str(30_000 * 20),
    },
    "syncflush": {"flushDiskType": "SYNC_FLUSH", "brokerRole": "ASYNC_MASTER"},
    "syncmaster": {"flushDiskType": "ASYNC_FLUSH", "brokerRole": "SYNC_MASTER"},
}
SLAVES = {"async": 0, "q10k": 0, "syncflush": 0, "syncmaster": 1}
COMMON_CONF = {
    "mappedFileSizeCommitLog": str(COMMITLOG_FILE_SIZE),
    # upstream's defaults, spelled out: the Apache launcher's own are small, for tests
    "mappedFileSizeConsumeQueue": str(300_000 * 20),
    "maxIndexNum": "20000000",
    "maxHashSlotNum": "5000000",
    "autoCreateTopicEnable": "true",
    "brokerIP1": "127.0.0.1",
}
# Apache's JVM: what the baseline used (1 GiB heap), with RocketMQ's own collector
APACHE_JVM = (
    "-Xms1g",
    "-Xmx1g",
    "-XX:+UseG1GC",
    "-XX:MaxDirectMemorySize=1g",
    "-Djava.net.preferIPv4Stack=true",
)
GENERATOR_JVM = ("-Xms512m", "-Xmx1g", "-XX:+UseG1GC")


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    setup: str
    args: tuple[str, ...]
    full: tuple[int, int]  # (count, seconds)
    quick: tuple[int, int]
    queues: int = 8
    fill: tuple[int, int] = (0, 0)  # backlog to write first (full, quick), for drain


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("sync_1t", "async", ("--scenario", "sync", "--threads", "1"), (100_000, 20), (10_000, 6)),
    Scenario("sync_8t", "async", ("--scenario", "sync", "--threads", "8"), (300_000, 20), (30_000, 6)),
    Scenario("sync_64t", "async", ("--scenario", "sync", "--threads", "64"), (500_000, 20), (60_000, 6)),
    Scenario("sync_256t", "async", ("--scenario", "sync", "--threads", "256"), (500_000, 20), (60_000, 6)),
    Scenario("async_w1000", "async", ("--scenario", "async", "--window", "1000"), (1_000_000, 20), (100_000, 6)),
    Scenario("oneway_8t", "async", ("--scenario", "oneway", "--threads", "8"), (1_000_000, 15), (100_000, 5)),
    Scenario("batch32_8t", "async", ("--scenario", "batch", "--batch", "32", "--threads", "8"), (3_000_000, 20), (300_000, 6)),
    Scenario("sync_64t_16k", "async", ("--scenario", "sync", "--threads", "64", "--size", "16384"), (300_000, 20), (30_000, 6)),
    Scenario("batch32_8t_16k", "async", ("--scenario", "batch", "--batch", "32", "--threads", "8", "--size", "16384"), (500_000, 20), (60_000, 6)),
    Scenario("drain", "async", ("--scenario", "drain",), (1_000_000, 120), (100_000, 60), fill=(1_000_000, 100_000)),
    Scenario("latency_2k", "async", ("--scenario", "latency", "--rate", "2000"), (40_000, 20), (16_000, 8)),
    Scenario("latency_20k", "async", ("--scenario", "latency", "--rate", "20000"), (400_000, 20), (160_000, 8)),
    Scenario("queues10k_sync_64t", "q10k", ("--scenario", "sync", "--threads", "64"), (500_000, 20), (60_000, 6), queues=10_000),
    Scenario("conn1000", "async", ("--scenario", "connections", "--connections", "1000"), (500_000, 20), (60_000, 6)),
    Scenario("syncflush_sync_64t", "syncflush", ("--scenario", "sync", "--threads", "64"), (300_000, 20), (30_000, 6)),
    Scenario("syncmaster_sync_64t", "syncmaster", ("--scenario", "sync", "--threads", "64"), (300_000, 20), (30_000, 6)),
)  # fmt: skip


# --- the two brokers ----------------------------------------------------------------------------


class Broker(Protocol):
    name: str

    @property
    def namesrv(self) -> str: ...

    def server_pids(self) -> list[int]:
        """The broker processes (master and slave), whose CPU is the server's."""
        ...

    def stop(self) -> None: ...


@contextlib.contextmanager
def python_path(tree: Path | None) -> Iterator[None]:
    """Children started inside see ``tree``'s ferrymq before the installed one (A/B runs)."""
    if tree is None:
        yield
        return
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = str(tree / "broker_image")
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old


def checkout(rev: str, into: Path) -> Path:
    """The broker_image/ of commit ``rev`` (``git archive``), for an A/B against it."""
    into.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", rev, "broker_image"], capture_output=True, check=True
    )
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into


class ClusterBroker:
    """A started cluster: ferrymq's LocalCluster or the launcher's ApacheCluster, which name
    these members the same way."""

    name: str
    cluster: Any

    @property
    def namesrv(self) -> str:
        return str(self.cluster.namesrv_addr)

    def server_pids(self) -> list[int]:
        return [b.pid for b in self.cluster.brokers]

    def stop(self) -> None:
        self.cluster.stop()


class FerryBroker(ClusterBroker):
    """``ferrymq local-cluster``'s own LocalCluster: one group, a slave for SYNC_MASTER. Named
    ``ferrymq@REV`` it runs commit REV's code (an A/B in the same run)."""

    def __init__(self, workdir: Path, setup: str, name: str = "ferrymq") -> None:
        self.name = name
        _, _, rev = name.partition("@")
        tree = checkout(rev, workdir / "code") if rev else None
        conf = {**COMMON_CONF, **SETUPS[setup]}
        self.cluster = LocalCluster(
            workdir,
            groups=1,
            slaves=SLAVES[setup],
            cluster_name="VsBench",
            namesrv_port=0,
            broker_port=0,
            flush_disk_type=conf.pop("flushDiskType"),
            mapped_file_size_commit_log=int(conf.pop("mappedFileSizeCommitLog")),
            extra_conf=conf,
        )
        with python_path(tree):
            self.cluster.start()


class ApacheBroker(ClusterBroker):
    """Apache RocketMQ 5.4.0 from the interop launcher (tests/interop/reference): the same
    broker.conf keys; the master's role is given to the master only (a slave is SLAVE)."""

    name = "apache"

    def __init__(self, workdir: Path, setup: str) -> None:
        from tests.interop.reference.apache import ApacheCluster
        from tests.interop.reference.tools import resolve_classpath

        conf: dict[str, object] = {**COMMON_CONF, **SETUPS[setup]}
        role = conf.pop("brokerRole")
        workdir.mkdir(parents=True, exist_ok=True)
        self.cluster = ApacheCluster(
            workdir.resolve(),
            cluster_name="VsBench",
            broker_conf=conf,
            jvm_opts=APACHE_JVM,
            classpath=resolve_classpath(),
        )
        try:
            self.cluster.start_namesrv()
            self.cluster.start_broker("broker-a", 0, brokerRole=role)
            for n in range(1, SLAVES[setup] + 1):
                self.cluster.start_broker("broker-a", n)
        except BaseException:
            self.cluster.stop()
            raise


def start_broker(name: str, workdir: Path, setup: str) -> Broker:
    if name.startswith("ferrymq"):
        return FerryBroker(workdir, setup, name)
    return ApacheBroker(workdir, setup)


# --- measuring ----------------------------------------------------------------------------------


def cpu_ticks(pid: int) -> int:
    """utime + stime of a process, all threads, in clock ticks (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0
    return int(fields[11]) + int(fields[12])


def machine_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine, from /proc/stat."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + values[4]
    return sum(values) - idle, sum(values)


@dataclass(slots=True)
class Window:
    """CPU and load between the generator's MARK start and MARK end."""

    pids: list[int]
    generator: int
    # server processes by role (e.g. "proxy", "broker"): each role's CPU is recorded apart too
    roles: dict[str, list[int]] = field(default_factory=dict)
    t0: float = 0.0
    cpu0: dict[int, int] = field(default_factory=dict)
    machine0: tuple[int, int] = (0, 0)
    result: dict[str, Any] = field(default_factory=dict)

    def start(self) -> None:
        self.t0 = time.monotonic()
        watched = {*self.pids, self.generator, *(p for ps in self.roles.values() for p in ps)}
        self.cpu0 = {p: cpu_ticks(p) for p in watched}
        self.machine0 = machine_ticks()
        self.result["load_start"] = os.getloadavg()[0]

    def end(self) -> None:
        wall = time.monotonic() - self.t0
        cpu = {p: (cpu_ticks(p) - c) / CLK_TCK for p, c in self.cpu0.items()}
        busy, total = machine_ticks()
        server = sum(cpu[p] for p in self.pids)
        self.result.update(
            wall_s=wall,
            server_cpu_s=server,
            server_cpu_pct=100 * server / wall,
            generator_cpu_pct=100 * cpu[self.generator] / wall,
            machine_busy_pct=100 * (busy - self.machine0[0]) / max(1, total - self.machine0[1]),
            load_end=os.getloadavg()[0],
        )
        for role, pids in self.roles.items():
            self.result[f"{role}_cpu_s"] = sum(cpu[p] for p in pids)


def start_profiler(pid: int, out: Path) -> subprocess.Popen[bytes]:
    """py-spy on a ferrymq broker until SIGINT: collapsed stacks with idle frames (where the
    event loop waits in epoll shows up as such), for ``--profile``."""
    py_spy = Path(sys.executable).with_name("py-spy")
    cmd = [str(py_spy), "record", "-p", str(pid), "-r", "250", "--idle", "--nonblocking"]
    cmd += ["-f", "raw", "-o", str(out)]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def stop_profiler(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def ensure_strace() -> str:
    """strace for ``--strace`` (Debian package), installed when missing."""
    found = shutil.which("strace")
    if found:
        return found
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(["apt-get", "update", "-qq"], env=env, check=True)
    subprocess.run(["apt-get", "install", "-y", "-qq", "strace"], env=env, check=True)
    return shutil.which("strace") or "strace"


def start_strace(pid: int, out: Path) -> subprocess.Popen[bytes]:
    """Counts of the system calls of every thread of ``pid`` until SIGINT (``strace -c``)."""
    cmd = [ensure_strace(), "-c", "-f", "-p", str(pid), "-o", str(out)]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def syscall_counts(path: Path) -> dict[str, int]:
    """syscall -> calls, from a ``strace -c`` table."""
    counts: dict[str, int] = {}
    with contextlib.suppress(OSError):
        for line in path.read_text().splitlines():
            cols = line.split()
            if len(cols) >= 5 and cols[0][0].isdigit() and cols[-1] != "total":
                calls = cols[3]
                if calls.isdigit():
                    counts[cols[-1]] = int(calls)
    return counts


def generator_cmd(jar: Path, main: str, jvm: tuple[str, ...] = GENERATOR_JVM) -> list[str]:
    """``java`` with a generator's jar and its ``lib/`` (``mvn package``'s output)."""
    return ["java", *jvm, "-cp", f"{jar}:{jar.parent / 'lib'}/*", main]


def run_generator(
    broker: Broker,
    args: list[str],
    out_path: Path,
    timeout: float,
    profile: bool = False,
    trace: bool = False,
    *,
    cmd: list[str] | None = None,
    roles: dict[str, list[int]] | None = None,
) -> dict[str, Any]:
    """Run the generator once; its RESULT merged with the servers' CPU over its window (and,
    with ``profile``, py-spy's stacks of each ferrymq broker process beside ``out_path``).
    ``cmd``: another generator's command (the 5.x one) instead of the 4.x one at
    ``--namesrv``; ``roles``: server processes whose CPU is also recorded by role."""
    if cmd is None:
        cmd = [*generator_cmd(JAR, "io.ferrymq.bench.VsBench"), "--namesrv", broker.namesrv]
    cmd = [*cmd, *args]
    with open(out_path, "w") as out:
        out.write(" ".join(cmd) + "\n")
        out.flush()
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=out, stdin=subprocess.DEVNULL, text=True
        )
        window = Window(broker.server_pids(), proc.pid, dict(roles or {}))
        deadline = time.monotonic() + timeout
        result: dict[str, Any] = {}
        profilers: list[subprocess.Popen[bytes]] = []
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                out.write(line)
                if line.startswith("MARK start"):
                    if profile and broker.name.startswith("ferrymq"):
                        profilers = [
                            start_profiler(pid, out_path.with_suffix(f".{pid}.pyspy.txt"))
                            for pid in window.pids
                        ]
                    if trace:
                        profilers += [
                            start_strace(pid, out_path.with_suffix(f".{pid}.strace.txt"))
                            for pid in window.pids
                        ]
                    window.start()
                elif line.startswith("MARK end"):
                    window.end()
                    for prof in profilers:
                        stop_profiler(prof)
                    profilers = []
                elif line.startswith("RESULT "):
                    result = json.loads(line[len("RESULT ") :])
                if time.monotonic() > deadline:
                    break
        finally:
            for prof in profilers:
                stop_profiler(prof)
            if proc.poll() is None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=max(1.0, deadline - time.monotonic()))
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    if not result:
        raise RuntimeError(
            f"the generator printed no RESULT (exit {proc.returncode}); see {out_path}"
        )
    result.update(window.result)
    msgs = result.get("messages") or 0
    if msgs and "server_cpu_s" in result:
        result["server_cpu_us_per_msg"] = 1e6 * result["server_cpu_s"] / msgs
        for role in roles or {}:
            result[f"{role}_cpu_s_per_1k_msg"] = 1e3 * result[f"{role}_cpu_s"] / msgs
    if trace and msgs:
        counts: dict[str, int] = {}
        for pid in window.pids:
            for name, calls in syscall_counts(out_path.with_suffix(f".{pid}.strace.txt")).items():
                counts[name] = counts.get(name, 0) + calls
        result["syscalls_per_msg"] = {k: round(v / msgs, 3) for k, v in sorted(counts.items())}
    return result


WARMUP = 2_000  # requests before the measured window (routes, connections, JIT); --warmup


def scenario_args(s: Scenario, quick: bool, topic: str) -> list[str]:
    count, seconds = s.quick if quick else s.full
    return [*s.args, "--topic", topic, "--count", str(count), "--seconds", str(seconds),
            "--warmup", str(WARMUP)]  # fmt: skip


def run_scenario(
    broker: Broker,
    s: Scenario,
    quick: bool,
    round_no: int,
    out_dir: Path,
    profile: bool = False,
    trace: bool = False,
) -> dict[str, Any]:
    topic = f"VsBench_{s.name}_{round_no}"
    tag = f"{broker.name}_{s.name}_{round_no}"
    create = ["--create-queues", str(s.queues)]  # the generator creates the topic first
    fill = s.fill[1] if quick else s.fill[0]
    if fill:
        run_generator(
            broker,
            ["--scenario", "fill", "--topic", topic, "--count", str(fill), "--seconds", "300",
             "--batch", "32", "--threads", "8", "--warmup", "0", *create],
            out_dir / f"{tag}.fill.out",
            600,
        )  # fmt: skip
        create = []
    seconds = (s.quick if quick else s.full)[1]
    args = [*scenario_args(s, quick, topic), *create]
    record = run_generator(broker, args, out_dir / f"{tag}.out", seconds + 300, profile, trace)
    record.update(broker=broker.name, case=s.name, round=round_no, setup=s.setup)
    return record


# --- the run ------------------------------------------------------------------------------------


def build_generator(module: Path = JAVA_DIR, jar: Path = JAR) -> None:
    """``mvn package`` of a generator module (bench/java, bench/java5) when its jar is missing or
    older than its sources, the shared ones (bench/java/src/shared) or the poms (Maven Central)."""
    shared = JAVA_DIR / "src" / "shared"
    sources = [*module.rglob("*.java"), *shared.rglob("*.java"), module / "pom.xml"]
    sources.append(module.parent / "pom.xml")  # the parent: plugins, HdrHistogram
    if jar.exists() and all(p.stat().st_mtime <= jar.stat().st_mtime for p in sources):
        return
    from tests.interop.reference.tools import ensure_java_tools

    ensure_java_tools()
    subprocess.run(["mvn", "-q", "-B", "-DskipTests", "package"], cwd=module, check=True)
    jar.touch()  # maven leaves an up-to-date jar as it was: newer than its sources from now on


def pin(pid: int, cpus: set[int]) -> None:
    """Every thread of ``pid`` on ``cpus`` (``taskset -a``); threads made later inherit it."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            os.sched_setaffinity(int(task.name), cpus)


@contextlib.contextmanager
def brokers(
    names: list[str], setup: str, workdir: Path, cpus: set[int] | None = None
) -> Iterator[dict[str, Broker]]:
    started: dict[str, Broker] = {}
    try:
        for name in names:
            started[name] = start_broker(name, workdir / f"{name}-{setup}", setup)
            for pid in started[name].server_pids() if cpus else ():
                pin(pid, cpus or set())
        yield started
    finally:
        for b in started.values():
            b.stop()


def run_all(args: argparse.Namespace) -> Path:
    build_generator()
    stamp = datetime.now(UTC).strftime("%Y%m%d_%H%M")
    out_dir = Path(args.out) if args.out else RESULTS / f"vs_apache_{stamp}"
    out_dir.mkdir(parents=True, exist_ok=True)
    chosen = [s for s in SCENARIOS if not args.only or s.name in args.only.split(",")]
    sides = args.brokers.split(",")
    raw = out_dir / "raw.jsonl"
    workroot = Path(tempfile.mkdtemp(prefix="vs_apache_", dir=args.workdir))
    try:
        for round_no in range(1, args.rounds + 1):
            for setup in SETUPS:
                group = [s for s in chosen if s.setup == setup]
                if not group:
                    continue
                cpus = {int(c) for c in args.server_cpus.split(",")} if args.server_cpus else None
                with brokers(sides, setup, workroot / f"r{round_no}", cpus) as running:
                    for index, s in enumerate(group):
                        order = sides if (index + round_no) % 2 == 0 else sides[::-1]
                        for name in order:
                            run = functools.partial(
                                run_scenario,
                                running[name],
                                s,
                                args.quick,
                                round_no,
                                out_dir,
                                args.profile,
                                args.strace,
                            )
                            labels = {"broker": name, "case": s.name, "round": round_no}
                            record_run(raw, run, {**labels, "setup": setup}, summary_line)
    finally:
        shutil.rmtree(workroot, ignore_errors=True)
    (out_dir / "SUMMARY.md").write_text(summarize(raw, args))
    return out_dir


def record_run(
    raw: Path,
    run: Callable[[], dict[str, Any]],
    labels: dict[str, Any],
    line: Callable[[dict[str, Any]], str],
) -> None:
    """One run's record (``labels`` added) appended to raw.jsonl and printed as ``line``; a run
    whose generator failed is recorded with its error, and the other runs go on."""
    try:
        rec = run()
    except RuntimeError as exc:
        rec = {"error": str(exc)}
    rec.update(labels)
    with raw.open("a") as f:
        f.write(json.dumps(rec) + "\n")
    print(line(rec), flush=True)


def summary_line(r: dict[str, Any]) -> str:
    return (
        f"{r['case']:<22} r{r['round']} {r['broker']:<8} {r.get('msgs_per_s', 0):>10,.0f} msg/s  "
        f"server {r.get('server_cpu_pct', 0):5.0f}% ({r.get('server_cpu_us_per_msg', 0):6.1f} us/msg)  "
        f"load {r.get('load_start', 0):.1f}  machine busy {r.get('machine_busy_pct', 0):.0f}%  "
        f"failed {r.get('failed_requests', 0)}"
    )


def _median(rows: list[dict[str, Any]], key: str) -> float:
    values = [r[key] for r in rows if isinstance(r.get(key), (int, float))]
    return statistics.median(values) if values else float("nan")


def _lat(rows: list[dict[str, Any]]) -> str:
    parts = []
    for r in rows:
        lat = r.get("e2e_latency_us") or r.get("request_latency_us") or {}
        if lat:
            parts.append("/".join(f"{lat[k] / 1000:.1f}" for k in ("p50", "p99", "p999", "max")))
    return "; ".join(parts)


def summarize(raw: Path, args: argparse.Namespace) -> str:
    rows = [json.loads(line) for line in raw.read_text().splitlines() if line.strip()]
    sides = args.brokers.split(",")
    lines: list[str] = []
    for base in sides[1:]:
        lines += table(rows, sides[0], base)
    lines += configs()
    title = [
        f"# ferrymq vs Apache RocketMQ, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
        "",
        f"`bench/vs_apache.py {' '.join(sys.argv[1:])}`; rounds: {args.rounds}; machine: "
        f"{os.cpu_count()} CPUs; brokers pinned to CPUs: {args.server_cpus or 'no'}. "
        "Medians over rounds; every run in raw.jsonl.",
        "",
    ]
    return "\n".join(title + lines) + "\n"


def table(rows: list[dict[str, Any]], new: str, base: str) -> list[str]:
    lines = [
        f"## {new} / {base}",
        "",
        f"Ratio: {new} / {base}. Pairs are ({base} / {new}).",
        "",
        f"| scenario | {base} msg/s | {new} msg/s | ratio | server CPU % of a core "
        "| server CPU us/msg | latency ms p50/p99/p99.9/max | load avg at start |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for s in SCENARIOS:
        a = [r for r in rows if r["case"] == s.name and r["broker"] == base]
        f = [r for r in rows if r["case"] == s.name and r["broker"] == new]
        if not a and not f:
            continue
        am, fm = _median(a, "msgs_per_s"), _median(f, "msgs_per_s")
        ratio = fm / am if am and am == am else float("nan")
        lines.append(
            f"| {s.name} | {am:,.0f} | {fm:,.0f} | {ratio:.2f}x "
            f"| {_median(a, 'server_cpu_pct'):.0f} / {_median(f, 'server_cpu_pct'):.0f} "
            f"| {_median(a, 'server_cpu_us_per_msg'):.1f} / {_median(f, 'server_cpu_us_per_msg'):.1f} "
            f"| {_lat(a)}; {_lat(f)} "
            f"| {_median(a, 'load_start'):.1f} / {_median(f, 'load_start'):.1f} |"
        )
    return [*lines, ""]


def configs() -> list[str]:
    lines = ["## Configurations (the same keys on both brokers)", ""]
    lines += ["| key | value |", "|---|---|"]
    for k, v in COMMON_CONF.items():
        lines.append(f"| {k} | {v} |")
    for name, conf in SETUPS.items():
        lines.append(f"| set-up `{name}` | {conf}, slaves: {SLAVES[name]} |")
    lines.append(f"| Apache JVM | {' '.join(APACHE_JVM)} |")
    lines.append(
        "| ferrymq | `LocalCluster` (as `ferrymq local-cluster --groups 1`), one process per broker |"
    )
    lines.append(f"| generator JVM | {' '.join(GENERATOR_JVM)} |")
    return lines


def run_or_summarize(
    args: argparse.Namespace,
    run: Callable[[argparse.Namespace], Path],
    summary: Callable[[Path, argparse.Namespace], str],
) -> int:
    """A run, or with ``--summarize DIR`` only DIR's SUMMARY.md again from its raw.jsonl; the
    summary printed either way."""
    if args.summarize:
        out = Path(args.summarize)
        (out / "SUMMARY.md").write_text(summary(out / "raw.jsonl", args))
    else:
        out = run(args)
    print((out / "SUMMARY.md").read_text())
    print(f"results in {out}")
    return 0


def parser(doc: str | None, warmup: int) -> argparse.ArgumentParser:
    """The options both runners (this one and vs_apache_v5.py) take."""
    p = argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--quick", action="store_true", help="small counts and short windows")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--only", default="", help="comma-separated scenario names")
    p.add_argument("--out", default="", help="results directory (default: dated, in bench/results)")
    p.add_argument("--workdir", default=None, help="where the servers' stores go (default: /tmp)")
    p.add_argument(
        "--summarize",
        default="",
        help="only (re)write SUMMARY.md of this results directory from its raw.jsonl",
    )
    p.add_argument("--warmup", type=int, default=warmup, help="requests before each window")
    return p


def main() -> int:
    global WARMUP
    p = parser(__doc__, WARMUP)
    p.add_argument(
        "--brokers",
        default="ferrymq,apache",
        help="which brokers, in round-1 order; ratios are first / last. ferrymq@REV runs "
        "commit REV's broker (an A/B: --brokers ferrymq,ferrymq@HEAD~1)",
    )
    p.add_argument("--profile", action="store_true", help="py-spy the ferrymq brokers")
    p.add_argument(
        "--strace",
        action="store_true",
        help="count the brokers' system calls per message (strace -c; slows them: not for rates)",
    )
    p.add_argument(
        "--server-cpus",
        default="",
        help="pin the broker processes (all threads) to these CPUs, e.g. 0 (scaling runs)",
    )
    args = p.parse_args()
    WARMUP = args.warmup
    return run_or_summarize(args, run_all, summarize)


if __name__ == "__main__":
    sys.exit(main())
