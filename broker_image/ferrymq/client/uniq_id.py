"""Client-side unique message ids (upstream MessageClientIDSetter).

The producer stamps every message with ``UNIQ_KEY`` before its first send attempt, so retries carry
the same id and consumers can de-duplicate. Layout (16 bytes, upper-case hex, 32 characters)::

    ip (4) | pid (2) | instance hash (4) | ms since the start of the month (4) | counter (2)

The first ten bytes are fixed per generator (upstream: per class loader); the rest make ids unique
within it. One generator belongs to one client instance (no module state).
"""

from __future__ import annotations

import datetime as dt
import itertools
import os
import struct
import time

from ferrymq.message import pack_host


def _month_start_ms(now_ms: int) -> int:
    now = dt.datetime.fromtimestamp(now_ms / 1000, tz=dt.UTC).astimezone()
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    return int(start.timestamp() * 1000)


class UniqIdGenerator:
    def __init__(self, ip: str = "127.0.0.1") -> None:
        try:
            packed_ip = pack_host(ip)[-4:]
        except (ValueError, OSError):
            packed_ip = bytes(4)
        head = packed_ip + struct.pack(">H", os.getpid() & 0xFFFF)
        head += struct.pack(">I", id(self) & 0xFFFFFFFF)
        self._fix = head.hex().upper()
        self._counter = itertools.count()
        self._start_ms = 0
        self._next_month_ms = 0

    def _roll_month(self, now_ms: int) -> None:
        self._start_ms = _month_start_ms(now_ms)
        # recomputed once a month; the next boundary is at most 31 days ahead
        self._next_month_ms = _month_start_ms(now_ms + 32 * 86_400_000)

    def next_id(self) -> str:
        now_ms = time.time_ns() // 1_000_000
        if now_ms >= self._next_month_ms:
            self._roll_month(now_ms)
        # same bytes as struct ">iH" hex-encoded, without the intermediate objects (hot path)
        return f"{self._fix}{(now_ms - self._start_ms) & 0x7FFFFFFF:08X}{next(self._counter) & 0xFFFF:04X}"
