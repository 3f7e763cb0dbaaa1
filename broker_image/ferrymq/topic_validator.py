"""Topic names and rules shared by broker, store, client and CLI (upstream TopicValidator + MixAll).

A leaf module: it imports nothing from ferrymq, so every layer (store included) can use it.
"""

from __future__ import annotations

import re

__all__ = [
    "AUTO_CREATE_TOPIC_KEY_TOPIC",
    "BENCHMARK_TOPIC",
    "DLQ_GROUP_TOPIC_PREFIX",
    "OFFSET_MOVED_EVENT",
    "RETRY_GROUP_TOPIC_PREFIX",
    "RMQ_SYS_NAME_PREFIX",
    "RMQ_SYS_TRACE_TOPIC",
    "RMQ_SYS_TRANS_HALF_TOPIC",
    "RMQ_SYS_TRANS_OP_HALF_TOPIC",
    "SCHEDULE_TOPIC",
    "SELF_TEST_TOPIC",
    "SYSTEM_TOPIC_PREFIX",
    "SYSTEM_TOPIC_SET",
    "TOPIC_MAX_LENGTH",
    "TOPIC_NAME_PATTERN",
    "TRANS_CHECK_MAX_TIME_TOPIC",
    "check_topic_name",
    "dlq_topic",
    "is_system_topic",
    "retry_topic",
]

AUTO_CREATE_TOPIC_KEY_TOPIC = "TBW102"
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
BENCHMARK_TOPIC = "BenchmarkTest"
RMQ_SYS_TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
RMQ_SYS_TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
RMQ_SYS_TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRANS_CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
SELF_TEST_TOPIC = "SELF_TEST_TOPIC"
OFFSET_MOVED_EVENT = "OFFSET_MOVED_EVENT"

# upstream MixAll
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"

# upstream TopicValidator.SYSTEM_TOPIC_PREFIX / getSystemTopicSet()
SYSTEM_TOPIC_PREFIX = "rmq_sys_"
SYSTEM_TOPIC_SET = frozenset(
    {
        AUTO_CREATE_TOPIC_KEY_TOPIC,
        SCHEDULE_TOPIC,
        BENCHMARK_TOPIC,
        RMQ_SYS_TRANS_HALF_TOPIC,
        RMQ_SYS_TRACE_TOPIC,
        RMQ_SYS_TRANS_OP_HALF_TOPIC,
        TRANS_CHECK_MAX_TIME_TOPIC,
        SELF_TEST_TOPIC,
        OFFSET_MOVED_EVENT,
    }
)

# Not an upstream constant: the spelling upstream's own system topics share (RMQ_SYS_TRANS_HALF_TOPIC,
# RMQ_SYS_TRACE_TOPIC, ...); upstream reserves only ``rmq_sys_`` as a prefix, while ferrymq's
# operator (and its lag sampler) also treat every ``RMQ_SYS_`` name as the broker's.
RMQ_SYS_NAME_PREFIX = "RMQ_SYS_"

# the topic name is stored in a record with a signed one-byte length
TOPIC_MAX_LENGTH = 127
TOPIC_NAME_PATTERN = re.compile(r"^[%|a-zA-Z0-9_-]+$")


def is_system_topic(topic: str) -> bool:
    """Upstream TopicValidator.isSystemTopic: a named system topic or one under ``rmq_sys_``."""
    return topic in SYSTEM_TOPIC_SET or topic.startswith(SYSTEM_TOPIC_PREFIX)


def check_topic_name(topic: str) -> str | None:
    """None when ``topic`` is a legal name, else the reason (upstream TopicValidator)."""
    if not topic or not topic.strip():
        return "the topic name is empty"
    if len(topic.encode()) > TOPIC_MAX_LENGTH:
        return f"the topic name is longer than {TOPIC_MAX_LENGTH} bytes: {topic[:40]}..."
    if not TOPIC_NAME_PATTERN.match(topic):
        return f"the topic name {topic!r} contains illegal characters; allowed: [%|a-zA-Z0-9_-]"
    return None


def retry_topic(group: str) -> str:
    return RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    return DLQ_GROUP_TOPIC_PREFIX + group


def reply_topic(cluster: str) -> str:
    """Where request-reply stores replies (upstream MixAll.REPLY_TOPIC_POSTFIX); the requester
    names it from the request's CLUSTER property."""
    return f"{cluster}_REPLY_TOPIC"
