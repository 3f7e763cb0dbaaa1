"""GET_CONSUMER_RUNNING_INFO (307) bodies in upstream's ConsumerRunningInfo shape.

mqadmin ``consumerStatus`` analyses a group's running infos by upstream's ``PROP_*`` keys
(ConsumerRunningInfo.analyzeSubscription / analyzeProcessQueue): a body without
``PROP_CONSUME_TYPE`` or ``PROP_CONSUMER_START_TIMESTAMP`` makes it fail (NullPointerException,
NumberFormatException) after printing the table. The keys and the ProcessQueueInfo fields follow
upstream's ``MQClientInstance.consumerRunningInfo`` and ``DefaultMQPushConsumerImpl``.
Pure functions: the consumers pass in what they hold.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

from ferrymq.remoting.command import DEFAULT_VERSION_DESC

__all__ = [
    "PROP_CLIENT_VERSION",
    "PROP_CONSUMER_START_TIMESTAMP",
    "PROP_CONSUME_ORDERLY",
    "PROP_CONSUME_TYPE",
    "PROP_NAMESERVER_ADDR",
    "PROP_THREADPOOL_CORE_SIZE",
    "consumer_properties",
    "wall_clock_ms",
]

PROP_NAMESERVER_ADDR = "PROP_NAMESERVER_ADDR"
PROP_THREADPOOL_CORE_SIZE = "PROP_THREADPOOL_CORE_SIZE"
PROP_CONSUME_ORDERLY = "PROP_CONSUMEORDERLY"
PROP_CONSUME_TYPE = "PROP_CONSUME_TYPE"
PROP_CLIENT_VERSION = "PROP_CLIENT_VERSION"
PROP_CONSUMER_START_TIMESTAMP = "PROP_CONSUMER_START_TIMESTAMP"


def consumer_properties(
    *,
    consume_type: str,
    namesrv_addrs: Iterable[str],
    start_timestamp_ms: int,
    orderly: bool = False,
    thread_core_size: int | None = None,
    fields: Mapping[str, Any] | None = None,
) -> dict[str, str]:
    """The ``properties`` of a running info: the consumer's settings under upstream's field
    names (``fields``: messageModel, consumeFromWhere...), then the PROP_* keys."""
    props = {k: str(v) for k, v in (fields or {}).items()}
    # upstream joins the NameServer list with a trailing ';' each
    props[PROP_NAMESERVER_ADDR] = "".join(f"{addr};" for addr in namesrv_addrs)
    props[PROP_CONSUME_TYPE] = consume_type
    props[PROP_CLIENT_VERSION] = DEFAULT_VERSION_DESC
    props[PROP_CONSUMER_START_TIMESTAMP] = str(start_timestamp_ms)
    if consume_type == "CONSUME_PASSIVELY":  # push consumers only, as upstream
        props[PROP_CONSUME_ORDERLY] = "true" if orderly else "false"
        if thread_core_size is not None:
            props[PROP_THREADPOOL_CORE_SIZE] = str(thread_core_size)
    return props


def wall_clock_ms(monotonic_s: float, *, now_monotonic: float, now_ms: int) -> int:
    """A ``time.monotonic()`` instant as epoch milliseconds (upstream's timestamps are wall
    clock); 0 (never) stays 0."""
    if monotonic_s <= 0:
        return 0
    return now_ms - int((now_monotonic - monotonic_s) * 1000)


def now_pair() -> tuple[float, int]:
    """(monotonic seconds, epoch milliseconds) read together, for :func:`wall_clock_ms`."""
    return time.monotonic(), int(time.time() * 1000)
