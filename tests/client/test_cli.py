"""The client CLI (``ferrymq produce|consume|admin|bench``) as a user runs it: real subprocesses against
a real NameServer and brokers on 127.0.0.1."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from .cluster import LocalCluster

pytestmark = pytest.mark.timeout(180)


async def ferrymq(*args: str, timeout: float = 60.0) -> tuple[int, str, str]:
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "ferrymq.cli.main",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        out, err = await proc.communicate()
        raise AssertionError(
            f"ferrymq {' '.join(args)} did not finish in {timeout}s; stdout: {out.decode()[-2000:]}"
            f" stderr: {err.decode()[-2000:]}"
        ) from None
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_topic_produce_consume_progress_roundtrip(cluster: LocalCluster) -> None:
    ns = cluster.namesrv_addr
    rc, out, err = await ferrymq(
        "admin", "topic", "create", "-n", ns, "--topic", "CliTopic", "-r", "2", "-w", "2"
    )
    assert rc == 0, err
    assert out.count("success") == 2

    rc, out, err = await ferrymq("admin", "topic", "list", "-n", ns)
    assert rc == 0 and "CliTopic" in out.split()

    rc, out, err = await ferrymq(
        "produce",
        "-n",
        ns,
        "--topic",
        "CliTopic",
        "--count",
        "12",
        "--tags",
        "TagA",
        "--keys",
        "k-{i}",
        "--body",
        "hello {i}",
    )
    assert rc == 0, err
    assert "sent 12/12" in out

    rc, out, err = await ferrymq(
        "consume",
        "-n",
        ns,
        "--topic",
        "CliTopic",
        "--group",
        "cli-group",
        "--count",
        "12",
        "--timeout",
        "30",
        "--from-first",
    )
    assert rc == 0, err
    assert "received 12 message(s)" in out
    bodies = {f"hello {i}" for i in range(12)}
    assert all(f"'{b}'" in out for b in bodies)
    assert "tags=TagA" in out and "keys=k-5" in out

    rc, out, err = await ferrymq("admin", "consumer-progress", "-n", ns, "--group", "cli-group")
    assert rc == 0, err
    assert "CliTopic" in out and "diff total: 0" in out

    rc, out, err = await ferrymq(
        "admin", "message", "query", "-n", ns, "--topic", "CliTopic", "--key", "k-3"
    )
    assert rc == 0, err
    assert "hello 3" in out

    rc, out, err = await ferrymq("admin", "cluster", "list", "-n", ns)
    assert rc == 0 and "broker-a" in out and "broker-b" in out and "TestCluster" in out

    rc, out, err = await ferrymq("admin", "topic", "delete", "-n", ns, "--topic", "CliTopic")
    assert rc == 0, err
    rc, out, err = await ferrymq("admin", "topic", "route", "-n", ns, "--topic", "CliTopic")
    assert rc == 1 and "does not exist" in err


async def test_bench_commands_report_json(cluster: LocalCluster, tmp_path: Path) -> None:
    ns = cluster.namesrv_addr
    await cluster.create_topic("BenchTopic", queues=2)
    out_file = tmp_path / "produce.json"
    rc, out, err = await ferrymq(
        "bench",
        "produce",
        "-n",
        ns,
        "--topic",
        "BenchTopic",
        "--mode",
        "batched",
        "--count",
        "2000",
        "--json",
        str(out_file),
    )
    assert rc == 0, err
    import json

    result = json.loads(out_file.read_text())
    assert result["messages"] == 2000 and result["msgs_per_s"] > 0
    rc, out, err = await ferrymq(
        "bench",
        "produce",
        "-n",
        ns,
        "--topic",
        "BenchTopic",
        "--mode",
        "blocking",
        "--count",
        "300",
        "--json",
        str(out_file),
    )
    assert rc == 0, err
    result = json.loads(out_file.read_text())
    assert result["name"] == "produce_blocking" and result["messages"] == 300
    assert result["errors"] == 0
    rc, out, err = await ferrymq(
        "bench",
        "consume",
        "-n",
        ns,
        "--topic",
        "BenchTopic",
        "--expected",
        "2300",
        "--max-seconds",
        "60",
    )
    assert rc == 0, err
    assert json.loads(out)["messages"] == 2300  # the batched 2000 and the blocking 300


async def test_bad_input_exits_non_zero_with_a_message(tmp_path: Path) -> None:
    rc, _, err = await ferrymq("produce", "-n", "127.0.0.1:1", "--topic", "T")
    assert rc == 1 and "NameServer 127.0.0.1:1" in err and "Traceback" not in err
    rc, _, err = await ferrymq("produce", "-n", "127.0.0.1:1", "--topic", "bad topic")
    assert rc == 2 and "--topic" in err
    rc, _, err = await ferrymq("consume", "-n", "nonsense", "--topic", "T", "--group", "g")
    assert rc == 2 and "not host:port" in err
    rc, _, err = await ferrymq("produce", "-n", "127.0.0.1:1", "--topic", "T", "--mode", "fast")
    assert rc == 2 and "--mode" in err
