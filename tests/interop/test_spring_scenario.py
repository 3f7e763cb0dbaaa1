"""Spring: rocketmq-spring-boot-starter 2.3.1 (RocketMQTemplate.syncSend and a
@RocketMQMessageListener) against Apache RocketMQ 5.4.0 and against ferrymq, the same Spring Boot
application on both, and what it sees must be equal (tests/interop/README.md)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from .differential import PERM_RW, differential
from .reference import Target
from .spring_runner import SpringScenarios

# two clusters (session fixtures) and two Spring Boot JVM starts on a loaded 2-core machine
pytestmark = pytest.mark.timeout(900)

COUNT = 4
# Spring's MessageHeaders become user properties: "id" is a random UUID per message and
# "timestamp" the client's clock; they say nothing about the broker
SPRING_HEADERS = ("id", "timestamp")


@pytest.fixture(scope="module")
def spring(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SpringScenarios]:
    yield SpringScenarios(tmp_path_factory.mktemp("spring"))


def without_spring_headers(obs: dict[str, Any]) -> dict[str, Any]:
    """Spring's headers as placeholders, and MAX_OFFSET (the queue's end when the listener's
    pull was answered: the listener runs while the messages are sent, so how many had arrived
    is timing; Apache 3 and ferrymq 5 in one run) only checked to lie past the message."""
    for m in obs["received"]:
        props = m["properties"]
        for key in SPRING_HEADERS:
            assert key in props, (key, props)
            props[key] = f"<spring {key}>"
        assert int(props["MAX_OFFSET"]) > m["queueOffset"], props
        props["MAX_OFFSET"] = "<past queueOffset>"
    return obs


def test_template_sync_send_and_listener(spring: SpringScenarios, targets: list[Target]) -> None:
    topic = "Spring_T"

    def check(obs: dict[str, Any]) -> None:
        assert all(s["status"] == "SEND_OK" for s in obs["sent"])
        assert obs["allReceived"]
        # the listener's selectorExpression takes TagS only
        assert [m["body"] for m in obs["received"]] == [f"spring-{i}" for i in range(COUNT)]

    differential(
        spring,
        targets,
        "spring",
        # one queue: syncSend picks queues round robin from a random start
        topics={topic: (1, PERM_RW)},
        topic=topic,
        group="CG_spring",
        count=COUNT,
        check=check,
        prepare=without_spring_headers,
    )
