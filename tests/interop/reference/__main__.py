"""Fetch everything the interop tests need ahead of the run (scripts/setup.sh calls this): the JDK
and Maven, Apache RocketMQ 5.4.0's jars, the scenario module built for each client version and
for the Spring scenario (rocketmq-spring-boot-starter 2.3.1), and the Go client's scenario
program (Go installed where missing, modules from the Go module proxy).

    PYTHONPATH=tests python -m interop.reference
"""

from __future__ import annotations

import time
from pathlib import Path

from .tools import build_go_module, build_module, resolve_classpath

MODULE = Path(__file__).resolve().parent.parent / "java"
GO_MODULE = MODULE.with_name("go")
# profile -> build dir (the rocketmq-client version); spring: the Spring scenario (spring_runner)
PROFILES = {"client4": "4.9.8", "client5": "5.4.0", "spring": "5.3.0"}


def main() -> None:
    started = time.monotonic()
    resolve_classpath()
    for profile, version in PROFILES.items():
        build_module(MODULE, profile, version)
    build_go_module(GO_MODULE)
    print(
        "interop: Apache RocketMQ jars, the Java (and Spring) scenario module and the Go scenario "
        f"program ready ({time.monotonic() - started:.0f} s)"
    )


if __name__ == "__main__":
    main()
