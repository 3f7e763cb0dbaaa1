"""Drained scale-in of broker groups: stop writes, wait until consumers emptied the group, then
let the reconciler remove it.

Lowering ``spec.groups`` never deletes a group that still holds unconsumed messages:

1. writes stop: WIPE_WRITE_PERM_OF_BROKER on the group's master (kept across its registrations)
   and on every NameServer (producers move to the other groups at their next route refresh);
2. every consumer group that reads a topic held there must reach lag 0 there: the groups with
   offsets on the group's master, and the groups with offsets for the same topic on any other master
   of its route (a group that has not pulled from the new group yet has read none of its messages:
   its lag counts from the queue's first message, not 0); a retry topic is read by its own group;
3. a topic with messages there that no consumer group reads anywhere blocks the drain as well (it
   is named): nobody has read those acknowledged messages, so removing the group would lose them;
4. only then is the StatefulSet removed (claims kept unless ``storage.deleteClaimOnScaleDown``).

Dead-letter topics and the broker's internal system topics are not waited for.

A consumer group with messages left and no online consumer cannot finish the drain by itself: the
drain says so (reason ``DrainBlocked``, naming the group) and keeps waiting; it never drops messages.
The decision is pure (:func:`assess`); :class:`RemotingDrainAdmin` does the admin calls through
ferrymq's AdminClient.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from ferrymq import topic_validator
from ferrymq.topic_validator import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX

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
class UnreadTopic:
    """A topic holding messages on the draining group that no consumer group reads anywhere."""

    topic: str
    messages: int


@dataclass(frozen=True)
class Backlog:
    """What is left to read on the draining group."""

    groups: list[GroupLag]
    unread: list[UnreadTopic] = field(default_factory=list)


QueueRange = tuple[int, int]  # (min offset, max offset) of one queue


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

    async def lags(self, namesrv_addr: str, broker_addr: str) -> Backlog:
        """Every consumer group reading a topic held on this master, with its lag there, and the
        topics there that no group reads."""

    async def resume_writes(self, namesrv_addr: str, broker_name: str, broker_addr: str) -> None:
        """ADD_WRITE_PERM_OF_BROKER: the scale-in was called off (spec.groups raised again)."""


def assess(
    broker_name: str, lags: Sequence[GroupLag], unread: Sequence[UnreadTopic] = ()
) -> Assessment:
    """Drained when no consumer group has a message left on the broker group and no topic there
    holds messages that no group reads."""
    left = sorted((g for g in lags if g.lag > 0), key=lambda g: (-g.lag, g.consumer_group))
    orphans = sorted((t for t in unread if t.messages > 0), key=lambda t: (-t.messages, t.topic))
    if orphans:
        listed = ", ".join(f"{t.topic} ({t.messages})" for t in orphans[:MAX_LISTED])
        if len(orphans) > MAX_LISTED:
            listed += f" and {len(orphans) - MAX_LISTED} more"
        waiting = "; consumer groups with messages left: " + ", ".join(
            f"{g.consumer_group} ({g.lag} left)" for g in left[:MAX_LISTED]
        )
        return Assessment(
            False,
            "DrainBlocked",
            f"{broker_name}: writes stopped; topics with messages no consumer group has read: "
            f"{listed}{waiting if left else ''}; the drain waits until a consumer group reads them "
            f"(or an admin deletes the topic); nothing is deleted meanwhile",
        )
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


def is_waited_for(topic: str) -> bool:
    """Topics whose messages a drain waits for: user topics and retry topics (read by their
    group); not dead letters nor the broker's internal system topics."""
    if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return True
    return not (
        topic_validator.is_system_topic(topic)
        or topic.startswith(DLQ_GROUP_TOPIC_PREFIX)
        or topic.startswith("RMQ_SYS_")
    )


