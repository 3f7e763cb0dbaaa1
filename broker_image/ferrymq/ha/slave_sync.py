"""A slave copies the master's metadata every 10 s and whenever the master says it changed
(upstream ``broker/slave/SlaveSynchronize``, which has only the periodic round).

The CommitLog arrives through the HA stream, but topic configs, consumer offsets, delay offsets and
subscription groups live in the master's JSON files. The slave fetches them over the ordinary
remoting port with GET_ALL_TOPIC_CONFIG, GET_ALL_CONSUMER_OFFSET, GET_ALL_DELAY_OFFSET and
GET_ALL_SUBSCRIPTIONGROUP_CONFIG and hands them to the broker's managers through
:class:`SlaveSyncTargets`. Topic configs and subscription groups are only re-applied when the
master's dataVersion changed; each of the four syncs fails alone, logged, and is retried next round.

Between rounds, two things make the slave copy at once instead of at the next round:

- :meth:`SlaveSynchronize.on_master_versions`: the master's metadata notice on the HA connection
  (``ha/protocol.py``), sent when it connects and whenever a version moves. The items whose
  version moved are fetched now: a perm change, an order flag, a deleted topic, a new subscription
  group reach the slave within one HA writer round (100 ms) and one request. Consumer offsets move
  with every commit, so they are fetched at most every ``OFFSETS_MIN_INTERVAL_S`` (longer for
  tables that take long to copy: ``OFFSETS_DUTY_FACTOR``).
- :meth:`SlaveSynchronize.kick`: the broker calls it when replicated records of a topic the slave
  does not know yet are dispatched (also from a master that sends no notices).

A prompt copy that fails is logged and left to the periodic round.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

from ferrymq.ha.protocol import MetadataVersions
from ferrymq.remoting.bodies import (
    BodyError,
    ConsumerOffsetSerializeWrapper,
    DataVersion,
    SubscriptionGroupWrapper,
    TopicConfigSerializeWrapper,
)
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.errors import RemotingError
from ferrymq.tasks import cancel_and_wait

log = logging.getLogger(__name__)

REQUEST_TIMEOUT_S = 3.0
# consumer offsets change with every commit: a notice fetches them at most this often, so a
# failover re-delivers at most about this much more than what was in flight
OFFSETS_MIN_INTERVAL_S = 0.5
# ... and, for big tables, not more often than this many times the last fetch took, so the
# copies cost both brokers at most ~5% of their time (10k queues: a ~130 KiB body that takes
# ~0.12 s to build and read, copied every ~2.4 s instead of every 0.5 s)
OFFSETS_DUTY_FACTOR = 20

TOPIC_CONFIG = "topicConfig"
CONSUMER_OFFSET = "consumerOffset"
DELAY_OFFSET = "delayOffset"
SUBSCRIPTION_GROUP = "subscriptionGroup"


def moved_items(last: MetadataVersions | None, now: MetadataVersions) -> set[str]:
    """The sync items whose version differs between two notices (all three after none)."""
    if last is None:
        return {TOPIC_CONFIG, SUBSCRIPTION_GROUP, CONSUMER_OFFSET}
    moved = set()
    if last.topic_config != now.topic_config:
        moved.add(TOPIC_CONFIG)
    if last.subscription_group != now.subscription_group:
        moved.add(SUBSCRIPTION_GROUP)
    if last.consumer_offset != now.consumer_offset:
        moved.add(CONSUMER_OFFSET)
    return moved


class SlaveSyncTargets(Protocol):
    """Where a slave puts what it copied (implemented by the broker's wiring)."""

    def replace_topic_configs(self, wrapper: TopicConfigSerializeWrapper) -> None: ...

    def merge_consumer_offsets(self, wrapper: ConsumerOffsetSerializeWrapper) -> None: ...

    def replace_delay_offsets(self, raw_json: bytes) -> None: ...

    def replace_subscription_groups(self, wrapper: SubscriptionGroupWrapper) -> None: ...


class SlaveSyncError(Exception):
    """The master answered a sync request with an error or an unreadable body."""


@dataclass(slots=True)
class SyncReport:
    """What one round did: applied items, skipped (unchanged) items, and errors by item."""

    applied: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)


