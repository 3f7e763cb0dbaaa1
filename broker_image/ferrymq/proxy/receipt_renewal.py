"""Receipt-handle renewal for PushConsumers (upstream ``DefaultReceiptHandleManager`` and
``ReceiptHandleProcessor``): a message received with ``auto_renew`` stays invisible while the
client's listener works on it. The proxy holds each such message's current handle per (client,
group); a scan every ``renewSchedulePeriodMillis`` extends the invisibility of every handle within
``renewAheadTimeMillis`` of expiry (by 1 min, 3 min, 5 min, ... as upstream's RenewStrategyPolicy),
up to ``renewMaxTimeMillis`` after receipt, when the message is handed back to the group's retry
schedule instead. Ack, ChangeInvisibleDuration and ForwardMessageToDeadLetterQueue take the held
handle out and use the current one (the client still holds the first). A client that went away,
or the proxy stopping, makes its held messages visible again after
``invisibleTimeMillisWhenClear``.

The decision for one handle is the pure :func:`decide`; :class:`ReceiptHandleRenewer` does the
I/O."""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from ferrymq.proxy import receipt_handle as rh
from ferrymq.proxy.backend import GroupConfig
from ferrymq.proxy.config import ProxyConfig
from ferrymq.proxy.errors import Code, ProxyError
from ferrymq.proxy.processor.consumer import now_ms

log = logging.getLogger(__name__)

# upstream RenewStrategyPolicy: the n-th renewal extends the invisibility by RENEW_DELAYS_MS[n]
RENEW_DELAYS_MS = (60_000, 180_000, 300_000, 600_000, 1_800_000, 3_600_000)
# renewals of one scan running at once (upstream: a pool of renewThreadPoolNums..Max threads)
CONCURRENT_RENEWALS = 4
# codes after which renewing that handle again cannot succeed (upstream renewExceptionNeedRetry)
FINAL_CODES = frozenset({Code.INVALID_RECEIPT_HANDLE, Code.NOT_FOUND})

ChangeInvisible = Callable[[str, str, str, int], Awaitable[str]]  # group, topic, handle, ms
GroupLookup = Callable[[str], Awaitable[GroupConfig | None]]


def renew_delay_ms(renew_times: int) -> int:
    return RENEW_DELAYS_MS[min(max(renew_times, 0), len(RENEW_DELAYS_MS) - 1)]


class Decision(enum.Enum):
    WAIT = "wait"  # not yet within renewAheadTimeMillis of becoming visible
    RENEW = "renew"  # extend by renew_delay_ms(renew_times)
    STOP = "stop"  # held past renewMaxTimeMillis: back to the group's retry schedule
    GIVE_UP = "give_up"  # renewal failed maxRenewRetryTimes in a row: let it become visible


@dataclass(slots=True)
class HeldMessage:
    group: str
    topic: str
    message_id: str
    handle: str  # the current one (renewals replace it)
    reconsume_times: int
    received_at_ms: int
    renew_times: int = 0
    failed_renewals: int = 0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


def decide(held: HeldMessage, next_visible_ms: int, now: int, config: ProxyConfig) -> Decision:
    if next_visible_ms - now > config.renew_ahead_time_millis:
        return Decision.WAIT
    if held.failed_renewals >= config.max_renew_retry_times:
        return Decision.GIVE_UP
    if now - held.received_at_ms < config.renew_max_time_millis:
        return Decision.RENEW
    return Decision.STOP


# (client id, group) -> (message id, the handle the client was given) -> the held message
HeldKey = tuple[str, str]
Held = dict[tuple[str, str], HeldMessage]


