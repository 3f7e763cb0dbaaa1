"""Put timing for GET_BROKER_RUNTIME_INFO, as upstream StoreStatsService reports it:
``putMessageEntireTimeMax``, ``putMessageDistributeTime`` (13 buckets), ``putLatency99/999``,
``putMessageFailedTimes``, ``putMessageAverageSize``, ``getMessageEntireTimeMax``. Pure
bookkeeping, no I/O; the store calls :meth:`PutStats.record_put` with each put's elapsed ms.

Differences from upstream, on purpose: the distribution counts every put since start (upstream
shows the last minute's), and the percentiles are exact over the last 10 000 puts (upstream
interpolates its buckets).
"""

from __future__ import annotations

import bisect
from collections import deque

# upper bounds (ms, exclusive) of upstream's buckets; the first is "<= 0 ms", the last open
_BOUNDS = (1, 10, 50, 100, 200, 500, 1000, 2000, 3000, 4000, 5000, 10000)
_NAMES = (
    "[<=0ms]", "[0~10ms]", "[10~50ms]", "[50~100ms]", "[100~200ms]", "[200~500ms]",
    "[500ms~1s]", "[1~2s]", "[2~3s]", "[3~4s]", "[4~5s]", "[5~10s]", "[10s~]",
)  # fmt: skip
_RECENT = 10_000


class PutStats:
    def __init__(self) -> None:
        self.put_max_ms = 0
        self.get_max_ms = 0
        self.failed = 0
        self.buckets = [0] * len(_NAMES)
        self._recent: deque[float] = deque(maxlen=_RECENT)

    def record_put(self, elapsed_ms: float) -> None:
        whole = int(elapsed_ms)
        self.buckets[bisect.bisect_right(_BOUNDS, whole)] += 1
        self.put_max_ms = max(self.put_max_ms, whole)
        self._recent.append(elapsed_ms)

    def record_failed_put(self) -> None:
        self.failed += 1

    def record_get(self, elapsed_ms: float) -> None:
        self.get_max_ms = max(self.get_max_ms, int(elapsed_ms))

    def percentile(self, q: float) -> float:
        if not self._recent:
            return 0.0
        ordered = sorted(self._recent)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    def runtime_info(self, put_times: int, put_bytes: int) -> dict[str, str]:
        times = put_times or 1  # upstream divides by at least one
        return {
            "putMessageEntireTimeMax": str(self.put_max_ms),
            "putMessageFailedTimes": str(self.failed),
            "putMessageDistributeTime": "".join(
                f"{name}:{count} " for name, count in zip(_NAMES, self.buckets, strict=True)
            ),
            "putMessageAverageSize": str(put_bytes / times),
            "getMessageEntireTimeMax": str(self.get_max_ms),
            "putLatency99": f"{self.percentile(0.99):.2f}",
            "putLatency999": f"{self.percentile(0.999):.2f}",
        }
