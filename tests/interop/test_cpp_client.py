"""Interoperability with the unmodified upstream C++ client (pip rocketmq==0.4.4) against a real
NameServer and broker started as processes. Each C++ client runs in its own subprocess."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from ferrymq.broker.local_cluster import LocalCluster

pytestmark = pytest.mark.interop
pytest.importorskip(
    "rocketmq.client", reason="the upstream C++ client rocketmq==0.4.4 is not installed"
)

CPP = Path(__file__).with_name("cpp_client.py")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(
        tmp_path_factory.mktemp("interop"),
        groups=1,
        namesrv_port=0,
        broker_port=0,
        mapped_file_size_commit_log=8 * 1024 * 1024,
    ) as running:
        yield running


def run_cpp(args: list[str], home: Path, timeout: float) -> tuple[int, list[dict[str, object]]]:
    env = dict(os.environ, HOME=str(home))  # the C++ client logs under $HOME/logs/rocketmq-cpp
    proc = subprocess.run(
        [sys.executable, str(CPP), *args],
        capture_output=True,
        timeout=timeout,
        env=env,
        check=False,
    )
    events = []
    for line in proc.stdout.decode(errors="replace").splitlines():
        if line.startswith("{"):
            events.append(json.loads(line))
    if proc.returncode not in (0, 3):
        raise AssertionError(f"C++ client crashed ({proc.returncode}): {proc.stderr[-2000:]!r}")
    return proc.returncode, events


async def consume_with_ferrymq(
    namesrv: str, topic: str, group: str, count: int, timeout: float = 60
) -> dict[str, tuple[str | None, list[str]]]:
    from ferrymq.client import ConsumeFromWhere, PushConsumer

    got: dict[str, tuple[str | None, list[str]]] = {}
    done = asyncio.Event()

    def listener(msgs: list, context: object) -> None:  # type: ignore[type-arg]
        for m in msgs:
            got[m.body.decode()] = (m.tags, m.keys)
        if len(got) >= count:
            done.set()

    consumer = PushConsumer(
        group, namesrv, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
    )
    consumer.subscribe(topic, "*")
    consumer.register_listener(listener)
    await consumer.start()
    try:
        await asyncio.wait_for(done.wait(), timeout)
    finally:
        await consumer.shutdown()
    return got


async def test_cpp_producer_to_cpp_and_ferrymq_consumers(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    n = 20
    rc, sent = await asyncio.to_thread(
        run_cpp, ["produce", cluster.namesrv_addr, "InteropCpp", str(n)], tmp_path, 120
    )
    assert rc == 0 and len(sent) == n
    assert all(e["status"] == 0 for e in sent), sent  # SEND_OK

    rc, events = await asyncio.to_thread(
        run_cpp,
        ["consume", cluster.namesrv_addr, "InteropCpp", "CG_cpp", str(n), "60"],
        tmp_path,
        120,
    )
    received = {e["body"]: e for e in events if "body" in e}
    assert rc == 0, events[-3:]
    assert set(received) == {f"cpp-body-{i}" for i in range(n)}
    assert all(e["tags"] == "TagCpp" for e in received.values())
    assert {e["keys"] for e in received.values()} == {f"cpp-key-{i}" for i in range(n)}

    ours = await consume_with_ferrymq(cluster.namesrv_addr, "InteropCpp", "CG_ferrymq", n)
    assert set(ours) == {f"cpp-body-{i}" for i in range(n)}
    assert ours["cpp-body-3"] == ("TagCpp", ["cpp-key-3"])


async def test_ferrymq_producer_to_cpp_consumer(cluster: LocalCluster, tmp_path: Path) -> None:
    from ferrymq.client import Message, Producer

    n = 20
    async with Producer("PID_ferrymq_interop", cluster.namesrv_addr) as producer:
        for i in range(n):
            msg = Message("InteropPy", f"py-body-{i}".encode())
            msg.tags = "TagPy"
            msg.keys = [f"py-key-{i}", "shared"]
            await producer.send(msg)
    rc, events = await asyncio.to_thread(
        run_cpp,
        ["consume", cluster.namesrv_addr, "InteropPy", "CG_cpp_py", str(n), "60"],
        tmp_path,
        120,
    )
    received = {e["body"]: e for e in events if "body" in e}
    assert rc == 0, events[-3:]
    assert set(received) == {f"py-body-{i}" for i in range(n)}
    assert received["py-body-7"]["tags"] == "TagPy"
    assert received["py-body-7"]["keys"] == "py-key-7 shared"
