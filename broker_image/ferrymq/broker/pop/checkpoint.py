"""POP checkpoint and ack records (upstream ``PopCheckPoint``, ``AckMsg``, ``BatchAckMsg``) and the
BATCH_ACK_MESSAGE body (``BatchAckMessageRequestBody`` / ``BatchAck``), pure.

A checkpoint (tag ``ck``) says: at ``pt`` the group ``c`` popped ``n`` messages of ``t``/``q``
starting at queue offset ``so``, at offsets ``so + d[i]``, invisible for ``it`` ms. An ack (tag
``ack``, ``ao`` one offset) or batch ack (tag ``bAck``, ``aol`` several) names its checkpoint by
``(t, c, q, so, pt)``. Both are stored as JSON with upstream's short field names in the revive
topic ``rmq_sys_REVIVE_LOG_<cluster>``, so they are in the CommitLog: durable as any message and
replicated to slaves with it.

``BatchAck.b`` is a Java ``BitSet`` that fastjson writes as the base64 of ``toByteArray()``
(little-endian bytes, bit i of the set = bit ``i % 8`` of byte ``i // 8``).
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

__all__ = [
    "ACK_TAG",
    "BATCH_ACK_TAG",
    "CK_TAG",
    "AckRecord",
    "BatchAckEntry",
    "CheckPoint",
    "CheckpointError",
    "bitset_decode",
    "bitset_encode",
    "parse_batch_ack_body",
    "revive_topic",
]

CK_TAG = "ck"
ACK_TAG = "ack"
BATCH_ACK_TAG = "bAck"
REVIVE_GROUP = "CID_RMQ_SYS_REVIVE_GROUP"  # the revive topic's progress, as upstream


class CheckpointError(ValueError):
    """A checkpoint, ack or batch-ack body that does not parse."""


def revive_topic(cluster: str) -> str:
    """Upstream PopAckConstants.buildClusterReviveTopic."""
    return f"rmq_sys_REVIVE_LOG_{cluster}"


def _get(obj: dict[str, Any], short: str, long: str, default: Any = None) -> Any:
    if short in obj:
        return obj[short]
    return obj.get(long, default)


@dataclass(slots=True)
class CheckPoint:
    """One pop of one queue: what is in flight until acked or revived."""

    topic: str
    group: str
    queue_id: int
    start_offset: int
    pop_time: int
    invisible_time: int
    diffs: list[int]
    broker_name: str
    bitmap: int = 0  # bit i set: the message at start_offset + diffs[i] is acked
    revive_offset: int = -1  # where this CK sits in its revive queue (memory only)
    revive_qid: int = 0  # its revive queue (memory only)

    @property
    def key(self) -> tuple[str, str, int, int, int]:
        return (self.topic, self.group, self.queue_id, self.start_offset, self.pop_time)

    @property
    def revive_time(self) -> int:
        return self.pop_time + self.invisible_time

    @property
    def num(self) -> int:
        return len(self.diffs)

    def offsets(self) -> list[int]:
        return [self.start_offset + d for d in self.diffs]

    def ack(self, queue_offset: int) -> bool:
        """Set the bit of ``queue_offset``; False when the offset is not in this checkpoint."""
        diff = queue_offset - self.start_offset
        try:
            index = self.diffs.index(diff)
        except ValueError:
            return False
        self.bitmap |= 1 << index
        return True

    @property
    def all_acked(self) -> bool:
        return self.bitmap == (1 << len(self.diffs)) - 1

    def unacked_offsets(self) -> list[int]:
        return [self.start_offset + d for i, d in enumerate(self.diffs) if not self.bitmap >> i & 1]

    def encode(self) -> bytes:
        return orjson.dumps(
            {
                "so": self.start_offset,
                "pt": self.pop_time,
                "it": self.invisible_time,
                "bm": 0,
                "n": len(self.diffs),
                "q": self.queue_id,
                "t": self.topic,
                "c": self.group,
                "ro": 0,
                "d": self.diffs,
                "bn": self.broker_name,
            }
        )

    @classmethod
    def decode(cls, data: bytes | str) -> CheckPoint:
        try:
            obj = orjson.loads(data)
            if not isinstance(obj, dict):
                raise CheckpointError("checkpoint is not a JSON object")
            start = int(_get(obj, "so", "startOffset"))
            diffs = _get(obj, "d", "queueOffsetDiff") or [0] * int(_get(obj, "n", "num", 1))
            return cls(
                topic=str(_get(obj, "t", "topic")),
                group=str(_get(obj, "c", "cid")),
                queue_id=int(_get(obj, "q", "queueId")),
                start_offset=start,
                pop_time=int(_get(obj, "pt", "popTime")),
                invisible_time=int(_get(obj, "it", "invisibleTime")),
                diffs=[int(d) for d in diffs],
                broker_name=str(_get(obj, "bn", "brokerName", "")),
            )
        except (orjson.JSONDecodeError, TypeError, ValueError) as exc:
            raise CheckpointError(f"unreadable checkpoint: {exc}") from None


@dataclass(frozen=True, slots=True)
class AckRecord:
    """An ack (one offset) or a batch ack (several) of one checkpoint."""

    topic: str
    group: str
    queue_id: int
    start_offset: int
    pop_time: int
    broker_name: str
    offsets: tuple[int, ...]

    @property
    def ck_key(self) -> tuple[str, str, int, int, int]:
        return (self.topic, self.group, self.queue_id, self.start_offset, self.pop_time)

    @property
    def tag(self) -> str:
        return ACK_TAG if len(self.offsets) == 1 else BATCH_ACK_TAG

    def encode(self) -> bytes:
        obj: dict[str, Any] = {
            "ao": self.offsets[0] if len(self.offsets) == 1 else -1,
            "so": self.start_offset,
            "c": self.group,
            "t": self.topic,
            "q": self.queue_id,
            "pt": self.pop_time,
            "bn": self.broker_name,
        }
        if len(self.offsets) != 1:
            obj["aol"] = list(self.offsets)
        return orjson.dumps(obj)

    @classmethod
    def decode(cls, data: bytes | str) -> AckRecord:
        try:
            obj = orjson.loads(data)
            if not isinstance(obj, dict):
                raise CheckpointError("ack is not a JSON object")
            many = _get(obj, "aol", "ackOffsetList")
            offsets = tuple(int(o) for o in many) if many else (int(_get(obj, "ao", "ackOffset")),)
            return cls(
                topic=str(_get(obj, "t", "topic")),
                group=str(_get(obj, "c", "consumerGroup")),
                queue_id=int(_get(obj, "q", "queueId")),
                start_offset=int(_get(obj, "so", "startOffset")),
                pop_time=int(_get(obj, "pt", "popTime")),
                broker_name=str(_get(obj, "bn", "brokerName", "")),
                offsets=offsets,
            )
        except (orjson.JSONDecodeError, TypeError, ValueError) as exc:
            raise CheckpointError(f"unreadable ack: {exc}") from None


def bitset_encode(bits: Iterable[int]) -> str:
    """Java ``BitSet.toByteArray()`` as fastjson writes it (base64)."""
    indexes = sorted(set(bits))
    if not indexes:
        return ""
    raw = bytearray(indexes[-1] // 8 + 1)
    for i in indexes:
        raw[i // 8] |= 1 << (i % 8)
    return base64.b64encode(bytes(raw)).decode()


def bitset_decode(value: Any) -> list[int]:
    """The set bits of a fastjson-written BitSet (base64 string, or a list of byte values)."""
    if value is None or value == "":
        return []
    if isinstance(value, str):
        try:
            raw = base64.b64decode(value, validate=True)
        except ValueError as exc:
            raise CheckpointError(f"bitSet is not base64: {exc}") from None
    elif isinstance(value, list):
        raw = bytes(int(b) & 0xFF for b in value)
    else:
        raise CheckpointError(f"bitSet has an unexpected form: {type(value).__name__}")
    return [i * 8 + j for i, byte in enumerate(raw) for j in range(8) if byte >> j & 1]


@dataclass(frozen=True, slots=True)
class BatchAckEntry:
    """One ``BatchAck`` of a BATCH_ACK_MESSAGE body."""

    group: str
    topic: str
    retry: str
    start_offset: int
    queue_id: int
    revive_qid: int
    pop_time: int
    invisible_time: int
    bits: Sequence[int] = field(default_factory=tuple)


def parse_batch_ack_body(obj: Any) -> tuple[str | None, list[BatchAckEntry]]:
    """``{"brokerName", "acks": [BatchAck]}`` -> (brokerName, entries); raises CheckpointError."""
    if not isinstance(obj, dict):
        raise CheckpointError("BatchAckMessageRequestBody is not a JSON object")
    acks = obj.get("acks") or []
    if not isinstance(acks, list):
        raise CheckpointError("BatchAckMessageRequestBody.acks is not a list")
    out: list[BatchAckEntry] = []
    try:
        for ack in acks:
            if not isinstance(ack, dict):
                raise CheckpointError("a BatchAck is not a JSON object")
            out.append(
                BatchAckEntry(
                    group=str(_get(ack, "c", "consumerGroup")),
                    topic=str(_get(ack, "t", "topic")),
                    retry=str(_get(ack, "r", "retry", "0")),
                    start_offset=int(_get(ack, "so", "startOffset")),
                    queue_id=int(_get(ack, "q", "queueId")),
                    revive_qid=int(_get(ack, "rq", "reviveQueueId")),
                    pop_time=int(_get(ack, "pt", "popTime")),
                    invisible_time=int(_get(ack, "it", "invisibleTime")),
                    bits=tuple(bitset_decode(_get(ack, "b", "bitSet"))),
                )
            )
    except (TypeError, ValueError) as exc:
        if isinstance(exc, CheckpointError):
            raise
        raise CheckpointError(f"unreadable BatchAck: {exc}") from None
    broker = obj.get("brokerName")
    return (str(broker) if broker is not None else None), out
