"""Registration with every NameServer (upstream BrokerOuterAPI.registerBrokerAll / unregisterBrokerAll).

A registration carries the broker's whole topic config; it is sent to all NameServers in parallel at
start-up, every registerNameServerPeriod (30 s), and at once after a topic change. A NameServer that
does not answer is logged and retried next round; the others are unaffected. The answer of the
master's entry (haServerAddr, masterAddr) is handed to ``on_result`` (slaves use it to find the master).

A slave that does not know its master yet (it started before the master registered, as pods of one
group started in parallel do) registers again after 1 s, doubling up to 5 s, instead of
waiting a whole period: under SYNC_MASTER its master answers every send SLAVE_NOT_AVAILABLE until
the slave connects, so on the real node a new group took every write for 30 s after it was routed
and Ready, and none succeeded (upstream waits the period).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import zlib
from collections.abc import Callable
from dataclasses import dataclass

from ferrymq.broker.config import BrokerConfig
from ferrymq.remoting.bodies import RegisterBrokerBody, TopicConfigSerializeWrapper
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.errors import RemotingError
from ferrymq.remoting.headers import (
    RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader,
    UnRegisterBrokerRequestHeader,
)
from ferrymq.tasks import cancel_and_wait, raise_if_cancelling

log = logging.getLogger(__name__)


# the first quick retry of a slave that has no master yet (seconds; doubles up to MASTER_RETRY_MAX_S)
MASTER_RETRY_S = 1.0
MASTER_RETRY_MAX_S = 5.0


def next_wait(period: float, retry: float, wants_master: bool) -> tuple[float, float]:
    """(seconds until the next round, the retry after that): a slave without a master retries
    quickly, doubling up to 5 s (a master starting late is found within 5 s of its registration);
    everyone else waits the period."""
    if not wants_master:
        return period, MASTER_RETRY_S
    wait = min(retry, period)
    return wait, min(retry * 2, MASTER_RETRY_MAX_S, period)


@dataclass(slots=True)
class RegisterOutcome:
    namesrv_addr: str
    ok: bool
    ha_server_addr: str | None = None
    master_addr: str | None = None
    error: str | None = None


def build_register_request(
    config: BrokerConfig,
    wrapper: TopicConfigSerializeWrapper,
    ha_server_addr: str | None,
    broker_role: str | None = None,
) -> RemotingCommand:
    body = RegisterBrokerBody(topic_config_serialize_wrapper=wrapper).encode()
    header = RegisterBrokerRequestHeader(
        broker_name=config.broker_name,
        broker_addr=config.broker_addr,
        cluster_name=config.broker_cluster_name,
        broker_id=config.broker_id,
        ha_server_addr=ha_server_addr,
        compressed=False,
        body_crc32=zlib.crc32(body) & 0x7FFFFFFF,
        broker_role=broker_role,
    )
    return RemotingCommand.request(RequestCode.REGISTER_BROKER, header.to_ext(), body)


class BrokerRegistration:
    def __init__(
        self,
        config: BrokerConfig,
        client: RemotingClient,
        wrapper: Callable[[], TopicConfigSerializeWrapper],
        *,
        ha_server_addr: Callable[[], str | None] = lambda: None,
        on_result: Callable[[RegisterOutcome], None] = lambda outcome: None,
        broker_role: str | None = None,
        wants_master: Callable[[], bool] = lambda: False,
    ) -> None:
        self.broker_role = broker_role
        self.wants_master = wants_master
        self.config = config
        self.client = client
        self.wrapper = wrapper
        self.ha_server_addr = ha_server_addr
        self.on_result = on_result
        self._task: asyncio.Task[None] | None = None
        self._kick = asyncio.Event()
        self.rounds = 0

    async def register_all(self) -> list[RegisterOutcome]:
        addrs = self.config.namesrv_addrs
        if not addrs:
            return []
        wrapper = self.wrapper()
        outcomes = await asyncio.gather(*(self._register_one(addr, wrapper) for addr in addrs))
        self.rounds += 1
        for outcome in outcomes:
            if outcome.ok:
                self.on_result(outcome)
        return list(outcomes)

    async def _register_one(
        self, addr: str, wrapper: TopicConfigSerializeWrapper
    ) -> RegisterOutcome:
        request = build_register_request(
            self.config, wrapper, self.ha_server_addr(), self.broker_role
        )
        timeout = self.config.register_broker_timeout_mills / 1000
        try:
            response = await self.client.invoke(addr, request, timeout)
        except (RemotingError, OSError, ValueError) as exc:
            raise_if_cancelling()
            log.warning("register to NameServer %s failed: %s", addr, exc)
            return RegisterOutcome(addr, False, error=str(exc))
        if response.code != ResponseCode.SUCCESS:
            log.error(
                "NameServer %s refused registration (code %d): %s",
                addr,
                response.code,
                response.remark,
            )
            return RegisterOutcome(addr, False, error=response.remark)
        reply = RegisterBrokerResponseHeader.from_ext(response.ext_fields)
        return RegisterOutcome(addr, True, reply.ha_server_addr, reply.master_addr)

    async def unregister_all(self, budget: float | None = None) -> None:
        """UNREGISTER_BROKER to every NameServer in parallel, all within ``budget`` seconds
        (default: registerBrokerTimeoutMills); a NameServer that does not answer is logged."""
        header = UnRegisterBrokerRequestHeader(
            broker_name=self.config.broker_name,
            broker_addr=self.config.broker_addr,
            cluster_name=self.config.broker_cluster_name,
            broker_id=self.config.broker_id,
        ).to_ext()
        timeout = self.config.register_broker_timeout_mills / 1000
        if budget is not None:
            timeout = min(timeout, budget)

        async def one(addr: str) -> None:
            request = RemotingCommand.request(RequestCode.UNREGISTER_BROKER, header)
            try:
                await self.client.invoke(addr, request, timeout)
                log.info("unregistered from NameServer %s", addr)
            except (RemotingError, OSError) as exc:
                raise_if_cancelling()
                log.warning("unregister from NameServer %s failed: %s", addr, exc)

        try:
            # one budget for the whole round: a connect that hangs counts against it too
            async with asyncio.timeout(timeout):
                await asyncio.gather(*(one(addr) for addr in self.config.namesrv_addrs))
        except TimeoutError:
            log.warning("unregister from NameServers not finished within %.1fs", timeout)

    def trigger(self) -> None:
        """Register now (after a topic or permission change) instead of at the next period."""
        self._kick.set()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        retry = MASTER_RETRY_S
        while True:
            try:
                await self.register_all()
            except Exception:
                log.exception("registration round failed")
            period = max(10_000, min(60_000, self.config.register_name_server_period)) / 1000
            period, retry = next_wait(period, retry, self.wants_master())
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for swallows a cancel that
            # arrives as the kick fires (a topic created just before shutdown), and stop() hung
            # for a whole period
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(period):
                    await self._kick.wait()
            self._kick.clear()

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)
