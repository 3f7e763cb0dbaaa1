"""Every ConsumeQueue of the broker: ``consumequeue/<topic>/<queueId>/`` (upstream
``DefaultMessageStore.consumeQueueTable`` and its load/recover/flush/clean helpers)."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path

from ferrymq.store.consume_queue import ConsumeQueue

log = logging.getLogger(__name__)


class ConsumeQueueStore:
    def __init__(self, root: Path, mapped_file_size: int) -> None:
        self.root = root
        self.mapped_file_size = mapped_file_size
        self._table: dict[str, dict[int, ConsumeQueue]] = {}

    def load(self) -> None:
        """Map every ``<topic>/<queueId>`` directory found under the root."""
        if not self.root.is_dir():
            return
        for topic_dir in sorted(self.root.iterdir()):
            if not topic_dir.is_dir():
                continue
            for queue_dir in sorted(topic_dir.iterdir()):
                if not (queue_dir.is_dir() and queue_dir.name.isdigit()):
                    continue
                cq = ConsumeQueue(
                    topic_dir.name, int(queue_dir.name), self.root, self.mapped_file_size
                )
                cq.load()
                self._table.setdefault(topic_dir.name, {})[cq.queue_id] = cq

    def recover(self) -> None:
        for cq in self:
            cq.recover()

    def __iter__(self) -> Iterator[ConsumeQueue]:
        for queues in list(self._table.values()):
            yield from list(queues.values())

    def topics(self) -> list[str]:
        return list(self._table)

    def find(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        queues = self._table.get(topic)
        return queues.get(queue_id) if queues else None

    def find_or_create(self, topic: str, queue_id: int) -> ConsumeQueue:
        queues = self._table.get(topic)
        if queues is None:
            queues = self._table[topic] = {}
        cq = queues.get(queue_id)
        if cq is None:
            cq = queues[queue_id] = ConsumeQueue(topic, queue_id, self.root, self.mapped_file_size)
        return cq

    def queues_of(self, topic: str) -> dict[int, ConsumeQueue]:
        return dict(self._table.get(topic, {}))

    def max_physic_offset(self) -> int:
        """Highest CommitLog end offset indexed by any queue (-1 when none): where dispatch
        had certainly got to, since it runs in CommitLog order."""
        return max((cq.max_physic_offset for cq in self), default=-1)

    def topic_queue_table(self) -> dict[str, int]:
        """``topic-queueId`` -> next queue offset, for the CommitLog after recovery."""
        return {f"{cq.topic}-{cq.queue_id}": cq.max_offset_in_queue for cq in self}

    def truncate_dirty(self, phy_offset: int) -> None:
        for cq in self:
            cq.truncate_dirty_logic_files(phy_offset)

    def blank_units_in(self, ranges: Sequence[tuple[int, int]]) -> int:
        """Turn every unit pointing into a damaged CommitLog range into a blank unit (readers
        skip it; queue offsets stay aligned); returns how many were blanked."""
        if not ranges:
            return 0
        return sum(cq.blank_units_in(ranges) for cq in self)

    def correct_min_offsets(self, phy_min_offset: int) -> None:
        for cq in self:
            cq.correct_min_offset(phy_min_offset)

    def flush(self, least_pages: int) -> bool:
        """Blocking: run in a thread. True when every queue is on disk to its end."""
        clean = True
        for cq in self:
            cq.flush(least_pages)
            mfq = cq.mapped_file_queue
            clean = clean and mfq.flushed_where >= mfq.get_max_offset()
        return clean

    def delete_expired(self, commit_log_min_offset: int) -> int:
        return sum(cq.delete_expired_files(commit_log_min_offset) for cq in self)

    def delete_topic(self, topic: str) -> bool:
        queues = self._table.pop(topic, None)
        if queues is None:
            return False
        for cq in queues.values():
            cq.destroy()
        shutil.rmtree(self.root / topic, ignore_errors=True)
        return True

    def destroy_all(self) -> None:
        for topic in list(self._table):
            self.delete_topic(topic)
        shutil.rmtree(self.root, ignore_errors=True)

    def shutdown(self) -> None:
        for cq in self:
            cq.mapped_file_queue.shutdown()
