"""Checks on request fields (upstream ``GrpcValidator``), raising the v2 code upstream answers."""

from __future__ import annotations

import re

from ferrymq.mixall import CID_RMQ_SYS_PREFIX
from ferrymq.proxy.errors import Code, ProxyError
from ferrymq.topic_validator import check_topic_name, is_system_topic

_GROUP_PATTERN = re.compile(r"^[%|a-zA-Z0-9_-]+$")
GROUP_MAX_LENGTH = 255


def validate_topic(name: str) -> None:
    reason = check_topic_name(name)
    if reason is not None:
        raise ProxyError(Code.ILLEGAL_TOPIC, reason)
    if is_system_topic(name):
        raise ProxyError(Code.ILLEGAL_TOPIC, "cannot access system topic")


def validate_group(name: str) -> None:
    if not name.strip():
        raise ProxyError(Code.ILLEGAL_CONSUMER_GROUP, "the specified group is blank")
    if len(name) > GROUP_MAX_LENGTH:
        raise ProxyError(
            Code.ILLEGAL_CONSUMER_GROUP, f"the specified group is longer than {GROUP_MAX_LENGTH}"
        )
    if not _GROUP_PATTERN.match(name):
        raise ProxyError(
            Code.ILLEGAL_CONSUMER_GROUP,
            f"the specified group[{name}] contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$",
        )
    if name.startswith(CID_RMQ_SYS_PREFIX):
        raise ProxyError(Code.ILLEGAL_CONSUMER_GROUP, "cannot use system consumer group")


def validate_invisible_time(ms: int, minimum: int, maximum: int) -> None:
    if ms < minimum:
        raise ProxyError(
            Code.ILLEGAL_INVISIBLE_TIME, f"the invisibleTime is too small. min is {minimum}"
        )
    if maximum > 0 and ms > maximum:
        raise ProxyError(
            Code.ILLEGAL_INVISIBLE_TIME, f"the invisibleTime is too large. max is {maximum}"
        )
