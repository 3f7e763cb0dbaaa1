"""The Spring scenario program (tests/interop/java, profile ``spring``, source in src/spring): a
Spring Boot application on rocketmq-spring-boot-starter 2.3.1, one JVM per run (the listener container and the template are
the application's own), its observation as one ``@@RESULT`` JSON line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .java_runner import MARK, ScenarioError
from .reference.java import run_java
from .reference.tools import build_module

MODULE = Path(__file__).with_name("java")
STARTER = "2.3.1"  # rocketmq-spring-boot-starter, pinned in java/pom.xml (profile spring)
PROFILE, CLIENT = "spring", "5.3.0"  # the rocketmq-client the starter names: its build dir


class SpringScenarios:
    """:class:`differential.Scenarios` for the Spring application (one scenario: ``spring``)."""

    client = f"rocketmq-spring-boot-starter {STARTER}"

    def __init__(self, run_dir: Path) -> None:
        self.classpath = build_module(MODULE, PROFILE, CLIENT)
        self.run_dir = run_dir
        self._runs = 0

    def run(self, scenario: str, namesrv: str, timeout_s: int = 60, **args: Any) -> Any:
        if scenario != "spring":
            raise ValueError(f"the Spring program has no scenario {scenario!r}")
        self._runs += 1
        done = run_java(
            "io.ferrymq.interop.SpringScenario",
            [namesrv, args["topic"], args["group"], str(args["count"]), str(timeout_s * 1000)],
            classpath=self.classpath,
            run_dir=self.run_dir / f"run-{self._runs}",
            # the JVM start and Spring's context take most of this on a loaded machine
            timeout=timeout_s + 240,
            jvm_opts=("-Xms64m", "-Xmx384m", "-XX:+UseSerialGC", "-Djava.net.preferIPv4Stack=true"),
        )
        for line in done.stdout.splitlines():
            if line.startswith(MARK):
                return json.loads(line[len(MARK) :])
        raise ScenarioError(
            f"Spring scenario exited {done.returncode} without a result:\n"
            f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
