"""mqadmin (Apache ``rocketmq-tools``) as a long-lived JVM: many commands, one start.

A JVM start costs seconds on a 2-core machine and the suite runs ~40 commands per release and
target, so :class:`Mqadmin` keeps one ``MqadminDriver`` JVM per release: each command is a line of
TAB-separated arguments on its stdin; the driver calls ``MQAdminStartup.main`` with System.out/err
captured and System.exit trapped, and answers one ``@@MQADMIN`` line (exit status, base64 stdout,
base64 stderr). Classpaths come from the reference launcher's Maven helper: 5.4.0's tools with the
Apache reference pom, 4.9.8's from ``tools-4.9.8/pom.xml``.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from subprocess_helpers import popen

from ..reference.apache import MQADMIN_MAIN, logback_opt
from ..reference.java import java_argv, java_env
from ..reference.tools import APACHE_POM, CACHE_DIR, ensure_java_tools, resolve_classpath

HERE = Path(__file__).resolve().parent

# release -> the pom whose classpath has its rocketmq-tools
POMS = {"5.4.0": APACHE_POM, "4.9.8": HERE / "tools-4.9.8" / "pom.xml"}


_LOGBACK_TOOLS = """<configuration>
  <appender name="FILE" class="ch.qos.logback.core.FileAppender">
    <file>${user.home}/logs/rocketmqlogs/tools.log</file>
    <encoder><pattern>%d{yyy-MM-dd HH:mm:ss,GMT+8} %p %t - %m%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="FILE"/></root>
</configuration>
"""


class MqadminError(RuntimeError):
    """The driver JVM died or did not answer."""


@dataclass(frozen=True, slots=True)
class Result:
    """What a user sees of one mqadmin run: exit status ("-" = returned normally), stdout, stderr."""

    status: str
    out: str
    err: str


def driver_classes() -> Path:
    """MqadminDriver.java compiled once per source version (javac from ensure_java_tools)."""
    source = HERE / "MqadminDriver.java"
    digest = hashlib.sha256(source.read_bytes()).hexdigest()[:12]
    classes = CACHE_DIR / f"mqadmin-driver-{digest}"
    if not (classes / "MqadminDriver.class").exists():
        ensure_java_tools()
        tmp = Path(tempfile.mkdtemp(dir=CACHE_DIR))
        subprocess.run(["javac", "-nowarn", "-d", str(tmp), str(source)], check=True, timeout=300)
        try:
            tmp.rename(classes)
        except OSError:  # another run compiled it meanwhile
            shutil.rmtree(tmp, ignore_errors=True)
    return classes


class Mqadmin:
    """One mqadmin release in one JVM; :meth:`run` is one ``mqadmin <args>`` invocation."""

    def __init__(self, release: str, home: Path, timeout: float = 120.0) -> None:
        self.release = release
        self.timeout = timeout
        cp = f"{driver_classes()}{os.pathsep}{resolve_classpath(POMS[release])}"
        home.mkdir(parents=True, exist_ok=True)
        # 4.x mqadmin configures logback from $ROCKETMQ_HOME/conf/logback_tools.xml and runs
        # no command without it (the file ships in the binary distribution, not in the jars)
        (home / "conf").mkdir(exist_ok=True)
        (home / "conf" / "logback_tools.xml").write_text(_LOGBACK_TOOLS)
        jvm_opts = [
            "-Xms64m",
            "-Xmx256m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",  # short-lived tool: the C1 compiler is enough
            "-Djava.security.manager=allow",  # the driver traps System.exit
            *logback_opt(MQADMIN_MAIN),
        ]
        self._proc = popen(
            java_argv("MqadminDriver", [], cp, home, jvm_opts),
            cwd=home,
            env=java_env(home),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self._lock = threading.Lock()
        self._read_until("@@READY")

    def _read_until(self, prefix: str) -> str:
        assert self._proc.stdout is not None
        result: list[str] = []

        def read() -> None:
            assert self._proc.stdout is not None
            for raw in self._proc.stdout:
                line = raw.decode("utf-8", "replace").rstrip("\n")
                if line.startswith(prefix):
                    result.append(line)
                    return

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(self.timeout)
        if not result:
            if reader.is_alive():
                self.close()
                raise MqadminError(f"mqadmin {self.release}: no answer in {self.timeout} s")
            raise MqadminError(f"mqadmin {self.release} driver exited: {self._proc.poll()}")
        return result[0]

    def run(self, *args: str) -> Result:
        if any("\t" in a or "\n" in a for a in args):
            raise ValueError("mqadmin arguments cannot hold TAB or newline")
        with self._lock:
            assert self._proc.stdin is not None
            self._proc.stdin.write(("\t".join(args) + "\n").encode())
            self._proc.stdin.flush()
            line = self._read_until("@@MQADMIN ")
        _, status, out, err = [*line.split(" "), "", ""][:4]
        return Result(
            status,
            base64.b64decode(out).decode("utf-8", "replace"),
            base64.b64decode(err).decode("utf-8", "replace"),
        )

    def close(self) -> None:
        if self._proc.poll() is None:
            if self._proc.stdin is not None:
                self._proc.stdin.close()
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
