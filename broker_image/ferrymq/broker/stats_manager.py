"""BrokerStatsManager: the rate history behind GET_BROKER_RUNTIME_INFO's ``putTps`` /
``getTransferredTps`` / ``getFoundTps`` ... and VIEW_BROKER_STATS_DATA's minute/hour/day items
(upstream StoreStatsService and BrokerStatsManager), fed by reading monotonic counters on a timer
(never on the send path).

- ``*Tps`` keys are upstream's format: three rates over the last 10 s, 1 min and 10 min,
  space separated (``"12.50 11.98 10.02"``); tools split on the space and read the first.
- ``msgPutTotalTodayMorning``/``YesterdayMorning`` hold the put counter at the last two local
  midnights (0 when the broker started after them), ``msgPutTotalTodayNow`` the counter now.
- A stats item (``TOPIC_PUT_NUMS``/``TOPIC_PUT_SIZE`` keyed by topic, ``GROUP_GET_NUMS``/
  ``GROUP_GET_SIZE``/``SNDBCK_PUT_NUMS`` keyed by ``topic@group``, ``BROKER_PUT_NUMS``/
  ``BROKER_GET_NUMS`` keyed by cluster name) is a cumulative pair as upstream's StatsItem: the
  value (messages or bytes) and the times (requests that added to it). Over the last minute, hour
  and day it answers ``sum`` (value increase), ``tps`` (sum per second) and ``avgpt`` (sum per
  request: messages per send for TOPIC_PUT_NUMS, bytes per send for TOPIC_PUT_SIZE), as upstream
  ``StatsItem.computeStatsData``. A key first seen since the last recording counts from zero at
  that recording (it did not exist then), so nothing it did is lost from the window.
"""

from __future__ import annotations

import datetime
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ferrymq.tasks import Periodic

TPS_WINDOWS_S = (10, 60, 600)
STATS_NAMES = (
    "TOPIC_PUT_NUMS",
    "TOPIC_PUT_SIZE",
    "GROUP_GET_NUMS",
    "GROUP_GET_SIZE",
    "SNDBCK_PUT_NUMS",
    "BROKER_PUT_NUMS",
    "BROKER_GET_NUMS",
)
# (resolution, how long kept) of the three item histories: minute, hour, day
_LEVELS = ((10.0, 70.0), (60.0, 3_660.0), (3_600.0, 90_000.0))

# per key: (value, times), both cumulative (upstream StatsItem.value / StatsItem.times)
Counters = Callable[[], Mapping[str, Sequence[int]]]


@dataclass(frozen=True, slots=True)
class StatsSnapshot:
    sum: int
    tps: float
    avgpt: float = 0.0


def rate_over(history: deque[tuple[float, int]], now: float, window_s: float) -> float:
    """Increase per second of a counter over the last ``window_s`` (or as much as is recorded)."""
    if len(history) < 2:
        return 0.0
    t_now, v_now = history[-1]
    base_t, base_v = history[0]
    for t, v in history:
        if t >= now - window_s:
            break
        base_t, base_v = t, v
    span = t_now - base_t
    return (v_now - base_v) / span if span > 0 else 0.0


def compute_stats(
    base: tuple[float, int, int], now: float, value: int, times: int
) -> StatsSnapshot:
    """Upstream ``StatsItem.computeStatsData`` between a recorded point and now: sum is the
    value increase, tps the sum per second, avgpt the sum per request (0 without requests)."""
    base_t, base_v, base_times = base
    total = max(0, value - base_v)
    requests = times - base_times
    span = now - base_t
    return StatsSnapshot(
        sum=total,
        tps=total / span if span > 0 else 0.0,
        avgpt=total / requests if requests > 0 else 0.0,
    )


class _ItemHistory:
    def __init__(self) -> None:
        # per level: (time, value, times) points
        self.levels: list[deque[tuple[float, int, int]]] = [deque() for _ in _LEVELS]

    def record(self, now: float, value: int, times: int) -> None:
        for (resolution, keep), history in zip(_LEVELS, self.levels, strict=True):
            if not history or now - history[-1][0] >= resolution:
                history.append((now, value, times))
            while history and now - history[0][0] > keep:
                history.popleft()

    def snapshot(self, level: int, now: float, value: int, times: int) -> StatsSnapshot:
        window = (60.0, 3_600.0, 86_400.0)[level]
        base = (now, value, times)
        for point in self.levels[level]:
            if point[0] >= now - window:
                base = point
                break
        return compute_stats(base, now, value, times)


