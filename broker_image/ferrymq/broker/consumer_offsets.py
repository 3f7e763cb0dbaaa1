"""ConsumerOffsetManager: committed offsets per ``topic@group`` and queue (consumerOffset.json).

Pure in-memory table; the app saves ``snapshot()`` every flushConsumerOffsetInterval (5 s) and on
shutdown, in a thread.
"""

from __future__ import annotations

import time

import orjson

from ferrymq.remoting.bodies import BodyError, ConsumerOffsetSerializeWrapper

TOPIC_GROUP_SEPARATOR = "@"


def offset_key(topic: str, group: str) -> str:
    return f"{topic}{TOPIC_GROUP_SEPARATOR}{group}"


def split_key(key: str) -> tuple[str, str] | None:
    topic, sep, group = key.partition(TOPIC_GROUP_SEPARATOR)
    return (topic, group) if sep else None


class ConsumerOffsetManager:
    def __init__(self) -> None:
        self.offset_table: dict[str, dict[int, int]] = {}
        # upstream pullOffsetTable: the next offset handed out by a pull (memory only)
        self.pull_offset_table: dict[str, dict[int, int]] = {}
        self.dirty = False
        # moves with every change of offset_table: a master's HA metadata notices carry it so
        # slaves copy offsets at once (ha/protocol.py); starts from a clock stamp so a restarted
        # master never repeats the value a slave saw before the restart
        self.version = time.time_ns()

    def commit_pull_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        key = offset_key(topic, group)
        table = self.pull_offset_table.get(key)
        if table is None:
            table = self.pull_offset_table[key] = {}
        table[queue_id] = offset

    def query_pull_offsets(self, group: str, topic: str) -> dict[int, int]:
        return dict(self.pull_offset_table.get(offset_key(topic, group), {}))

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        table = self.offset_table.setdefault(offset_key(topic, group), {})
        if table.get(queue_id) != offset:
            table[queue_id] = offset
            self.dirty = True
            self.version += 1

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, or -1 when the group never committed for this queue."""
        table = self.offset_table.get(offset_key(topic, group))
        if table is None:
            return -1
        return table.get(queue_id, -1)

    def query_group_topic(self, group: str, topic: str) -> dict[int, int]:
        return dict(self.offset_table.get(offset_key(topic, group), {}))

    def topics_of_group(self, group: str) -> set[str]:
        out = set()
        for key in self.offset_table:
            parts = split_key(key)
            if parts is not None and parts[1] == group:
                out.add(parts[0])
        return out

    def groups_of_topic(self, topic: str) -> set[str]:
        out = set()
        for key in self.offset_table:
            parts = split_key(key)
            if parts is not None and parts[0] == topic:
                out.add(parts[1])
        return out

    def remove_topic(self, topic: str) -> None:
        for key in list(self.offset_table):
            parts = split_key(key)
            if parts is not None and parts[0] == topic:
                del self.offset_table[key]
                self.pull_offset_table.pop(key, None)
                self.dirty = True
                self.version += 1

    def remove_group(self, group: str) -> None:
        for key in list(self.offset_table):
            parts = split_key(key)
            if parts is not None and parts[1] == group:
                del self.offset_table[key]
                self.pull_offset_table.pop(key, None)
                self.dirty = True
                self.version += 1

    def wrapper(self) -> ConsumerOffsetSerializeWrapper:
        return ConsumerOffsetSerializeWrapper(
            offset_table={k: dict(v) for k, v in self.offset_table.items()}
        )

    def snapshot(self) -> bytes:
        return orjson.dumps(self.wrapper().to_json_obj(), option=orjson.OPT_INDENT_2)

    def restore(self, data: bytes) -> None:
        try:
            wrapper = ConsumerOffsetSerializeWrapper.decode(data)
        except BodyError as exc:
            raise ValueError(f"consumerOffset.json unreadable: {exc}") from None
        self.offset_table = {k: dict(v) for k, v in wrapper.offset_table.items()}
        self.version += 1
