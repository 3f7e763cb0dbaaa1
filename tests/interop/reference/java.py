"""Running a Java main class from a resolved classpath: as a long-lived child (a server) stopped by
PID, or to completion (a tool such as mqadmin). One place for the JVM flags and the log layout.

Each child gets its own run directory: ``user.home`` and ``ROCKETMQ_HOME`` point there, so Apache's
logback files (``<run_dir>/logs/rocketmqlogs/*.log``), the NameServer's kvConfig and anything else a
server writes under its home stay in the test's tmp dir; stdout and stderr go to
``<run_dir>/<name>.out``.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ferrymq.broker.local_cluster import (
    describe_exit,
    die_with_parent,
    keep_previous_log,
    popen_with_parent,
)

# Small and predictable on a 2-core machine shared with other services: a 512 MiB heap, the
# serial collector (no parallel GC threads). bench/ passes its own. Direct memory: each broker
# thread that writes to the CommitLog keeps its own MessageExtEncoder buffer of maxMessageSize +
# 64 KiB (4,259,840 bytes, direct); with POP, the pull, ack and revive threads all write
# (checkpoints, retries), and at 256 MiB Apache's broker failed POPs with "OutOfMemoryError: Cannot
# reserve 4259840 bytes of direct buffer memory" and never answered them (pop.log; the
# change-invisible and retry-to-DLQ scenarios then timed out). 1 GiB is a ceiling, not a
# reservation (upstream's runbroker.sh: 15g).
DEFAULT_JVM_OPTS: tuple[str, ...] = (
    "-Xms256m",
    "-Xmx512m",
    "-XX:MaxDirectMemorySize=1g",
    "-XX:+UseSerialGC",
    "-Djava.net.preferIPv4Stack=true",
)


class JavaStartError(RuntimeError):
    """A Java child exited or did not become ready; the message has the tail of its logs."""


@dataclass(slots=True)
class JavaProcess:
    name: str
    main_class: str
    args: list[str]
    run_dir: Path
    proc: subprocess.Popen[bytes]
    # what started it, to start it again the same way
    argv: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def out_path(self) -> Path:
        return self.run_dir / f"{self.name}.out"

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        """The last lines of stdout and of the RocketMQ log files, for failure messages."""
        parts = []
        logs = self.run_dir / "logs" / "rocketmqlogs"
        candidates = [
            self.out_path,
            *(logs / n for n in ("namesrv.log", "broker.log", "proxy.log")),
        ]
        for path in candidates:
            try:
                text = path.read_text(errors="replace")
            except OSError:
                continue
            kept = [ln for ln in text.splitlines() if " |-" not in ln]  # logback's own status lines
            if kept:
                parts.append(f"--- {path} ---\n" + "\n".join(kept[-lines:]))
        return "\n".join(parts)

    def stop(self, *, kill: bool = False, grace: float = 30.0) -> None:
        """SIGTERM (Apache's shutdown hooks unregister and flush) or SIGKILL; SIGKILL after
        ``grace`` seconds."""
        if self.alive():
            self.proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        try:
            self.proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=30)


def java_argv(
    main_class: str,
    args: Sequence[str],
    classpath: str,
    run_dir: Path,
    jvm_opts: Sequence[str] = DEFAULT_JVM_OPTS,
) -> list[str]:
    return [
        "java",
        *jvm_opts,
        f"-Duser.home={run_dir}",
        f"-Drocketmq.home.dir={run_dir}",
        "-cp",
        classpath,
        main_class,
        *args,
    ]


def java_env(run_dir: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    for name in ("NAMESRV_ADDR", "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS"):
        env.pop(name, None)  # addresses and JVM flags come from the caller only
    env["ROCKETMQ_HOME"] = str(run_dir)
    env.update(extra or {})
    return env


def start_java(
    name: str,
    main_class: str,
    args: Sequence[str],
    *,
    classpath: str,
    run_dir: Path,
    jvm_opts: Sequence[str] = DEFAULT_JVM_OPTS,
    env: Mapping[str, str] | None = None,
    stdin: bool = False,
) -> JavaProcess:
    """Start ``main_class`` as a child that dies with the test run (PR_SET_PDEATHSIG). With
    ``stdin``, the caller talks to it: its stdin and stdout are pipes (stderr goes to the log)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    argv = java_argv(main_class, args, classpath, run_dir, jvm_opts)
    full_env = java_env(run_dir, env)
    return _spawn(name, main_class, list(args), run_dir, argv, full_env, piped=stdin)


def _spawn(
    name: str,
    main_class: str,
    args: list[str],
    run_dir: Path,
    argv: list[str],
    env: dict[str, str],
    *,
    piped: bool = False,
) -> JavaProcess:
    out_path = run_dir / f"{name}.out"
    keep_previous_log(out_path)  # a restarted child's predecessor's output stays readable
    with open(out_path, "wb") as out:
        # forked on a thread that outlives the child even when restarted from asyncio.to_thread
        proc = popen_with_parent(
            argv,
            cwd=run_dir,
            stdout=subprocess.PIPE if piped else out,
            stderr=out if piped else subprocess.STDOUT,
            stdin=subprocess.PIPE if piped else subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
    return JavaProcess(name, main_class, args, run_dir, proc, argv, env)


def restart_java(child: JavaProcess, *, kill: bool = False) -> JavaProcess:
    """Stop ``child`` and start the same command again in the same run directory."""
    child.stop(kill=kill)
    return _spawn(child.name, child.main_class, child.args, child.run_dir, child.argv, child.env)


def run_java(
    main_class: str,
    args: Sequence[str],
    *,
    classpath: str,
    run_dir: Path,
    timeout: float = 120,
    jvm_opts: Sequence[str] = ("-Xms64m", "-Xmx256m", "-XX:+UseSerialGC"),
    env: Mapping[str, str] | None = None,
    stdin: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``main_class`` to completion (e.g. mqadmin); stdout/stderr captured as text."""
    run_dir.mkdir(parents=True, exist_ok=True)
    return subprocess.run(
        java_argv(main_class, args, classpath, run_dir, jvm_opts),
        cwd=run_dir,
        env=java_env(run_dir, env),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        preexec_fn=die_with_parent(),
    )


def wait_until(
    child: JavaProcess,
    ready: Callable[[], bool],
    what: str,
    timeout: float = 180.0,
) -> None:
    """Poll ``ready`` until true; JavaStartError with the child's logs when it exits first or
    the deadline passes (the deadline is generous: JVM start-up on a loaded 2-core machine)."""
    deadline = time.monotonic() + timeout
    while not ready():
        if not child.alive():
            raise JavaStartError(
                f"{child.name} ({child.main_class}) {describe_exit(child.proc.poll())} before "
                f"{what}:\n{child.log_tail()}"
            )
        if time.monotonic() > deadline:
            raise JavaStartError(
                f"{child.name} not ready ({what}) within {timeout:.0f}s:\n{child.log_tail()}"
            )
        time.sleep(0.2)  # polling the child's state with a deadline


def port_open(host: str, port: int) -> bool:
    """True when something accepts TCP connections on host:port."""
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False
