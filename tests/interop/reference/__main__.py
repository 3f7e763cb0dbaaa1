"""Fetch everything the interop tests need ahead of the run (scripts/setup.sh calls this): the JDK
and Maven, Apache RocketMQ 5.4.0's jars, and the scenario module built for each client version.

    PYTHONPATH=tests python -m interop.reference
"""

from __future__ import annotations

import time
from pathlib import Path

from .tools import build_module, resolve_classpath

MODULE = Path(__file__).resolve().parent.parent / "java"
PROFILES = {"client4": "4.9.8", "client5": "5.4.0"}


def main() -> None:
    started = time.monotonic()
    resolve_classpath()
    for profile, version in PROFILES.items():
        build_module(MODULE, profile, version)
    print(
        f"interop: Apache RocketMQ jars and the scenario module ready ({time.monotonic() - started:.0f} s)"
    )


if __name__ == "__main__":
    main()
