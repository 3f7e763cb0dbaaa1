"""The one place where observations from Apache RocketMQ and from ferrymq are made comparable.

Only what must differ between two brokers is evened out: host:port addresses, message ids (and
the store positions they encode), and timestamps. Ids are replaced by ``<id:N>`` numbered in
order of first appearance, so "the reply's CORRELATION_ID equals the request's" still compares.
Everything else (codes, remarks, properties, queue ids and offsets, sizes, order) must be equal.
"""

from __future__ import annotations

import re
from typing import Any

ADDR = re.compile(r"/?\b\d{1,3}(?:\.\d{1,3}){3}:\d+\b")
HEX_ID = re.compile(r"\b[0-9A-F]{32}\b")
COST = re.compile(r"cost \[?\d+\]? ?ms", re.IGNORECASE)
# the client's own measure of a timeout: "wait response on the channel ... timeout, 4995(ms)"
WAITED = re.compile(r"timeout, \d+\(ms\)")

# ids: client-generated unique keys, broker offset ids, transaction ids, client ids
ID_KEYS = frozenset(
    {
        "msgId",
        "offsetMsgId",
        "transactionId",
        "UNIQ_KEY",
        "__transactionId__",
        "ORIGIN_MESSAGE_ID",
        "CORRELATION_ID",
        "REPLY_TO_CLIENT",
        "TRAN_PREPARED_QUEUE_OFFSET",
    }
)
# store positions: where in the CommitLog a message landed depends on all that broker stored
POSITION_KEYS = frozenset({"commitLogOffset", "preparedTransactionOffset"})
TIME_KEYS = frozenset(
    {
        "CONSUME_START_TIME",
        "TIMER_OUT_MS",
        "TIMER_DELIVER_MS",
        "MSG_TIMESTAMP",
        "ARRIVE_TIME",
        "PUSH_REPLY_TIME",
    }
)


def _is_time_key(key: str) -> bool:
    return key in TIME_KEYS or key.endswith("Timestamp") or key.endswith("_TIMESTAMP")


class Normaliser:
    def __init__(self) -> None:
        self.ids: dict[str, str] = {}

    def _id(self, value: str) -> str:
        # a batch's msgId is the ids joined by commas
        parts = value.split(",")
        out = []
        for part in parts:
            if part not in self.ids:
                self.ids[part] = f"<id:{len(self.ids) + 1}>"
            out.append(self.ids[part])
        return ",".join(out)

    def text(self, value: str) -> str:
        value = ADDR.sub("<addr>", value)
        value = HEX_ID.sub(lambda m: self._id(m.group(0)), value)
        value = WAITED.sub("timeout, <ms>", value)
        return COST.sub("cost <ms>", value)

    def value(self, key: str | None, value: Any) -> Any:
        if isinstance(value, dict):
            return {k: self.value(k, v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.value(None, v) for v in value]
        if key is not None and value is not None:
            if key in ID_KEYS:
                return self._id(str(value))
            if key in POSITION_KEYS:
                return "<position>"
            if _is_time_key(key):
                return "<time>"
        if isinstance(value, str):
            return self.text(value)
        return value


def normalise(observation: Any) -> Any:
    """``observation`` with addresses, ids, store positions and timestamps replaced."""
    return Normaliser().value(None, observation)