class ReceiptHandleRenewer:
    def __init__(
        self,
        config: ProxyConfig,
        change_invisible: ChangeInvisible,
        group_config: GroupLookup,
        online: Callable[[str], bool],
    ) -> None:
        self.config = config
        self._change = change_invisible
        self._group_config = group_config
        self._online = online
        self._held: dict[HeldKey, Held] = {}
        self._task: asyncio.Task[None] | None = None
        self._clearing: set[asyncio.Task[None]] = set()

    # --- the gRPC handlers' side ---------------------------------------------------------------
    def add(
        self,
        client_id: str,
        group: str,
        topic: str,
        message_id: str,
        handle: str,
        reconsume_times: int,
    ) -> None:
        held = HeldMessage(group, topic, message_id, handle, reconsume_times, now_ms())
        self._held.setdefault((client_id, group), {})[(message_id, handle)] = held

    async def take(self, client_id: str, group: str, message_id: str, handle: str) -> str:
        """The current handle of the message the client holds as ``handle`` (``handle`` itself
        when it is not held), no longer renewed; waits for a renewal in flight."""
        held_group = self._held.get((client_id, group))
        held = held_group.pop((message_id, handle), None) if held_group is not None else None
        if held is None:
            return handle
        if held_group is not None and not held_group:
            self._held.pop((client_id, group), None)
        async with held.lock:
            return held.handle

    def held_count(self) -> int:
        return sum(len(group) for group in self._held.values())

    def clear_client(self, client_id: str) -> None:
        """The client said it terminates: its held messages become visible again soon."""
        for key in [k for k in self._held if k[0] == client_id]:
            self._spawn_clear(key)

    # --- lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        if self.config.enable_proxy_auto_renew and self._task is None:
            self._task = asyncio.create_task(self._run(), name="receipt-handle-renewal")

    async def stop(self) -> None:
        """Stop renewing and hand every held message back (bounded: the proxy is stopping)."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        for key in list(self._held):
            self._spawn_clear(key)
        if self._clearing:
            await asyncio.wait(set(self._clearing), timeout=5.0)

    async def _run(self) -> None:
        period = self.config.renew_schedule_period_millis / 1000
        while True:
            try:
                await self.scan()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("receipt handle renewal scan failed")
            await asyncio.sleep(period)

    # --- one scan ------------------------------------------------------------------------------
    async def scan(self) -> None:
        due: list[tuple[Held, tuple[str, str], HeldMessage, Decision]] = []
        now = now_ms()
        for key, held_group in list(self._held.items()):
            if not self._online(key[0]):
                self._spawn_clear(key)
                continue
            for handle_key, held in list(held_group.items()):
                decision = decide(held, _next_visible(held.handle), now, self.config)
                if decision is not Decision.WAIT:
                    due.append((held_group, handle_key, held, decision))
        limit = asyncio.Semaphore(CONCURRENT_RENEWALS)

        async def one(
            held_group: Held, handle_key: tuple[str, str], held: HeldMessage, d: Decision
        ) -> None:
            async with limit, held.lock:
                if held_group.get(handle_key) is not held:
                    return  # acked meanwhile
                if not await self._act(held, d):
                    held_group.pop(handle_key, None)

        await asyncio.gather(*(one(*item) for item in due))
        for key in [k for k, v in self._held.items() if not v]:
            self._held.pop(key, None)

    async def _act(self, held: HeldMessage, decision: Decision) -> bool:
        """Carry out ``decision``; whether the message stays held."""
        if decision is Decision.GIVE_UP:
            log.warning("renewal of %s of %s failed too often", held.message_id, held.group)
            return False
        if decision is Decision.STOP:
            group = await self._group_config(held.group)
            if group is not None:
                delay = group.retry_policy.next_delay_ms(held.reconsume_times)
                await self._quietly(held, delay)
            return False
        try:
            held.handle = await self._change(
                held.group, held.topic, held.handle, renew_delay_ms(held.renew_times)
            )
        except ProxyError as exc:
            log.warning("renewing %s of %s: %s", held.message_id, held.group, exc.message)
            if exc.code in FINAL_CODES:
                return False
            held.failed_renewals += 1
            return True
        held.failed_renewals = 0
        held.renew_times += 1
        return True

    async def _quietly(self, held: HeldMessage, invisible_ms: int) -> None:
        try:
            await self._change(held.group, held.topic, held.handle, invisible_ms)
        except ProxyError as exc:
            log.warning("handing back %s of %s: %s", held.message_id, held.group, exc.message)

    def _spawn_clear(self, key: HeldKey) -> None:
        held_group = self._held.pop(key, None)
        if not held_group:
            return
        wait_ms = self.config.invisible_time_millis_when_clear

        async def clear() -> None:
            for held in held_group.values():
                async with held.lock:
                    await self._quietly(held, wait_ms)

        task = asyncio.create_task(clear(), name=f"receipt-handle-clear-{key[0]}")
        self._clearing.add(task)
        task.add_done_callback(self._clearing.discard)


def _next_visible(handle: str) -> int:
    try:
        return rh.decode(handle).next_visible_time
    except rh.ReceiptHandleError:
        return 0  # unreadable: due now, and the broker's answer ends its renewal
