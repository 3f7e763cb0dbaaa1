"""The probes the operator writes for brokers and NameServers, run as the kubelet runs them
(``/bin/sh -c`` with the pod's environment) against real server processes on 127.0.0.1.

The server keeps ``$FERRYMQ_PROBE_DIR/serving-<port>`` fresh once it serves
(ferrymq.remoting.serving_marker); the probe is a shell test of that file's age, no Python.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ferrymq.broker.local_cluster import pick_free_port
from ferrymq.remoting.serving_marker import ServingMarker, marker_path
from ferrymq_operator.builders import namesrv, pod
from ferrymq_operator.builders.names import Owner
from ferrymq_operator.models import parse_nameserver_spec

POD_NAME = "routes-namesrv-1"


def run_probe(probe: dict[str, Any], probe_dir: Path, env: dict[str, str]) -> bool:
    command = probe["exec"]["command"]
    # the operator's probe names the pod's directory; here it is the test's own
    script = command[2].replace(pod.PROBE_DIR, str(probe_dir))
    result = subprocess.run(
        [*command[:2], script],
        env={"PATH": os.environ["PATH"], **env},
        timeout=probe["timeoutSeconds"],
        check=False,
    )
    return result.returncode == 0


def wait_until(what: str, check: Any, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)  # poll interval
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def namesrv_probes(namesrv_owner: Owner) -> tuple[dict[str, Any], dict[str, Any], int]:
    base = pick_free_port("127.0.0.1") - 1  # pod ordinal 1 listens on base + 1
    spec = parse_nameserver_spec({"replicas": 2, "hostNetwork": True, "port": base})
    (container,) = namesrv.statefulset(namesrv_owner, spec)["spec"]["template"]["spec"][
        "containers"
    ]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    assert env[pod.PROBE_DIR_ENV] == pod.PROBE_DIR
    return container["readinessProbe"], container["livenessProbe"], base + 1


@pytest.fixture
def namesrv_process(
    namesrv_probes: tuple[dict[str, Any], dict[str, Any], int], tmp_path: Path
) -> Iterator[tuple[subprocess.Popen[bytes], Path, int]]:
    port = namesrv_probes[2]
    probe_dir = tmp_path / "probe"
    conf = tmp_path / "namesrv.conf"
    conf.write_text(f"listenPort={port}\nkvConfigPath={tmp_path / 'kv.json'}\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "ferrymq.cli.main", "namesrv", "-c", str(conf)],
        env={**os.environ, pod.PROBE_DIR_ENV: str(probe_dir)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield proc, probe_dir, port
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)


def test_the_probes_follow_a_real_nameserver_on_the_pods_own_port(
    namesrv_probes: tuple[dict[str, Any], dict[str, Any], int],
    namesrv_process: tuple[subprocess.Popen[bytes], Path, int],
) -> None:
    readiness, liveness, port = namesrv_probes
    proc, probe_dir, _ = namesrv_process
    env = {"POD_NAME": POD_NAME}
    wait_until(
        "the readiness probe to pass",
        lambda: run_probe(readiness, probe_dir, env) or proc.poll() is not None,
    )
    assert proc.poll() is None, "the NameServer exited"
    assert run_probe(liveness, probe_dir, env)
    # the port is the pod's own: pod 0 of the same template has another port, and no marker
    assert not run_probe(readiness, probe_dir, {"POD_NAME": "routes-namesrv-0"})
    # a stuck event loop stops the touches: readiness fails once the marker is 10 s old
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        stale = time.time() - pod.READY_FRESH_S - 1
        os.utime(marker_path(probe_dir, port), (stale, stale))
        assert not run_probe(readiness, probe_dir, env)
        assert run_probe(liveness, probe_dir, env)  # liveness allows a longer stall
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    wait_until(
        "the resumed loop to refresh the marker", lambda: run_probe(readiness, probe_dir, env)
    )
    # a stopping server is no longer ready: SIGTERM removes the marker
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    assert not marker_path(probe_dir, port).exists()
    assert not run_probe(liveness, probe_dir, env)


def test_a_marker_left_by_an_earlier_container_is_removed_before_the_server_starts(
    namesrv_probes: tuple[dict[str, Any], dict[str, Any], int], tmp_path: Path
) -> None:
    readiness, _liveness, port = namesrv_probes
    probe_dir = tmp_path / "probe"
    left = ServingMarker(probe_dir, port)
    left.touch()
    # Something else holds the port: this start fails, and the old marker must not vouch for it.
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", port))
        holder.listen()
        conf = tmp_path / "namesrv.conf"
        conf.write_text(f"listenPort={port}\nkvConfigPath={tmp_path / 'kv.json'}\n")
        proc = subprocess.run(
            [sys.executable, "-m", "ferrymq.cli.main", "namesrv", "-c", str(conf)],
            env={**os.environ, pod.PROBE_DIR_ENV: str(probe_dir)},
            capture_output=True,
            timeout=60,
            check=False,
        )
    assert proc.returncode != 0
    assert not run_probe(readiness, probe_dir, {"POD_NAME": POD_NAME})
