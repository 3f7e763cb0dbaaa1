"""POP through the Java remoting client 5.4.0 (``pop/PopProbe.java``), against Apache RocketMQ
5.4.0 and against ferrymq: the same observable results.

- ``push``: a DefaultMQPushConsumer in POP mode (SET_MESSAGE_REQUEST_MODE by admin,
  clientRebalance=false, QUERY_ASSIGNMENT) consumes every message; the one its listener fails comes
  back with reconsumeTimes 1 (the client changed its invisible time).
- ``api``: the MQClientAPIImpl calls upstream's 5.x proxy makes: popMessageAsync (receipt handles
  rebuilt by the client from the response header), ackMessageAsync, changeInvisibleTimeAsync (new
  handle), batchAckMessageAsync; afterwards nothing is visible.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from ferrymq.client.pop_api import PopApi
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import ResponseCode
from raw_remoting import create_topic, heartbeat_consumer

from .reference import Target, resolve_classpath, run_java, run_mqadmin

PROBE = Path(__file__).parent / "pop" / "PopProbe.java"


def run_probe(
    target: Target, scenario: str, tmp_path: Path, topic: str, group: str, count: int
) -> list[dict[str, Any]]:
    done = run_java(
        str(PROBE),
        [scenario, target.namesrv_addr, target.broker_addrs[0], topic, group, str(count)],
        classpath=resolve_classpath(),
        run_dir=tmp_path / f"{scenario}-{target.name}",
        timeout=240,
    )
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert done.returncode == 0, (
        f"probe failed ({target}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )
    return lines


@pytest.mark.timeout(600)  # the first test of a session also waits for Apache's JVMs
def test_java_push_consumer_in_pop_mode(target: Target, tmp_path: Path) -> None:
    topic, group = f"PopPush_{target.name}", f"pop_push_cg_{target.name}"
    lines = run_probe(target, "push", tmp_path, topic, group, 4)
    assert [line["status"] for line in lines if line["kind"] == "sent"] == ["SEND_OK"] * 4
    end = next(line for line in lines if line["kind"] == "end")
    assert end == {"kind": "end", "allConsumed": True, "consumed": 4}
    deliveries = [line for line in lines if line["kind"] == "delivery"]
    assert all(d["hasPopCk"] and d["topic"] == topic for d in deliveries)
    first = {d["body"]: d for d in deliveries if d["reconsumeTimes"] == 0}
    assert sorted(first) == ["m0", "m1", "m2", "m3"]
    # the failed m1 came back once, with reconsumeTimes 1; nothing else came back
    again = [(d["body"], d["reconsumeTimes"]) for d in deliveries if d["reconsumeTimes"] > 0]
    assert again == [("m1", 1)]
    assert Counter(d["popCkFields"] for d in deliveries) == Counter({8: len(deliveries)})


@pytest.mark.timeout(600)
def test_java_proxy_calls(target: Target, tmp_path: Path) -> None:
    topic, group = f"PopApi_{target.name}", f"pop_api_cg_{target.name}"
    lines = run_probe(target, "api", tmp_path, topic, group, 4)
    popped = [line for line in lines if line["kind"] == "popped"]
    assert sorted(p["body"] for p in popped) == ["m0", "m1", "m2", "m3"]
    for p in popped:
        # startOffset popTime invisibleTime reviveQid topicType brokerName queueId queueOffset
        assert p["ckFields"] == 8 and p["topicType"] == "0" and p["invisible"] == "20000"
        assert int(p["ckQueueOffset"]) == p["queueOffset"] and p["firstPop"]
        assert p["reviveQid"] != "999"
    kinds = {line["kind"]: line for line in lines}
    assert kinds["ack"]["status"] == "OK"
    assert kinds["changeInvisible"]["status"] == "OK"
    assert kinds["changeInvisible"]["newFields"] == 8
    assert kinds["changeInvisible"]["newInvisible"] == "30000"
    assert kinds["batchAck"]["status"] == "OK"
    assert (kinds["after"]["status"], kinds["after"]["n"]) in (
        ("POLLING_NOT_FOUND", 0),
        ("NO_NEW_MSG", 0),
    )


@pytest.fixture(autouse=True)
def _java_tools() -> None:
    """The probe needs the JDK the launcher installs (and its resolved classpath)."""
    resolve_classpath()


async def test_mqadmin_set_consume_mode(target: Target, tmp_path: Path) -> None:
    """``mqadmin setConsumeMode -b <broker> -m POP`` (SET_MESSAGE_REQUEST_MODE), then
    QUERY_ASSIGNMENT answers POP with queue id -1 per broker once the group has a consumer.
    (``-c`` asks the NameServer first; a loaded machine made Apache's time out there.)"""
    topic, group = f"PopMode_{target.name}", f"pop_mode_cg_{target.name}"
    client = RemotingClient()
    try:
        addr = target.broker_addrs[0]
        reply = await create_topic(client, addr, topic, 2)
        assert reply.code == ResponseCode.SUCCESS, reply.remark
        done = await asyncio.to_thread(
            run_mqadmin,
            [
                "setConsumeMode",
                "-n",
                target.namesrv_addr,
                "-b",
                addr,
                "-t",
                topic,
                "-g",
                group,
                "-m",
                "POP",
                "-q",
                "0",
            ],
            tmp_path / "mqadmin",
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"set consume mode to {addr} success" in done.stdout, done.stdout + done.stderr
        api = PopApi(client)
        # no consumer of the group has sent a heartbeat yet: no assignment (null), as upstream
        assert await api.query_assignment(addr, topic=topic, group=group, client_id="c1") is None
        await heartbeat_consumer(client, addr, "c1", group, topic)
        got = await api.query_assignment(addr, topic=topic, group=group, client_id="c1")
        assert got is not None and len(got) == 1
        assert got[0]["messageQueue"] == {"topic": topic, "brokerName": "broker-a", "queueId": -1}
        assert got[0]["mode"] == "POP"
    finally:
        await client.close()