def backlog_of(
    queues: Mapping[str, Mapping[int, QueueRange]],
    offsets_here: Mapping[str, Mapping[int, int]],
    readers_elsewhere: Mapping[str, Iterable[str]],
) -> tuple[dict[str, int], list[UnreadTopic]]:
    """Per consumer group its unread messages on the draining master, and the unread topics.

    ``queues``: topic -> queueId -> (min, max offset) on the draining master; ``offsets_here``:
    its GET_ALL_CONSUMER_OFFSET table (``topic@group`` -> queueId -> offset); ``readers_elsewhere``:
    topic -> consumer groups with offsets for it on the topic's other masters. A reader without an
    offset for a queue here has read none of it (lag from the queue's min offset).
    """
    readers: dict[str, set[str]] = {}
    for key in offsets_here:
        topic, _, group = key.partition("@")
        if group:
            readers.setdefault(topic, set()).add(group)
    for topic, groups in readers_elsewhere.items():
        readers.setdefault(topic, set()).update(groups)
    lags: dict[str, int] = {}
    unread = []
    for topic in sorted(queues):
        ranges = queues[topic]
        held = sum(max(0, high - low) for low, high in ranges.values())
        groups = set(readers.get(topic, ()))
        if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            groups.add(topic.removeprefix(RETRY_GROUP_TOPIC_PREFIX))
        for group in sorted(groups):
            committed = offsets_here.get(f"{topic}@{group}", {})
            lag = sum(
                max(0, high - max(low, committed.get(qid, low)))
                for qid, (low, high) in ranges.items()
            )
            lags[group] = lags.get(group, 0) + lag
        if held and not groups and is_waited_for(topic):
            unread.append(UnreadTopic(topic, held))
    return lags, unread


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

    async def lags(self, namesrv_addr: str, broker_addr: str) -> Backlog:
        from ferrymq.client.admin import AdminClient
        from ferrymq.client.errors import MQClientError
        from ferrymq.mixall import MASTER_ID

        try:
            async with AdminClient(
                namesrv_addr, timeout=self.timeout_seconds, security=session.current()
            ) as admin:
                broker = admin.instance.broker
                limit = self.timeout_seconds * 2
                offsets = await timeouts.within(limit, broker.get_all_consumer_offset(broker_addr))
                topics = await timeouts.within(limit, broker.get_all_topic_config(broker_addr))
                queues: dict[str, dict[int, QueueRange]] = {}
                for topic in sorted(topics.topic_config_table):
                    if not is_waited_for(topic):
                        continue
                    stats = await timeouts.within(
                        limit, broker.get_topic_stats_info(broker_addr, topic)
                    )
                    ranges = {
                        mq.queue_id: (t.min_offset, t.max_offset)
                        for mq, t in stats.offset_table.items()
                    }
                    if any(high > low for low, high in ranges.values()):
                        queues[topic] = ranges
                # Who reads these topics elsewhere: the offsets on every master of their routes.
                elsewhere: dict[str, set[str]] = {}
                tables: dict[str, dict[str, dict[int, int]]] = {}
                for topic in queues:
                    try:
                        route = await timeouts.within(limit, admin.topic_route(topic))
                    except MQClientError:
                        continue  # no route (the group is the topic's only one, or unregistered)
                    for data in route.broker_datas:
                        master = data.broker_addrs.get(MASTER_ID)
                        if master is None:
                            continue
                        if master not in tables:
                            wrapper = await timeouts.within(
                                limit, broker.get_all_consumer_offset(master)
                            )
                            tables[master] = dict(wrapper.offset_table)
                        for key in tables[master]:
                            name, _, group = key.partition("@")
                            if name == topic and group:
                                elsewhere.setdefault(topic, set()).add(group)
                per_group, unread = backlog_of(queues, offsets.offset_table, elsewhere)
                out = []
                for group in sorted(per_group):
                    lag = per_group[group]
                    online = False
                    if lag:
                        try:
                            conn = await broker.get_consumer_connection_list(broker_addr, group)
                            online = bool(conn.connection_set)
                        except MQClientError:
                            online = False  # the broker answers "not online" as an error
                    out.append(GroupLag(group, lag, online))
                return Backlog(out, unread)
        except (OSError, TimeoutError, MQClientError) as error:
            raise DrainUnavailable(
                f"cannot read consume stats from {broker_addr}: {error}"
            ) from error
