"""Reading back what a broker stored: one queue pulled to its end by raw PULL_MESSAGE requests.

Scenarios check stored messages this way (not through a consumer) so that no offset is committed
and no rebalance decides what is read; each passes its own reader group so broker-side
statistics tell the checkers apart.
"""

from __future__ import annotations

from ferrymq.client.broker_api import BrokerApi, PullStatus
from ferrymq.message import MessageExt
from ferrymq.remoting import headers
from ferrymq.remoting.headers import PULL_FLAG_SUBSCRIPTION


async def pull_queue(
    api: BrokerApi,
    addr: str,
    topic: str,
    queue_id: int,
    offset: int = 0,
    *,
    group: str,
    limit: int | None = None,
    timeout: float = 5.0,
) -> list[MessageExt]:
    """Queue ``queue_id`` of ``topic`` on ``addr`` from ``offset`` to its end (or ``limit``)."""
    out: list[MessageExt] = []
    while limit is None or len(out) < limit:
        header = headers.PullMessageRequestHeader(
            consumer_group=group,
            topic=topic,
            queue_id=queue_id,
            queue_offset=offset,
            max_msg_nums=32,
            sys_flag=PULL_FLAG_SUBSCRIPTION,
            subscription="*",
            expression_type="TAG",
        )
        result = await api.pull_message(addr, header, timeout)
        if result.status is not PullStatus.FOUND or not result.messages:
            return out
        out.extend(result.messages)
        offset = result.next_begin_offset
    return out[:limit]
