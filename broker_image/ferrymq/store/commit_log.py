"""The CommitLog append path (upstream ``CommitLog.asyncPutMessage`` +
``DefaultAppendMessageCallback``), and raw reads by physical offset.

Appends are synchronous and run on the event loop, which serialises them (the upstream
``putMessageLock``). Each append copies into the mapping once: a single record is packed and
joined with its body, topic and properties; a SEND_BATCH body whose items share one shape is
parsed and encoded with one compiled struct call each (per-shape plans, cached); any other
batch body is encoded record by record and joined. When a record or batch (plus the 8-byte
blank minimum) does not fit, the rest of the file becomes a blank record and the append goes to
a new file named by its offset.

``topic_queue_table`` holds the next queue offset of every ``topic-queueId``; recovery rebuilds it
from the ConsumeQueues. Prepared and rolled-back transactional messages get queue offset 0 and do
not advance it (they never reach a ConsumeQueue), as upstream.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from collections.abc import Sequence
from itertools import repeat
from operator import and_
from pathlib import Path
from typing import Any

from ferrymq.message import (
    Message,
    MessageInner,
    MessageSysFlag,
    encode_properties,
    pack_host,
)
from ferrymq.store import record as rec
from ferrymq.store import record_layout as layout
from ferrymq.store.mapped_file import (
    RESERVE_STEP,
    MappedFile,
    SelectMappedBufferResult,
    StoreFileError,
)
from ferrymq.store.mapped_file_queue import MappedFileQueue
from ferrymq.store.record_layout import HOST_V6_FLAGS, head_layout
from ferrymq.store.results import AppendMessageResult, AppendMessageStatus

log = logging.getLogger(__name__)

# prefetch this much of the CommitLog ahead of the write position, when less than _WARM_LOW is left
_WARM_CHUNK = 8 << 20
_WARM_LOW = 4 << 20

_HOST_BITS = (0, layout.BORNHOST_V6_FLAG, layout.STOREHOSTADDRESS_V6_FLAG, HOST_V6_FLAGS)
_NOT_HOST_BITS = ~HOST_V6_FLAGS
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
# One SEND_BATCH item (upstream MessageDecoder.encodeMessage): TOTALSIZE, MAGICCODE, BODYCRC,
# FLAG, BODYLEN, then BODY, PROPERTIESLEN i16, PROPERTIES.
_BATCH_ITEM = layout.BATCH_ITEM_LAYOUT.struct
_PROPS_LEN = struct.Struct(">" + layout.PROPERTIES_LEN_CODE)
_ITEM_FIXED = _BATCH_ITEM.size + _PROPS_LEN.size  # an item's size without BODY and PROPERTIES
# Per head layout (by SYSFLAG's host bits): SYSFLAG .. PREPAREDTRANSACTIONOFFSET, the head
# fields fixed for a whole batch ...
_HEAD_CONSTANT = {
    bits: head_layout(bits).span("SYSFLAG", "PREPAREDTRANSACTIONOFFSET") for bits in _HOST_BITS
}
# ... and the whole record head in one call: TOTALSIZE .. PHYSICALOFFSET, the batch's constant
# bytes, BODYLEN.
_HEAD_FULL = {
    bits: head_layout(bits).struct_of(raw=(("SYSFLAG", "PREPAREDTRANSACTIONOFFSET"),))
    for bits in _HOST_BITS
}
_SIZE_MAGIC = rec.BLANK_HEAD  # TOTALSIZE, MAGICCODE
# A batch whose items all have the same lengths is parsed and encoded with one struct call each
# (no per-record Python code); these bound the compiled structs kept per CommitLog (a plan
# costs about 0.6 KiB per item, so the cache stays under ~5 MiB).
_UNIFORM_MAX_ITEMS = 1024
_UNIFORM_CACHE_MAX = 32
_UNIFORM_CACHE_ITEMS = 8192
_CRC_MASK = 0x7FFFFFFF
_BLANK_MIN = rec.END_FILE_MIN_BLANK_LENGTH
# Bound once: the single-message append looks these up per message.
_pack_record_head = rec.RECORD_HEAD.pack
_pack_props_len = _PROPS_LEN.pack
_crc32 = rec.crc32
_MAGIC = rec.MESSAGE_MAGIC_CODE
_MAX_PROPERTIES = rec.MAX_PROPERTIES_BYTES
_MIN_RECORD_1 = rec.MIN_RECORD_SIZE - 1  # + len(TOPICLEN + TOPIC) gives the fixed part
# NOT (0) and COMMIT (8) take a queue slot, PREPARED (4) and ROLLBACK (12) do not: bit 4 decides.
_NO_SLOT_BIT = MessageSysFlag.TRANSACTION_PREPARED_TYPE


class AppendError(Exception):
    """A message that cannot be stored as given; ``status`` says which rule it breaks."""

    def __init__(self, status: AppendMessageStatus, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def queue_key(topic: str, queue_id: int) -> str:
    return f"{topic}-{queue_id}"


def takes_queue_offset(sys_flag: int) -> bool:
    """Prepared/rolled-back transaction halves do not occupy a ConsumeQueue slot."""
    tran = MessageSysFlag.get_transaction_value(sys_flag)
    return tran in (MessageSysFlag.TRANSACTION_NOT_TYPE, MessageSysFlag.TRANSACTION_COMMIT_TYPE)


class CommitLog:
    def __init__(
        self,
        store_path: Path,
        mapped_file_size: int,
        store_host: tuple[str, int],
        max_message_size: int,
    ) -> None:
        # blocks reserved as records are written (RESERVE_STEP at a time, see _file_for), so a
        # new file does not take its whole size (1 GB by default) from the disk at once
        self.mapped_file_queue = MappedFileQueue(
            store_path, mapped_file_size, reserve_step=RESERVE_STEP
        )
        self.mapped_file_size = mapped_file_size
        self.store_host = store_host
        self._store_ip = pack_host(store_host[0])
        self._store_port = store_host[1]
        # STOREHOSTADDRESS_V6_FLAG when the store host is IPv6: its records use that layout
        self._store_bits = layout.host_flags(4, len(self._store_ip))
        # A record (of the widest layout) plus the blank minimum must fit in one file.
        self.max_message_size = min(
            max_message_size,
            mapped_file_size
            - layout.min_record_size(HOST_V6_FLAGS)
            - rec.END_FILE_MIN_BLANK_LENGTH,
        )
        self.topic_queue_table: dict[str, int] = {}
        self.last_append_timestamp = 0
        self._born_ip_cache: dict[str, bytes] = {}
        self._topic_parts: dict[str, bytes] = {}
        # (items, body length, properties length, topic part, host bits) -> compiled structs.
        self._uniform_plans: dict[tuple[int, int, int, bytes, int], _UniformPlan] = {}
        # msgId = hex(store ip + port) + hex(offset): the first half never changes.
        self._msg_id_prefix = (self._store_ip + _U32.pack(self._store_port)).hex().upper()
        # warm-ahead: CommitLog offset up to which pages were prefetched, and whether a
        # prefetch is running in a worker thread
        self._warm_until = 0
        self._warming = False

    # --- offsets --------------------------------------------------------------------------

    @property
    def max_offset(self) -> int:
        return self.mapped_file_queue.get_max_offset()

    @property
    def min_offset(self) -> int:
        """Start of the first file still holding data (files being destroyed do not count)."""
        first = self.mapped_file_queue.get_first_mapped_file()
        if first is None:
            return -1
        if first.is_available:
            return first.file_from_offset
        return self.mapped_file_queue.roll_next_file(first.file_from_offset)

    def roll_next_file(self, offset: int) -> int:
        return self.mapped_file_queue.roll_next_file(offset)

    # --- append ---------------------------------------------------------------------------

    def _packed(self, ip: str) -> bytes:
        """Address bytes (4 or 16) of a born host (cached: a few clients send many messages)."""
        packed = self._born_ip_cache.get(ip)
        if packed is None:
            packed = _pack_born_ip(ip)
            if len(self._born_ip_cache) < 4096:
                self._born_ip_cache[ip] = packed
        return packed

    def _sys_flag(self, sys_flag: int, packed_born: bytes) -> int:
        """SYSFLAG as stored: its host bits set by the born and store addresses."""
        return (sys_flag & _NOT_HOST_BITS) | layout.host_flags(
            len(packed_born), len(self._store_ip)
        )

    def _check_lengths(self, topic: bytes, props: bytes, body_len: int) -> None:
        if not topic:
            raise AppendError(AppendMessageStatus.MESSAGE_SIZE_EXCEEDED, "topic is empty")
        reason = rec.validate_lengths(len(topic), len(props), body_len, self.max_message_size)
        if reason is not None:
            status = (
                AppendMessageStatus.PROPERTIES_SIZE_EXCEEDED
                if reason.startswith("properties")
                else AppendMessageStatus.MESSAGE_SIZE_EXCEEDED
            )
            raise AppendError(status, reason)

    def _warm(self, mf: MappedFile) -> None:
        """Prefetch the next ``_WARM_CHUNK`` of the current file in a worker thread: a first
        write to a page of a fresh (preallocated) file zero-fills it in a page fault, which
        cost the loop thread about a fifth of its time under batched sends. Called after every
        append; acts when less than ``_WARM_LOW`` is prefetched ahead and none is running."""
        if self._warming or mf.file_from_offset + mf.wrote_position + _WARM_LOW <= self._warm_until:
            return
        start = max(self._warm_until, mf.file_from_offset + mf.wrote_position)
        end = min(start + _WARM_CHUNK, mf.file_from_offset + mf.file_size)
        if end <= start:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (offline tools): nothing to overlap with
            return
        self._warming = True
        self._warm_until = end
        done = loop.run_in_executor(None, mf.prefetch, start - mf.file_from_offset, end - start)
        done.add_done_callback(self._warmed)

    def _warmed(self, _: asyncio.Future[None]) -> None:
        self._warming = False

    def _file_for(self, size: int, now_ms: int) -> MappedFile:
        """The file with room for ``size`` bytes plus the blank minimum, rolling if needed, its
        blocks reserved that far (the appenders come here whenever the reserved part of the
        last file is too short: ``reserved - wrote_position``; DiskFullError before any byte
        is written)."""
        mfq = self.mapped_file_queue
        blank = rec.END_FILE_MIN_BLANK_LENGTH
        try:
            mf = mfq.get_or_create_last_mapped_file(0)
            if mf.free_space < size + blank:
                if mf.free_space > 0:
                    mf.ensure_reserved(mf.wrote_position + blank)  # the blank's head only
                    rec.encode_blank_into(mf.buffer, mf.wrote_position, mf.free_space)
                    mf.advance(mf.free_space, now_ms)
                mf = mfq.get_or_create_last_mapped_file(0)
            mf.ensure_reserved(min(mf.file_size, mf.wrote_position + size + blank))
        except StoreFileError:
            raise  # names the file already (DiskFullError: the disk is full)
        except OSError as exc:
            raise StoreFileError(f"cannot create a CommitLog file: {exc}") from exc
        return mf

    def _topic_part(self, topic: str) -> bytes:
        """TOPICLEN + TOPIC of a record, for a valid topic (cached: a broker has few topics)."""
        part = self._topic_parts.get(topic)
        if part is None:
            encoded = topic.encode("utf-8")
            if not encoded or len(encoded) > rec.MAX_TOPIC_BYTES:
                self._check_lengths(encoded, b"", 0)  # raises, naming the rule
            part = bytes([len(encoded)]) + encoded
            if len(self._topic_parts) < 4096:
                self._topic_parts[topic] = part
        return part

    def put_message(self, msg: MessageInner, now_ms: int | None = None) -> AppendMessageResult:
        """Append one message; raises AppendError / StoreFileError when it cannot.

        The record is built as head + body + topic + properties, joined, and copied into the
        map once (the broker's SEND_MESSAGE path: kept free of per-field calls).
        """
        topic = msg.topic
        topic_part = self._topic_parts.get(topic) or self._topic_part(topic)
        props_text = msg.properties_string
        if not props_text and msg.properties:
            # A caller that filled only the dict: store what it meant, not an empty string.
            props_text = encode_properties(msg.properties)
        props = props_text.encode("utf-8")
        body = msg.body
        body_len = len(body)
        props_len = len(props)
        if props_len > _MAX_PROPERTIES or body_len > self.max_message_size:
            self._check_lengths(topic_part[1:], props, body_len)  # raises, naming the rule
        born_ip, born_port = msg.born_host
        packed_born = self._born_ip_cache.get(born_ip) or self._packed(born_ip)
        if len(packed_born) == 4 and not self._store_bits:  # IPv4 hosts: the inline layout
            sys_flag = msg.sys_flag & _NOT_HOST_BITS
            size = _MIN_RECORD_1 + body_len + len(topic_part) + props_len
            pack_head = _pack_record_head
        else:
            sys_flag = self._sys_flag(msg.sys_flag, packed_born)
            head = head_layout(sys_flag)
            size = head.size + _PROPS_LEN.size + body_len + len(topic_part) + props_len
            pack_head = head.struct.pack
        store_ts = int(time.time() * 1000) if now_ms is None else now_ms
        mf = self.mapped_file_queue.get_last_mapped_file()
        if mf is None or mf.reserved - mf.wrote_position < size + _BLANK_MIN:
            mf = self._file_for(size, store_ts)
        pos = mf.wrote_position
        wrote_offset = mf.file_from_offset + pos
        queue_id = msg.queue_id
        key = f"{topic}-{queue_id}"
        has_slot = not sys_flag & _NO_SLOT_BIT  # takes_queue_offset, inlined
        table = self.topic_queue_table
        queue_offset = table.get(key, 0) if has_slot else 0
        mf.buffer[pos : pos + size] = b"".join((
            pack_head(
                size, _MAGIC, _crc32(body) & _CRC_MASK, queue_id, msg.flag, queue_offset,
                wrote_offset, sys_flag, msg.born_timestamp, packed_born, born_port, store_ts,
                self._store_ip, self._store_port, msg.reconsume_times,
                msg.prepared_transaction_offset, body_len,
            ),
            body,
            topic_part,
            _pack_props_len(props_len),
            props,
        ))  # fmt: skip
        mf.advance(size, store_ts)
        self._warm(mf)
        if has_slot:
            table[key] = queue_offset + 1
        self.last_append_timestamp = store_ts
        return AppendMessageResult(
            AppendMessageStatus.PUT_OK,
            wrote_offset,
            size,
            store_ts,
            queue_offset,
            1,
            self._msg_id_prefix,
            [wrote_offset],
        )

    def put_messages(
        self, batch: MessageInner, items: Sequence[Message], now_ms: int | None = None
    ) -> AppendMessageResult:
        """Append a batch contiguously in one file with consecutive queue offsets.

        ``items`` carry body, flag and properties; everything else comes from ``batch``.
        """
        if not items:
            raise AppendError(AppendMessageStatus.MESSAGE_SIZE_EXCEEDED, "batch has no messages")
        topic = batch.topic.encode("utf-8")
        born_ip = self._packed(batch.born_host[0])
        sys_flag = self._sys_flag(batch.sys_flag, born_ip)
        encoded: list[tuple[Message, bytes, int]] = []
        total = 0
        for item in items:
            props = encode_properties(item.properties).encode("utf-8")
            self._check_lengths(topic, props, len(item.body))
            size = rec.record_size(len(item.body), len(topic), len(props), sys_flag)
            encoded.append((item, props, size))
            total += size
        if total > self.max_message_size:
            raise AppendError(
                AppendMessageStatus.MESSAGE_SIZE_EXCEEDED,
                f"batch is {total} bytes encoded; max {self.max_message_size}",
            )
        store_ts = int(time.time() * 1000) if now_ms is None else now_ms
        mf = self._file_for(total, store_ts)
        pos = mf.wrote_position
        first_offset = mf.file_from_offset + pos
        key = queue_key(batch.topic, batch.queue_id)
        has_slot = takes_queue_offset(batch.sys_flag)
        queue_offset = self.topic_queue_table.get(key, 0) if has_slot else 0
        buf = mf.buffer
        offsets: list[int] = []
        offset = first_offset
        for i, (item, props, size) in enumerate(encoded):
            rec.encode_record_into(
                buf,
                pos,
                queue_id=batch.queue_id,
                flag=item.flag,
                queue_offset=queue_offset + i if has_slot else 0,
                physical_offset=offset,
                sys_flag=sys_flag,
                born_timestamp=batch.born_timestamp,
                born_ip=born_ip,
                born_port=batch.born_host[1],
                store_timestamp=store_ts,
                store_ip=self._store_ip,
                store_port=self._store_port,
                reconsume_times=batch.reconsume_times,
                prepared_transaction_offset=batch.prepared_transaction_offset,
                body=item.body,
                topic=topic,
                properties=props,
            )
            offsets.append(offset)
            pos += size
            offset += size
        mf.advance(total, store_ts)
        self._warm(mf)
        if has_slot:
            self.topic_queue_table[key] = queue_offset + len(encoded)
        self.last_append_timestamp = store_ts
        return AppendMessageResult(
            AppendMessageStatus.PUT_OK,
            wrote_offset=first_offset,
            wrote_bytes=total,
            store_timestamp=store_ts,
            queue_offset=queue_offset,
            msg_num=len(encoded),
            msg_id_prefix=self._msg_id_prefix,
            record_offsets=offsets,
        )

    def put_batch_body(
        self, batch: MessageInner, body: bytes | memoryview, now_ms: int | None = None
    ) -> AppendMessageResult:
        """Append a SEND_BATCH_MESSAGE body without building message objects (the hot path).

        A body whose items all have the same lengths (the common case: one producer, one
        message shape) is checked, parsed and encoded straight into the map with one compiled
        struct call each. Any other body takes the general path: one pass validates each item
        and encodes its record as parts (head, then the item's own BODY and
        PROPERTIESLEN+PROPERTIES bytes around the topic), joined and copied in once. Either
        way a malformed body raises AppendError before anything is written, and a batch that
        does not fit in the current file goes whole to the next one (after a blank record).
        """
        topic_part = self._topic_part(batch.topic)
        store_ts = int(time.time() * 1000) if now_ms is None else now_ms
        key = f"{batch.topic}-{batch.queue_id}"
        has_slot = not batch.sys_flag & _NO_SLOT_BIT  # takes_queue_offset, inlined
        queue_offset = self.topic_queue_table.get(key, 0) if has_slot else 0
        born_ip = batch.born_host[0]
        head_tail = self._batch_head_tail(
            batch, store_ts, self._born_ip_cache.get(born_ip) or self._packed(born_ip)
        )
        uniform = self._parse_uniform(body, topic_part, head_tail[1])
        if uniform is not None:
            plan, fields = uniform
            count = plan.count
            total = plan.total
            if total > self.max_message_size:
                raise AppendError(
                    AppendMessageStatus.MESSAGE_SIZE_EXCEEDED,
                    f"batch is {total} bytes encoded; max {self.max_message_size}",
                )
            mf = self.mapped_file_queue.get_last_mapped_file()
            if mf is None or mf.reserved - mf.wrote_position < total + _BLANK_MIN:
                mf = self._file_for(total, store_ts)
            wpos = mf.wrote_position
            first_offset = mf.file_from_offset + wpos
            offsets = range(first_offset, first_offset + total, plan.record_size)
            # The encoder's arguments, 10 per record: the plan's template holds the fields
            # fixed by the shape; extended-slice assignments fill the rest (no per-record code).
            args = plan.template.copy()
            bodies = fields[3::6]
            args[1::10] = list(map(and_, map(rec.crc32, bodies), repeat(_CRC_MASK)))
            args[2::10] = [batch.queue_id] * count
            args[3::10] = fields[1::6]  # FLAG
            if has_slot:
                args[4::10] = range(queue_offset, queue_offset + count)
            args[5::10] = offsets
            args[6::10] = [head_tail[0] + plan.body_len_bytes] * count
            args[7::10] = bodies
            args[9::10] = fields[5::6]  # PROPERTIES
            plan.encoder.pack_into(mf.buffer, wpos, *args)
            record_offsets = list(offsets)
        else:
            view = memoryview(body)
            try:
                mf = self._file_for(0, store_ts)
                first_offset = mf.file_from_offset + mf.wrote_position
                data, record_offsets = self._encode_batch(
                    batch, topic_part, view, first_offset, head_tail, queue_offset, has_slot
                )
                total = len(data)
                if mf.reserved - mf.wrote_position < total + _BLANK_MIN:
                    mf = self._file_for(total, store_ts)
                    first_offset = mf.file_from_offset + mf.wrote_position
                    data, record_offsets = self._encode_batch(
                        batch, topic_part, view, first_offset, head_tail, queue_offset, has_slot
                    )
            finally:
                view.release()
            wpos = mf.wrote_position
            mf.buffer[wpos : wpos + total] = data
            count = len(record_offsets)
        mf.advance(total, store_ts)
        self._warm(mf)
        if has_slot:
            self.topic_queue_table[key] = queue_offset + count
        self.last_append_timestamp = store_ts
        return AppendMessageResult(
            AppendMessageStatus.PUT_OK,
            first_offset,
            total,
            store_ts,
            queue_offset,
            count,
            self._msg_id_prefix,
            record_offsets,
        )

    def _batch_head_tail(
        self, batch: MessageInner, store_ts: int, packed_born: bytes
    ) -> tuple[bytes, int]:
        """SYSFLAG..PREPAREDTRANSACTIONOFFSET (the same for every record of a batch), and the
        SYSFLAG host bits that choose the head layout."""
        sys_flag = self._sys_flag(batch.sys_flag, packed_born)
        bits = sys_flag & HOST_V6_FLAGS
        packed = _HEAD_CONSTANT[bits].pack(
            sys_flag,
            batch.born_timestamp,
            packed_born,
            batch.born_host[1],
            store_ts,
            self._store_ip,
            self._store_port,
            batch.reconsume_times,
            batch.prepared_transaction_offset,
        )
        return packed, bits

    def _parse_uniform(
        self, body: bytes | memoryview, topic_part: bytes, host_bits: int
    ) -> tuple[_UniformPlan, tuple[Any, ...]] | None:
        """The plan and parsed fields when every item of the body has the lengths of the first
        one and they add up, else None (the general path then decides, and names what is
        malformed). Fields, 6 per item: TOTALSIZE, FLAG, BODYLEN, BODY, PROPERTIESLEN,
        PROPERTIES; every item's lengths are checked against the first item's here."""
        end = len(body)
        if end < _BATCH_ITEM.size:
            return None
        item_size, _magic, _crc, _flag, body_len = _BATCH_ITEM.unpack_from(body, 0)
        props_len = item_size - _ITEM_FIXED - body_len
        if body_len < 0 or props_len < 0 or body_len > self.max_message_size or end % item_size:
            return None
        count = end // item_size
        if count > _UNIFORM_MAX_ITEMS:
            return None
        shape = (count, body_len, props_len, topic_part, host_bits)
        plan = self._uniform_plans.get(shape)
        if plan is None:
            plan = _UniformPlan(count, body_len, props_len, topic_part, host_bits)
            plans = self._uniform_plans
            cached = sum(key[0] for key in plans)
            while plans and (
                len(plans) >= _UNIFORM_CACHE_MAX or cached + count > _UNIFORM_CACHE_ITEMS
            ):
                oldest = next(iter(plans))  # first inserted
                cached -= oldest[0]
                del plans[oldest]
            plans[shape] = plan
        fields = plan.parser.unpack(body)
        if (
            fields[0::6].count(item_size) != count
            or fields[2::6].count(body_len) != count
            or fields[4::6].count(props_len) != count
        ):
            return None
        return plan, fields

    def _encode_batch(
        self,
        batch: MessageInner,
        topic_part: bytes,
        view: memoryview,
        first_offset: int,
        head_tail: tuple[bytes, int],
        queue_offset: int,
        has_slot: bool,
    ) -> tuple[bytes, list[int]]:
        """The records of a batch body, back to back, for ``first_offset``; validates items.
        ``head_tail`` is :meth:`_batch_head_tail`'s."""
        constant, host_bits = head_tail
        fixed = layout.min_record_size(host_bits) + len(topic_part) - 1
        max_size = self.max_message_size
        end = len(view)
        queue_id = batch.queue_id
        unpack_item = _BATCH_ITEM.unpack_from
        unpack_props = _PROPS_LEN.unpack_from
        pack_head = _HEAD_FULL[host_bits].pack
        item_head = _BATCH_ITEM.size
        crc32 = rec.crc32
        magic = rec.MESSAGE_MAGIC_CODE
        parts: list[bytes | memoryview] = []
        extend = parts.extend
        offsets: list[int] = []
        add_offset = offsets.append
        offset = first_offset
        qo = queue_offset
        step = 1 if has_slot else 0
        pos = 0
        delta = fixed - _ITEM_FIXED  # record size - batch item size
        try:
            while pos < end:
                # A short buffer makes unpack_from raise struct.error (handled below).
                item_size, _magic, _crc, flag, body_len = unpack_item(view, pos)
                body_end = pos + item_head + body_len
                (props_len,) = unpack_props(view, body_end)
                if (
                    item_size != _ITEM_FIXED + body_len + props_len
                    or body_len < 0
                    or props_len < 0
                    or pos + item_size > end
                    or body_len > max_size
                ):
                    raise AppendError(
                        AppendMessageStatus.MESSAGE_SIZE_EXCEEDED,
                        f"batch item at byte {pos} is malformed: size {item_size}, body length "
                        f"{body_len}, properties length {props_len}, {end - pos} bytes left "
                        f"(maxMessageSize {max_size})",
                    )
                size = item_size + delta
                item_body = view[pos + item_head : body_end]  # for the CRC and the record
                extend((
                    pack_head(
                        size, magic, crc32(item_body) & 0x7FFFFFFF, queue_id, flag, qo, offset,
                        constant, body_len,
                    ),
                    item_body,
                    topic_part,
                    view[body_end : pos + item_size],  # PROPERTIESLEN + PROPERTIES
                ))  # fmt: skip
                add_offset(offset)
                offset += size
                qo += step
                pos += item_size
        except struct.error as exc:
            raise AppendError(
                AppendMessageStatus.MESSAGE_SIZE_EXCEEDED,
                f"batch item at byte {pos} is truncated ({end - pos} bytes left)",
            ) from exc
        if not offsets:
            raise AppendError(AppendMessageStatus.MESSAGE_SIZE_EXCEEDED, "batch has no messages")
        data = b"".join(parts)
        parts.clear()
        if len(data) > max_size:
            raise AppendError(
                AppendMessageStatus.MESSAGE_SIZE_EXCEEDED,
                f"batch is {len(data)} bytes encoded; max {max_size}",
            )
        return data, offsets

    def append_data(self, start_offset: int, data: bytes | memoryview) -> bool:
        """Slave side: append raw CommitLog bytes exactly at ``start_offset`` (= max offset).

        ``data`` may end at a file boundary but never crosses one (the master sends per file).
        """
        mfq = self.mapped_file_queue
        if mfq.is_empty():
            mf = mfq.get_or_create_last_mapped_file(start_offset)
            mf.set_positions(start_offset - mf.file_from_offset)
        if start_offset != self.max_offset:
            return False
        view = memoryview(data)
        while len(view):
            mf = mfq.get_or_create_last_mapped_file(start_offset)
            n = min(len(view), mf.free_space)
            mf.ensure_reserved(mf.wrote_position + n)
            if not mf.append_bytes(view[:n]):
                return False
            view = view[n:]
        return True

    # --- reads ----------------------------------------------------------------------------

    def get_data(self, offset: int) -> SelectMappedBufferResult | None:
        """From ``offset`` to the end of written data in that file (reput and replication)."""
        mf = self.mapped_file_queue.find_mapped_file_by_offset(offset, offset == 0)
        if mf is None:
            return None
        return mf.select_mapped_buffer(offset % self.mapped_file_size)

    def get_message(self, offset: int, size: int) -> SelectMappedBufferResult | None:
        mf = self.mapped_file_queue.find_mapped_file_by_offset(offset, offset == 0)
        if mf is None:
            return None
        return mf.select_mapped_buffer(offset % self.mapped_file_size, size)

    def get_record_size(self, offset: int) -> int:
        """TOTALSIZE of the record at ``offset`` or -1 when nothing readable is there."""
        sel = self.get_message(offset, 4)
        if sel is None:
            return -1
        try:
            return int(_I32.unpack_from(sel.buffer, 0)[0])
        finally:
            sel.release()

    def record_matches(
        self, offset: int, size: int, topic: str, queue_id: int, queue_offset: int
    ) -> bool:
        """Whether a whole, intact record of ``topic``/``queue_id`` at ``queue_offset`` is stored
        at ``offset`` with TOTALSIZE ``size`` (the ConsumeQueue start-up check)."""
        sel = self.get_message(offset, size)
        if sel is None:
            return False
        try:
            check = rec.check_record(sel.buffer, 0, size, check_crc=True)
        finally:
            sel.release()
        r = check.record
        return (
            check.kind is rec.RecordKind.MESSAGE
            and r is not None
            and r.size == size
            and r.physical_offset == offset
            and r.queue_id == queue_id
            and r.queue_offset == queue_offset
            and r.topic == topic
        )

    def pickup_store_timestamp(self, offset: int, size: int) -> int:
        """STORETIMESTAMP of the record at ``offset`` (-1 when unreadable)."""
        if size < rec.MIN_RECORD_SIZE:
            return -1
        sel = self.get_message(offset, rec.STORE_TIMESTAMP_END_MAX)
        if sel is None:
            return -1
        try:
            return rec.read_store_timestamp(sel.buffer, 0)
        finally:
            sel.release()


class _UniformPlan:
    """Compiled structs for batch bodies of ``count`` items with the same lengths.

    Parser fields, 6 per item: TOTALSIZE, FLAG, BODYLEN, BODY, PROPERTIESLEN, PROPERTIES
    (MAGICCODE and BODYCRC of an item are not used). Encoder fields, 10 per record:
    TOTALSIZE+MAGICCODE (8 bytes), BODYCRC, QUEUEID, FLAG, QUEUEOFFSET, PHYSICALOFFSET,
    SYSFLAG..PREPAREDTRANSACTIONOFFSET+BODYLEN (52 bytes for IPv4 hosts), BODY,
    TOPICLEN+TOPIC+PROPERTIESLEN, PROPERTIES. Both formats are derived from
    :mod:`ferrymq.store.record_layout` (the head layout of ``host_bits``). ``template`` holds
    the encoder arguments fixed by the shape (queue offsets 0, for batches that take no slot).
    """

    __slots__ = ("body_len_bytes", "count", "encoder", "parser", "record_size", "template", "total")

    def __init__(
        self, count: int, body_len: int, props_len: int, topic_part: bytes, host_bits: int
    ) -> None:
        self.count = count
        head = head_layout(host_bits)
        self.record_size = head.size + _PROPS_LEN.size + body_len + len(topic_part) + props_len
        self.total = count * self.record_size
        self.body_len_bytes = _I32.pack(body_len)
        self.parser = struct.Struct(">" + _plan_parser_item(body_len, props_len) * count)
        self.encoder = struct.Struct(
            ">" + _plan_encoder_item(host_bits, body_len, len(topic_part), props_len) * count
        )
        template: list[Any] = [0] * (10 * count)
        template[0::10] = [_SIZE_MAGIC.pack(self.record_size, rec.MESSAGE_MAGIC_CODE)] * count
        template[8::10] = [topic_part + _PROPS_LEN.pack(props_len)] * count
        self.template = template


def _plan_parser_item(body_len: int, props_len: int) -> str:
    """One batch item for the uniform parser: TOTALSIZE, FLAG, BODYLEN, BODY, PROPERTIESLEN,
    PROPERTIES (MAGICCODE, BODYCRC skipped)."""
    head = layout.BATCH_ITEM_LAYOUT.format(keep=("TOTALSIZE", "FLAG", "BODYLEN"))
    return f"{head[1:]}{body_len}s{layout.PROPERTIES_LEN_CODE}{props_len}s"


def _plan_encoder_item(host_bits: int, body_len: int, topic_part_len: int, props_len: int) -> str:
    """One record for the uniform encoder (the 10 fields of :class:`_UniformPlan`)."""
    head = head_layout(host_bits).format(raw=(("TOTALSIZE", "MAGICCODE"), ("SYSFLAG", "BODYLEN")))
    return f"{head[1:]}{body_len}s{topic_part_len + _PROPS_LEN.size}s{props_len}s"


def _pack_born_ip(ip: str) -> bytes:
    """The 4 (IPv4) or 16 (IPv6) address bytes of a born host; 0.0.0.0 when it is not an
    address (upstream stores what the socket reports, which is always one)."""
    try:
        return pack_host(ip)
    except OSError:
        return b"\x00\x00\x00\x00"
