"""Orderly (FIFO) POP state per (topic, group, queue) (upstream ``ConsumerOrderInfoManager``), pure.

An orderly pop hands out a queue's messages from its committed offset and blocks the queue while
any of them is un-acked and still invisible; the same ``attemptId`` may pop them again (a client
retrying a lost response). Once invisible time passes, the same offsets are handed out again with
a count one higher (the consumer's reconsumeTimes). An ack commits the offset and moves the
consumer offset to the first un-acked one; no checkpoint is written and nothing is revived.

The table is saved as ``config/consumerOrderInfo.json`` (as upstream, every few seconds and at
shutdown): after a restart an orderly batch stays invisible until its time and keeps its counts.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import orjson

__all__ = ["OrderInfo", "OrderInfoManager"]

OrderKey = tuple[str, str, int]


@dataclass(slots=True)
class OrderInfo:
    pop_time: int
    invisible_time: int
    offsets: list[int]
    attempt_id: str | None
    next_visible: dict[int, int] = field(default_factory=dict)
    counts: dict[int, int] = field(default_factory=dict)
    committed: set[int] = field(default_factory=set)

    def uncommitted(self) -> list[int]:
        return [o for o in self.offsets if o not in self.committed]


class OrderInfoManager:
    def __init__(self) -> None:
        self.table: dict[OrderKey, OrderInfo] = {}
        self.dirty = False

    def snapshot(self) -> bytes:
        rows = [
            {"topic": t, "group": g, "queueId": q, **_plain(asdict(info))}
            for (t, g, q), info in self.table.items()
        ]
        return orjson.dumps({"table": rows})

    def restore(self, data: bytes) -> None:
        """Load a snapshot; ValueError when it does not parse."""
        try:
            rows = orjson.loads(data)["table"]
            table = {
                (str(r["topic"]), str(r["group"]), int(r["queueId"])): OrderInfo(
                    pop_time=int(r["pop_time"]),
                    invisible_time=int(r["invisible_time"]),
                    offsets=[int(o) for o in r["offsets"]],
                    attempt_id=r.get("attempt_id"),
                    next_visible={int(k): int(v) for k, v in r["next_visible"].items()},
                    counts={int(k): int(v) for k, v in r["counts"].items()},
                    committed={int(o) for o in r["committed"]},
                )
                for r in rows
            }
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"consumerOrderInfo is unreadable: {exc}") from None
        self.table = table

    def check_block(
        self, attempt_id: str | None, topic: str, group: str, queue_id: int, now_ms: int
    ) -> bool:
        """True when the queue is blocked for this pop (upstream checkBlock)."""
        info = self.table.get((topic, group, queue_id))
        if info is None:
            return False
        pending = info.uncommitted()
        if not pending:
            return False
        if attempt_id and attempt_id == info.attempt_id:
            return False
        return any(info.next_visible.get(o, 0) > now_ms for o in pending)

    def update(
        self,
        attempt_id: str | None,
        topic: str,
        group: str,
        queue_id: int,
        pop_time: int,
        invisible_time: int,
        offsets: list[int],
    ) -> dict[int, int]:
        """Record a pop of ``offsets``; returns each offset's pop count before this one (0 the
        first time: the message's reconsumeTimes)."""
        key = (topic, group, queue_id)
        old = self.table.get(key)
        counts: dict[int, int] = {}
        for offset in offsets:
            if old is not None and offset in old.counts and offset not in old.committed:
                counts[offset] = old.counts[offset] + 1
            else:
                counts[offset] = 0
        info = OrderInfo(
            pop_time=pop_time,
            invisible_time=invisible_time,
            offsets=list(offsets),
            attempt_id=attempt_id,
            next_visible={o: pop_time + invisible_time for o in offsets},
            counts=counts,
        )
        self.table[key] = info
        self.dirty = True
        return counts

    def commit_and_next(
        self, topic: str, group: str, queue_id: int, offset: int, pop_time: int
    ) -> int:
        """Ack ``offset``: the consumer offset to commit next; -2 when the handle is stale (another
        pop since), -1 when ``offset`` was not handed out by that pop."""
        info = self.table.get((topic, group, queue_id))
        if info is None:
            return offset + 1
        if info.pop_time != pop_time:
            return -2
        if offset not in info.offsets:
            return -1
        info.committed.add(offset)
        self.dirty = True
        pending = info.uncommitted()
        if pending:
            return pending[0]
        del self.table[(topic, group, queue_id)]
        return info.offsets[-1] + 1

    def update_next_visible(
        self, topic: str, group: str, queue_id: int, offset: int, pop_time: int, next_ms: int
    ) -> bool:
        info = self.table.get((topic, group, queue_id))
        if info is None or info.pop_time != pop_time or offset not in info.offsets:
            return False
        info.next_visible[offset] = next_ms
        self.dirty = True
        return True

    def remove_group(self, group: str) -> None:
        for key in [k for k in self.table if k[1] == group]:
            del self.table[key]


def _plain(row: dict[str, Any]) -> dict[str, Any]:
    """JSON-ready: int keys as strings, sets as sorted lists."""
    out = dict(row)
    out["next_visible"] = {str(k): v for k, v in row["next_visible"].items()}
    out["counts"] = {str(k): v for k, v in row["counts"].items()}
    out["committed"] = sorted(row["committed"])
    return out
