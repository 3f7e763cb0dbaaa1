"""Starting long-lived test subprocesses (brokers, NameServers, operators, control planes) so
they cannot outlive the test run: on Linux each gets SIGTERM from the kernel when the test process
dies (PR_SET_PDEATHSIG, :func:`ferrymq.broker.local_cluster.popen_with_parent`), so a
hard-killed pytest leaves nothing running. Tests still stop their own processes by PID.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ferrymq.broker.local_cluster import popen_with_parent


def popen(argv: Sequence[str | Path], **kwargs: Any) -> subprocess.Popen[bytes]:
    """``subprocess.Popen(argv, **kwargs)`` whose child dies with the test run."""
    return popen_with_parent(argv, **kwargs)


def process_gone(pid: int) -> bool:
    """True once ``pid`` has exited (a zombie nobody reaps, e.g. under a container's PID 1,
    counts as exited)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return True
    # the state follows the parenthesised command name, which may itself hold spaces
    return stat.rpartition(")")[2].split()[0] in ("Z", "X")
