"""Children started through the shared helper (LocalCluster, tests/subprocess_helpers.py) die
with a hard-killed parent: SIGKILL the supervisor, its NameServer and broker shut down (brokers
gracefully: the abort file goes), and so does a plain child of ``popen``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from subprocess_helpers import popen, process_gone

TESTS_DIR = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG")

SUPERVISOR = """
import sys, threading
from pathlib import Path
from ferrymq.broker.local_cluster import LocalCluster
cluster = LocalCluster(Path(sys.argv[1]), groups=1, slaves=0, namesrv_port=0, broker_port=0,
                       mapped_file_size_commit_log=1 << 20)
cluster.start()
print(" ".join(str(c.pid) for c in cluster.children), flush=True)
threading.Event().wait()
"""

PLAIN = """
import sys, threading
from subprocess_helpers import popen
child = popen([sys.executable, "-c", "import threading; threading.Event().wait()"])
print(child.pid, flush=True)
threading.Event().wait()
"""


def kill_parent_and_wait(parent: subprocess.Popen[bytes], pids: list[int]) -> None:
    assert pids and not any(process_gone(pid) for pid in pids)
    parent.send_signal(signal.SIGKILL)
    parent.wait(timeout=10)
    deadline = time.monotonic() + 60
    while not all(process_gone(pid) for pid in pids):
        if time.monotonic() > deadline:
            for pid in pids:  # do not leave them behind for the next test
                if not process_gone(pid):
                    os.kill(pid, signal.SIGKILL)
            raise AssertionError(f"children {pids} outlived their killed parent")
        time.sleep(0.05)  # polling for exit with a deadline


def start(script: str, *args: str) -> tuple[subprocess.Popen[bytes], list[int]]:
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(TESTS_DIR), os.environ.get("PYTHONPATH", "")])
    )
    parent = popen([sys.executable, "-c", script, *args], stdout=subprocess.PIPE, env=env)
    assert parent.stdout is not None
    line = parent.stdout.readline()
    assert line, f"parent exited with {parent.wait(timeout=10)}"
    return parent, [int(p) for p in line.split()]


def test_local_cluster_children_die_with_a_killed_supervisor(tmp_path: Path) -> None:
    parent, pids = start(SUPERVISOR, str(tmp_path))
    assert len(pids) == 2  # NameServer + broker
    abort = tmp_path / "broker-a-0" / "store" / "abort"
    assert abort.exists()
    kill_parent_and_wait(parent, pids)
    assert not abort.exists(), "the broker must have shut down gracefully (SIGTERM)"


def test_popen_children_die_with_a_killed_parent() -> None:
    parent, pids = start(PLAIN)
    kill_parent_and_wait(parent, pids)


def test_popen_refuses_a_second_preexec_fn() -> None:
    with pytest.raises(TypeError):
        popen(["true"], preexec_fn=lambda: None)


ECHO = "import sys\nfor line in sys.stdin:\n    print(line, end='', flush=True)\n"


def test_a_child_started_from_a_short_lived_thread_outlives_the_thread() -> None:
    """PR_SET_PDEATHSIG follows the forking thread: a child started from asyncio.to_thread
    (a broker restart in a test) got SIGTERM when that thread ended. The child must live on."""
    started: list[subprocess.Popen[bytes]] = []
    native_ids: list[int] = []

    def start_child() -> None:
        native_ids.append(threading.get_native_id())
        started.append(
            popen([sys.executable, "-c", ECHO], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        )

    thread = threading.Thread(target=start_child)
    thread.start()
    thread.join()
    child = started[0]
    try:
        # the kernel sends the parent-death signal before it unlists the exiting thread
        task = Path(f"/proc/self/task/{native_ids[0]}")
        deadline = time.monotonic() + 30
        while task.exists():
            assert time.monotonic() < deadline, "the starting thread never exited"
            time.sleep(0.01)  # polling for the thread's exit with a deadline
        assert child.stdin is not None and child.stdout is not None
        try:
            child.stdin.write(b"alive\n")
            child.stdin.flush()
        except BrokenPipeError:
            pass  # dead: the assertion below says how it ended
        assert child.stdout.readline() == b"alive\n", f"child exited with {child.wait(10)}"
    finally:
        child.kill()
        child.wait(timeout=10)