def _new_history(last_record: float | None) -> _ItemHistory:
    """The history of a key not seen at the last recording: zero then (it did not exist)."""
    history = _ItemHistory()
    if last_record is not None:
        history.record(last_record, 0, 0)
    return history


class BrokerStatsManager:
    def __init__(
        self,
        *,
        put_total: Callable[[], int],
        get_transferred: Callable[[], int],
        get_found: Callable[[], int],
        get_miss: Callable[[], int],
        items: Mapping[str, Counters],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.put_total = put_total
        self.counters = {
            "putTps": put_total,
            "getTransferredTps": get_transferred,
            "getFoundTps": get_found,
            "getMissTps": get_miss,
        }
        self.items = dict(items)
        self.clock = clock
        self._rates: dict[str, deque[tuple[float, int]]] = {k: deque() for k in self.counters}
        self._items: dict[tuple[str, str], _ItemHistory] = {}
        self._last_item_record: float | None = None
        self.get_total = get_transferred
        # (day, put counter, get counter) at the first sample of each of the last two days
        self._midnights: deque[tuple[datetime.date, int, int]] = deque(maxlen=2)
        # the sampling cadence of the rates
        self._loop = Periodic("stats-sampler", self.sample, 1.0)

    def start(self) -> None:
        self.sample()
        self._loop.start()

    async def stop(self) -> None:
        await self._loop.stop()

    def sample(self) -> None:
        now = self.clock()
        keep = TPS_WINDOWS_S[-1] + 5
        for key, read in self.counters.items():
            history = self._rates[key]
            history.append((now, read()))
            while history and now - history[0][0] > keep:
                history.popleft()
        today = datetime.datetime.fromtimestamp(now).date()
        if not self._midnights or self._midnights[-1][0] != today:
            # the first sample of a day: the counter "this morning" (upstream BrokerStats)
            started_today = not self._midnights
            self._midnights.append(
                (
                    today,
                    0 if started_today else self.put_total(),
                    0 if started_today else self.get_total(),
                )
            )
        last = self._last_item_record
        if last is None or now - last >= _LEVELS[0][0]:
            self._last_item_record = now
            for name, read_items in self.items.items():
                for key, (value, times) in dict(read_items()).items():
                    item = self._items.get((name, key))
                    if item is None:
                        item = self._items[(name, key)] = _new_history(last)
                    item.record(now, value, times)

    def tps(self, key: str) -> str:
        now = self.clock()
        history = self._rates[key]
        return " ".join(f"{rate_over(history, now, w):.2f}" for w in TPS_WINDOWS_S)

    def runtime_info(self) -> dict[str, str]:
        info = {key: self.tps(key) for key in self.counters}
        found = [float(x) for x in info["getFoundTps"].split()]
        miss = [float(x) for x in info["getMissTps"].split()]
        info["getTotalTps"] = " ".join(f"{a + b:.2f}" for a, b in zip(found, miss, strict=True))
        today = self._midnights[-1] if self._midnights else None
        yesterday = self._midnights[0] if len(self._midnights) == 2 else None
        info["msgPutTotalTodayMorning"] = str(today[1] if today else 0)
        info["msgGetTotalTodayMorning"] = str(today[2] if today else 0)
        info["msgPutTotalYesterdayMorning"] = str(yesterday[1] if yesterday else 0)
        info["msgGetTotalYesterdayMorning"] = str(yesterday[2] if yesterday else 0)
        return info

    def stats_item(self, name: str, key: str) -> tuple[StatsSnapshot, ...] | None:
        """(minute, hour, day) of an item, None when unknown (upstream: "not exist")."""
        read = self.items.get(name)
        if read is None:
            return None
        current = dict(read()).get(key)
        if current is None:
            return None
        value, times = current
        history = self._items.get((name, key)) or _new_history(self._last_item_record)
        now = self.clock()
        return tuple(history.snapshot(level, now, value, times) for level in range(3))
