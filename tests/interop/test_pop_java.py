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

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from .reference import Target, resolve_classpath, run_java

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
