"""Drained scale-in of broker groups: stop writes, wait until consumers emptied the group, then
let the reconciler remove it.

Lowering ``spec.groups`` never deletes a group that still holds unconsumed messages:

1. writes stop: WIPE_WRITE_PERM_OF_BROKER on the group's master (kept across its registrations)
   and on every NameServer (producers move to the other groups at their next route refresh);
2. every consumer group that has offsets on the group's master must reach lag 0 there
   (GET_CONSUME_STATS: broker offset - committed offset, per queue, summed);
3. only then is the StatefulSet removed (claims kept unless ``storage.deleteClaimOnScaleDown``).

A consumer group with messages left and no online consumer cannot finish the drain by itself: the
drain says so (reason ``DrainBlocked``, naming the group) and keeps waiting; it never drops messages.
The decision is pure (:func:`assess`); :class:`RemotingDrainAdmin` does the admin calls through
ferrymq's AdminClient.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from ferrymq_operator import timeouts
from ferrymq_operator.security import session

MAX_LISTED = 5


@dataclass(frozen=True)
class GroupLag:
    """One consumer group's unconsumed messages on the draining broker group."""

    consumer_group: str
    lag: int
    online: bool


@dataclass(frozen=True)
class Assessment:
    drained: bool
    reason: str  # Drained | Draining | DrainBlocked
    message: str


class DrainUnavailable(RuntimeError):
    """The draining group's master (or the NameServers) could not be asked."""


class DrainAdmin(Protocol):
    async def stop_writes(self, namesrv_addr: str, broker_name: str, broker_addr: str) -> None:
        """WIPE_WRITE_PERM_OF_BROKER on the master and on every NameServer (idempotent)."""

    async def lags(self, namesrv_addr: str, broker_addr: str) -> list[GroupLag]:
        """Every consumer group with offsets on this master, with its lag there."""

    async def resume_writes(self, namesrv_addr: str, broker_name: str, broker_addr: str) -> None:
        """ADD_WRITE_PERM_OF_BROKER: the scale-in was called off (spec.groups raised again)."""


def assess(broker_name: str, lags: Sequence[GroupLag]) -> Assessment:
    """Drained when no consumer group has a message left on the broker group."""
    left = sorted((g for g in lags if g.lag > 0), key=lambda g: (-g.lag, g.consumer_group))
    if not left:
        checked = len(lags)
        return Assessment(
            True,
            "Drained",
            f"{broker_name}: writes stopped and all {checked} consumer groups have consumed "
            f"every message",
        )
    dead = [g for g in left if not g.online]
    listed = ", ".join(f"{g.consumer_group} ({g.lag} left)" for g in left[:MAX_LISTED])
    if len(left) > MAX_LISTED:
        listed += f" and {len(left) - MAX_LISTED} more"
    if dead:
        names = ", ".join(g.consumer_group for g in dead[:MAX_LISTED])
        return Assessment(
            False,
            "DrainBlocked",
            f"{broker_name}: writes stopped; waiting for {listed}; no consumer of {names} is "
            f"online, so the drain cannot finish until one consumes the messages (or the group's "
            f"offsets are moved on by an admin); nothing is deleted meanwhile",
        )
    return Assessment(
        False, "Draining", f"{broker_name}: writes stopped; waiting for consumers: {listed}"
    )


def consumer_groups_of(offset_keys: Sequence[str]) -> list[str]:
    """Consumer groups named in GET_ALL_CONSUMER_OFFSET keys ``topic@group``."""
    out = {key.split("@", 1)[1] for key in offset_keys if "@" in key and key.split("@", 1)[1]}
    return sorted(out)


class RemotingDrainAdmin:
    """DrainAdmin over the remoting protocol with ferrymq's AdminClient (short-lived per call)."""

    def __init__(self, timeout_seconds: float) -> None:
        self.timeout_seconds = timeout_seconds

    async def stop_writes(self, namesrv_addr: str, broker_name: str, broker_addr: str) -> None:
        await self._set_writable(namesrv_addr, broker_name, broker_addr, writable=False)

    async def resume_writes(self, namesrv_addr: str, broker_name: str, broker_addr: str) -> None:
        await self._set_writable(namesrv_addr, broker_name, broker_addr, writable=True)

    async def _set_writable(
        self, namesrv_addr: str, broker_name: str, broker_addr: str, *, writable: bool
    ) -> None:
        from ferrymq.client.admin import AdminClient
        from ferrymq.client.errors import MQClientError

        limit = self.timeout_seconds * 2
        try:
            async with AdminClient(
                namesrv_addr, timeout=self.timeout_seconds, security=session.current()
            ) as admin:
                broker, namesrv = admin.instance.broker, admin.instance.namesrv
                if writable:
                    await timeouts.within(limit, broker.add_write_perm(broker_addr))
                    await timeouts.within(limit, namesrv.add_write_perm(broker_name))
                else:
                    await timeouts.within(limit, broker.wipe_write_perm(broker_addr))
                    # The NameServers also mark the queues read-only at once (else they would
                    # until the broker's next registration).
                    await timeouts.within(limit, namesrv.wipe_write_perm(broker_name))
        except (OSError, TimeoutError, MQClientError) as error:
            action = "restore" if writable else "stop"
            raise DrainUnavailable(f"cannot {action} writes on {broker_name}: {error}") from error

    async def lags(self, namesrv_addr: str, broker_addr: str) -> list[GroupLag]:
        from ferrymq.client.admin import AdminClient
        from ferrymq.client.errors import MQClientError

        try:
            async with AdminClient(
                namesrv_addr, timeout=self.timeout_seconds, security=session.current()
            ) as admin:
                broker = admin.instance.broker
                offsets = await timeouts.within(
                    self.timeout_seconds * 2, broker.get_all_consumer_offset(broker_addr)
                )
                out = []
                for group in consumer_groups_of(list(offsets.offset_table)):
                    stats = await broker.get_consume_stats(broker_addr, group)
                    lag = sum(
                        max(0, w.broker_offset - w.consumer_offset)
                        for w in stats.offset_table.values()
                    )
                    online = False
                    if lag:
                        try:
                            conn = await broker.get_consumer_connection_list(broker_addr, group)
                            online = bool(conn.connection_set)
                        except MQClientError:
                            online = False  # the broker answers "not online" as an error
                    out.append(GroupLag(group, lag, online))
                return out
        except (OSError, TimeoutError, MQClientError) as error:
            raise DrainUnavailable(
                f"cannot read consume stats from {broker_addr}: {error}"
            ) from error
