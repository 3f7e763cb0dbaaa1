"""``ferrymq admin ... -o json`` on every listing command, and unknown groups/topics as errors with
a non-zero exit: real subprocesses against a real NameServer and brokers on 127.0.0.1."""

from __future__ import annotations

import json

import pytest

from .cluster import LocalCluster
from .test_cli import ferrymq

pytestmark = pytest.mark.timeout(240)


async def json_of(*args: str) -> object:
    rc, out, err = await ferrymq(*args, "-o", "json")
    assert rc == 0, err
    return json.loads(out)


async def test_listing_commands_print_json(cluster: LocalCluster) -> None:
    ns = cluster.namesrv_addr
    topic, group = "CliJsonT", "cli-json-g"
    rc, _, err = await ferrymq(
        "admin", "topic", "create", "-n", ns, "-t", topic, "-r", "2", "-w", "2"
    )
    assert rc == 0, err
    rc, _, err = await ferrymq("produce", "-n", ns, "-t", topic, "--count", "6", "--keys", "k-{i}")
    assert rc == 0, err
    rc, _, err = await ferrymq(
        "consume", "-n", ns, "-t", topic, "-g", group, "--count", "6", "--timeout", "30",
        "--from-first",
    )  # fmt: skip
    assert rc == 0, err

    listed = await json_of("admin", "topic", "list", "-n", ns)
    assert isinstance(listed, dict) and topic in listed["topicList"]

    route = await json_of("admin", "topic", "route", "-n", ns, "-t", topic)
    assert isinstance(route, dict)
    assert {q["brokerName"] for q in route["queueDatas"]} == {"broker-a", "broker-b"}
    assert all(q["readQueueNums"] == 2 for q in route["queueDatas"])

    clusters = await json_of("admin", "cluster", "list", "-n", ns)
    assert isinstance(clusters, list)
    assert {(c["cluster"], c["brokerName"], c["brokerId"]) for c in clusters} >= {
        ("TestCluster", "broker-a", 0),
        ("TestCluster", "broker-b", 0),
    }

    progress = await json_of("admin", "consumer-progress", "-n", ns, "-g", group)
    assert isinstance(progress, dict)
    rows = [r for r in progress["offsetTable"] if r["topic"] == topic]
    assert sum(r["brokerOffset"] for r in rows) == 6
    assert progress["diffTotal"] == 0

    stats = await json_of("admin", "topic-stats", "-n", ns, "-t", topic)
    assert isinstance(stats, dict)
    assert sum(r["maxOffset"] - r["minOffset"] for r in stats["offsetTable"]) == 6

    found = await json_of("admin", "message", "query", "-n", ns, "-t", topic, "-k", "k-3")
    assert isinstance(found, list) and [m["keys"] for m in found] == [["k-3"]]
    one = await json_of("admin", "message", "view", "-n", ns, "-i", found[0]["offsetMsgId"])
    assert isinstance(one, dict) and one["queueOffset"] == found[0]["queueOffset"]

    lag = await json_of("admin", "lag", "-n", ns, "-g", group, "--interval", "0.2", "--window", "2")
    assert isinstance(lag, list)
    assert [(r["group"], r["topic"], r["lag"]) for r in lag if r["topic"] == topic] == [
        (group, topic, 0)
    ]

    # reset-offset keeps -o for --offset (as before); --output json
    rc, out, err = await ferrymq(
        "admin", "reset-offset", "-n", ns, "-g", group, "-t", topic, "-o", "0", "--output", "json"
    )
    assert rc == 0, err
    assert {(r["topic"], r["offset"]) for r in json.loads(out)} == {(topic, 0)}


async def test_unknown_group_and_topic_exit_non_zero(cluster: LocalCluster) -> None:
    ns = cluster.namesrv_addr
    for args in (
        ("admin", "consumer-progress", "-n", ns, "-g", "no-such-group"),
        ("admin", "lag", "-n", ns, "-g", "no-such-group", "--interval", "0.2", "--window", "2"),
    ):
        rc, out, err = await ferrymq(*args)
        assert rc == 1, (args, out)
        assert "no-such-group" in err and "no broker holds offsets" in err
    rc, out, err = await ferrymq("admin", "topic-stats", "-n", ns, "-t", "NoSuchTopic")
    assert rc == 1, out
    assert "NoSuchTopic" in err
    rc, out, err = await ferrymq("admin", "lag", "-n", ns, "--watch", "-o", "json")
    assert rc == 2 and "--watch" in err
