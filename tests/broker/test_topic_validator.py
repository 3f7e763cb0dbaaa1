"""The topic rules broker, CLI and client now share (ferrymq.topic_validator)."""

from __future__ import annotations

import pytest
from ferrymq.broker import topic_config
from ferrymq.topic_validator import (
    SYSTEM_TOPIC_SET,
    check_topic_name,
    dlq_topic,
    is_system_topic,
    retry_topic,
)


@pytest.mark.parametrize(
    "topic",
    [
        "TBW102",
        "SCHEDULE_TOPIC_XXXX",
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRACE_TOPIC",
        "OFFSET_MOVED_EVENT",
        "BenchmarkTest",
        "rmq_sys_wheel_timer",
    ],
)
def test_system_topics_as_upstream(topic: str) -> None:
    assert is_system_topic(topic)


@pytest.mark.parametrize("topic", ["orders", "%RETRY%g", "RMQ_SYS_", "tbw102"])
def test_user_topics_are_not_system(topic: str) -> None:
    assert not is_system_topic(topic)


def test_broker_uses_the_shared_rules() -> None:
    assert topic_config.is_system_topic is is_system_topic
    assert topic_config.check_topic_name is check_topic_name
    assert len(SYSTEM_TOPIC_SET) == 9
    assert retry_topic("g") == "%RETRY%g"
    assert dlq_topic("g") == "%DLQ%g"
    assert check_topic_name("a b") is not None
    assert check_topic_name("x" * 128) is not None
    assert check_topic_name("ok_topic-1%|") is None
