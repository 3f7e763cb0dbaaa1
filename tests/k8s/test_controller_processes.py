"""Two ``ferrymq controller`` processes with ``controllerStoreType=kubernetes`` against the real
API server: one answers (the Lease holder), the other refuses with CONTROLLER_NOT_LEADER; after a
kill -9 of the leader the other takes the Lease and serves the state the first one saved."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from ferrymq.controller.protocol import ControllerRequestCode as Req
from ferrymq.controller.protocol import ControllerResponseCode as Resp
from ferrymq.controller.protocol import ReplicaInfo
from ferrymq.remoting.blocking import BlockingConnection
from ferrymq.remoting.command import RemotingCommand
from kubernetes import client as k8s
from subprocess_helpers import popen

from k8s.control_plane import KubeApi

READY = re.compile(rb"Controller ready on port (\d+)")


def start(conf: Path, log: Path, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], int]:
    out = log.open("ab")
    proc = popen(
        [sys.executable, "-m", "ferrymq.cli.main", "controller", "-c", str(conf)],
        stdout=out,
        stderr=subprocess.STDOUT,
        env=env,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        match = READY.findall(log.read_bytes())
        if match and proc.poll() is None:
            return proc, int(match[-1])
        assert proc.poll() is None, log.read_text()
        time.sleep(0.05)
    proc.kill()
    raise AssertionError(f"controller not ready: {log.read_text()}")


def invoke(port: int, code: int, ext: dict[str, str]) -> RemotingCommand:
    conn = BlockingConnection(f"127.0.0.1:{port}")
    try:
        return conn.invoke(RemotingCommand.request(code, ext), 5)
    finally:
        conn.close()


REGISTER = {"clusterName": "c1", "brokerName": "g", "brokerAddr": "127.0.0.1:1001", "brokerId": "1"}


def test_lease_holder_serves_and_a_kill_9_hands_over_with_state(
    kube_api: KubeApi, k8s_namespace: str, tmp_path: Path
) -> None:
    conf = tmp_path / "controller.conf"
    conf.write_text(
        "listenPort=0\nbindAddress=127.0.0.1\ncontrollerStoreType=kubernetes\n"
        f"controllerNamespace={k8s_namespace}\ncontrollerStateConfigMap=ctl-state\n"
        "controllerLeaseName=ctl\ncontrollerLeaseDurationSeconds=2\n"
    )
    procs: list[subprocess.Popen[bytes]] = []
    ports: list[int] = []
    try:
        for i in range(2):
            env = kube_api.env(os.environ)
            env["POD_NAME"] = f"ctl-{i}"
            proc, port = start(conf, tmp_path / f"ctl-{i}.log", env)
            procs.append(proc)
            ports.append(port)
        # exactly one of them registers the broker; the other says it is not the leader
        deadline = time.monotonic() + 30
        while True:
            answers = [invoke(p, Req.CONTROLLER_REGISTER_BROKER, REGISTER) for p in ports]
            codes = sorted(a.code for a in answers)
            if codes == [0, Resp.CONTROLLER_NOT_LEADER]:
                break
            assert 0 not in codes or codes.count(0) == 1, "two controllers answered"
            assert time.monotonic() < deadline, f"no single leader: {codes}"
            time.sleep(0.2)
        leader = next(i for i, a in enumerate(answers) if a.code == 0)
        first = ReplicaInfo.parse(answers[leader].ext_fields, answers[leader].body_bytes())
        assert (first.master_broker_id, first.master_epoch) == (1, 1)
        with kube_api.api_client() as api:
            lease = k8s.CoordinationV1Api(api).read_namespaced_lease("ctl", k8s_namespace)
        assert lease.spec.holder_identity == f"ctl-{leader}"

        os.kill(procs[leader].pid, signal.SIGKILL)
        procs[leader].wait(10)
        other = ports[1 - leader]
        deadline = time.monotonic() + 30
        while True:
            resp = invoke(other, Req.CONTROLLER_GET_REPLICA_INFO, {"brokerName": "g"})
            if resp.code == 0:
                break
            assert resp.code == Resp.CONTROLLER_NOT_LEADER, resp.remark
            assert time.monotonic() < deadline, "the standby never took over"
            time.sleep(0.2)
        assert ReplicaInfo.parse(resp.ext_fields, resp.body_bytes()) == first
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGTERM)
                proc.wait(20)