class SlaveSynchronize:
    def __init__(
        self,
        client: RemotingClient,
        targets: SlaveSyncTargets,
        *,
        interval_s: float = 10.0,
        master_addr: str | None = None,
    ) -> None:
        self._client = client
        self._targets = targets
        self.interval_s = interval_s
        self.master_addr = master_addr
        self._topic_version: DataVersion | None = None
        self._group_version: DataVersion | None = None
        self._task: asyncio.Task[None] | None = None
        self._kicked = asyncio.Event()
        # items to copy before the next round (names as in SyncReport), and the last notice
        self._due: set[str] = set()
        self._notified: MetadataVersions | None = None
        self._offsets_at = float("-inf")
        self.offsets_interval_s = OFFSETS_MIN_INTERVAL_S
        self.prompt_syncs = 0
        self.rounds = 0
        self.last_report: SyncReport | None = None

    def set_master_addr(self, addr: str | None) -> None:
        addr = addr or None
        if addr == self.master_addr:
            return
        # A different master: its data versions mean nothing against the old one's, so copy
        # everything from it now (a round that waited for an address runs instead)
        self._topic_version = self._group_version = None
        self.master_addr = addr
        if addr:
            self._due |= {TOPIC_CONFIG, CONSUMER_OFFSET, DELAY_OFFSET, SUBSCRIPTION_GROUP}
            self._kicked.set()

    async def _call(self, code: RequestCode) -> bytes:
        addr = self.master_addr
        if not addr:
            raise SlaveSyncError("no master address known yet")
        response: RemotingCommand = await self._client.invoke(
            addr, RemotingCommand.request(code), REQUEST_TIMEOUT_S
        )
        if response.code != ResponseCode.SUCCESS:
            raise SlaveSyncError(
                f"{code.name} to {addr} answered {response.code}: {response.remark or ''}"
            )
        return response.body_bytes()

    async def sync_all(self) -> SyncReport:
        """One round of the four copies (upstream ``syncAll``)."""
        report = SyncReport()
        for name, step in self._steps():
            try:
                applied = await step()
            except (SlaveSyncError, BodyError, RemotingError, OSError, TimeoutError) as exc:
                report.errors[name] = str(exc) or type(exc).__name__
                log.warning("slave sync of %s from %s failed: %s", name, self.master_addr, exc)
                continue
            except Exception as exc:  # a bad body must not end the periodic sync
                report.errors[name] = f"unexpected: {exc!r}"
                log.exception("slave sync of %s from %s failed", name, self.master_addr)
                continue
            (report.applied if applied else report.unchanged).append(name)
        self.rounds += 1
        self.last_report = report
        return report

    def _steps(self) -> tuple[tuple[str, Callable[[], Awaitable[bool]]], ...]:
        return (
            (TOPIC_CONFIG, self._sync_topic_config),
            (CONSUMER_OFFSET, self._sync_consumer_offset),
            (DELAY_OFFSET, self._sync_delay_offset),
            (SUBSCRIPTION_GROUP, self._sync_subscription_group),
        )

    async def _sync_topic_config(self) -> bool:
        wrapper = TopicConfigSerializeWrapper.decode(
            await self._call(RequestCode.GET_ALL_TOPIC_CONFIG)
        )
        if self._topic_version == wrapper.data_version:
            return False
        self._targets.replace_topic_configs(wrapper)
        self._topic_version = wrapper.data_version
        return True

    async def _sync_consumer_offset(self) -> bool:
        wrapper = ConsumerOffsetSerializeWrapper.decode(
            await self._call(RequestCode.GET_ALL_CONSUMER_OFFSET)
        )
        self._targets.merge_consumer_offsets(wrapper)
        return True

    async def _sync_delay_offset(self) -> bool:
        raw = await self._call(RequestCode.GET_ALL_DELAY_OFFSET)
        if not raw:
            return False
        self._targets.replace_delay_offsets(raw)
        return True

    async def _sync_subscription_group(self) -> bool:
        wrapper = SubscriptionGroupWrapper.decode(
            await self._call(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        )
        if self._group_version == wrapper.data_version:
            return False
        self._targets.replace_subscription_groups(wrapper)
        self._group_version = wrapper.data_version
        return True

    # --- periodic task -----------------------------------------------------------------------

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="slave-sync")

    def kick(self) -> None:
        """Copy the master's topic configs now (a topic it has that we lack has shown up)."""
        self._due.add(TOPIC_CONFIG)
        self._kicked.set()

    def on_master_versions(self, versions: MetadataVersions) -> None:
        """A metadata notice from the master (HA connection): copy what moved now."""
        moved = moved_items(self._notified, versions)
        self._notified = versions
        if moved:
            self._due |= moved
            self._kicked.set()

    async def sync_due_now(self) -> None:
        """Copy the items due, out of round (offsets not more often than their minimum interval)."""
        loop = asyncio.get_running_loop()
        for name, step in self._steps():
            if name not in self._due:
                continue
            now = loop.time()
            if name == CONSUMER_OFFSET:
                if now < self._offsets_at + self.offsets_interval_s:
                    continue
                self._offsets_at = now
            self._due.discard(name)
            self.prompt_syncs += 1
            try:
                await step()
                if name == CONSUMER_OFFSET:
                    took = loop.time() - now
                    self.offsets_interval_s = max(
                        OFFSETS_MIN_INTERVAL_S, OFFSETS_DUTY_FACTOR * took
                    )
            except (SlaveSyncError, BodyError, RemotingError, OSError, TimeoutError) as exc:
                # the periodic round copies it again: retrying here would hammer a failing master
                log.warning("prompt %s sync from %s failed: %s", name, self.master_addr, exc)
            except Exception:
                log.exception("prompt %s sync from %s failed", name, self.master_addr)

    def _wake_at(self, next_round: float) -> float | None:
        """When the loop must run again without a kick: the next round, or due offsets; None
        (only a kick) while no master address is known."""
        if not self.master_addr:
            return None
        if not self._due:
            return next_round
        if self._due - {CONSUMER_OFFSET}:
            return asyncio.get_running_loop().time()
        return min(next_round, self._offsets_at + self.offsets_interval_s)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        next_round = loop.time()
        while True:
            # cleared before the work: a kick during it makes the wait below return at once
            self._kicked.clear()
            if loop.time() >= next_round:
                # without an address the round stays due until set_master_addr kicks
                if self.master_addr:
                    self._due.clear()
                    await self.sync_all()
                    next_round = loop.time() + self.interval_s
            elif self._due and self.master_addr:
                await self.sync_due_now()
            # the periodic cadence, cut short by a kick or by offsets falling due
            wake_at = self._wake_at(next_round)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(
                    None if wake_at is None else max(wake_at - loop.time(), 0)
                ):
                    await self._kicked.wait()

    async def shutdown(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)
