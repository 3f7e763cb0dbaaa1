"""A slave copies the master's metadata every 10 s (upstream ``broker/slave/SlaveSynchronize``).

The CommitLog arrives through the HA stream, but topic configs, consumer offsets, delay offsets and
subscription groups live in the master's JSON files. The slave fetches them over the ordinary
remoting port with GET_ALL_TOPIC_CONFIG, GET_ALL_CONSUMER_OFFSET, GET_ALL_DELAY_OFFSET and
GET_ALL_SUBSCRIPTIONGROUP_CONFIG and hands them to the broker's managers through
:class:`SlaveSyncTargets`. Topic configs and subscription groups are only re-applied when the
master's dataVersion changed; each of the four syncs fails alone, logged, and is retried next round.

Between rounds, :meth:`SlaveSynchronize.kick` asks for the topic configs at once: the broker calls
it when replicated records of a topic the slave does not know yet are dispatched, so a topic
created on the master reaches the slave with its first messages, not up to 10 s later.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from typing import Protocol

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
from ferrymq.remoting.eventloop import cancel_and_wait

log = logging.getLogger(__name__)

REQUEST_TIMEOUT_S = 3.0


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
        self.kicked_syncs = 0
        self.rounds = 0
        self.last_report: SyncReport | None = None

    def set_master_addr(self, addr: str | None) -> None:
        if addr != self.master_addr:
            # A different master: its data versions mean nothing against the old one's.
            self._topic_version = self._group_version = None
        self.master_addr = addr or None

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
        steps = (
            ("topicConfig", self._sync_topic_config),
            ("consumerOffset", self._sync_consumer_offset),
            ("delayOffset", self._sync_delay_offset),
            ("subscriptionGroup", self._sync_subscription_group),
        )
        for name, step in steps:
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
        self._kicked.set()

    async def sync_topics_now(self) -> bool:
        """The topic-config step alone, out of round; False when it failed (logged)."""
        self.kicked_syncs += 1
        try:
            return await self._sync_topic_config()
        except (SlaveSyncError, BodyError, RemotingError, OSError, TimeoutError) as exc:
            log.warning("prompt topic config sync from %s failed: %s", self.master_addr, exc)
            return False

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        next_round = loop.time()
        while True:
            if loop.time() >= next_round:
                if self.master_addr:
                    await self.sync_all()
                next_round = loop.time() + self.interval_s
            elif self._kicked.is_set() and self.master_addr:
                self._kicked.clear()
                await self.sync_topics_now()
            # the periodic cadence, cut short by a kick
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(next_round - loop.time(), 0)):
                    await self._kicked.wait()

    async def shutdown(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)
