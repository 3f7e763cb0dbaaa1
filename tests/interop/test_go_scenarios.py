"""The Go client (github.com/apache/rocketmq-client-go/v2, the version tests/interop/go/go.mod
pins) against Apache RocketMQ 5.4.0 and against ferrymq: the same scenario on both, and what the
user sees must be equal after normalise.py (tests/interop/README.md)."""

from __future__ import annotations

from typing import Any

import pytest

from .differential import PERM_RW, differential
from .go_runner import GoScenarios
from .reference import Target
from .test_java_scenarios import arrival_order_free

# the session fixtures start two clusters (minutes on a loaded 2-core machine) and the first test
# may build the Go program: room for that; a scenario itself is bounded by its own timeouts
pytestmark = pytest.mark.timeout(900)

SEND_OK = 0  # primitive.SendOK


@pytest.fixture(scope="session")
def go_client() -> GoScenarios:
    """The scenario program, built once per source digest (cached under ~/.cache)."""
    return GoScenarios()


@pytest.mark.parametrize(
    "mode",
    [
        "sync",
        "async",
        "oneway",
    ],
)
def test_send_tags_keys_properties(
    go_client: GoScenarios, targets: list[Target], mode: str
) -> None:
    topic = f"GoSend_{mode}"

    def check(obs: dict[str, Any]) -> None:
        # oneway: the scenario's sync fence send after the 4 (tests/interop/go/scenarios.go)
        stored = [m for m in obs["stored"] if m["body"] != "fence"]
        assert len(obs["stored"]) - len(stored) == (1 if mode == "oneway" else 0)
        assert len(stored) == 4
        assert [m["tags"] for m in sorted(stored, key=lambda m: m["body"])] == [
            "Tag0",
            "Tag1",
            "Tag0",
            "Tag1",
        ]
        if mode == "oneway":
            assert obs["sent"] == []  # SendOneWay returns nothing; the fence's result is not kept
        else:
            assert [r["status"] for r in obs["sent"]] == [SEND_OK] * 4
            assert [(r["queueId"], r["queueOffset"]) for r in obs["sent"]] == [
                (0, 0),
                (1, 0),
                (0, 1),
                (1, 1),
            ]

    differential(
        go_client,
        targets,
        "send",
        topics={topic: (2, PERM_RW)},
        topic=topic,
        group=f"PG_go_send_{mode}",
        mode=mode,
        count=4,
        check=check,
        prepare=arrival_order_free if mode in ("async", "oneway") else None,
    )


def test_push_consumer_tag_filter(go_client: GoScenarios, targets: list[Target]) -> None:
    topic = "GoTagFilter"

    def check(obs: dict[str, Any]) -> None:
        assert [m["tags"] for m in obs["received"]] == ["TagA", "TagC", "TagA", "TagC"]
        assert [m["body"] for m in obs["received"]] == ["tag-0", "tag-2", "tag-3", "tag-5"]

    differential(
        go_client,
        targets,
        "tag_filter",
        topics={topic: (1, PERM_RW)},
        topic=topic,
        group="CG_go_tags",
        check=check,
    )


def test_retry_later_then_dlq(go_client: GoScenarios, targets: list[Target]) -> None:
    topic = "GoRetry"
    group = "CG_go_retry"

    def check(obs: dict[str, Any]) -> None:
        assert [m["reconsumeTimes"] for m in obs["deliveries"]] == [0, 1]
        assert isinstance(obs["dlq"], list) and len(obs["dlq"]) == 1, obs["dlq"]
        assert obs["dlq"][0]["body"] == "always-fails"

    differential(
        go_client,
        targets,
        "retry_dlq",
        # the retry topic made up front, as upstream's broker makes it (1 queue, read-write):
        # rocketmq-client-go looks up a route it lacked only every 30 s, and it subscribes
        # %RETRY%group at start, before the first send-back would create it
        topics={topic: (1, PERM_RW), f"%RETRY%{group}": (1, PERM_RW)},
        topic=topic,
        group=group,
        check=check,
    )
