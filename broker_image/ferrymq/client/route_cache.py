"""Topic routes as a client sees them (upstream MQClientInstance's route tables and TopicPublishInfo).

A route (``TopicRouteData`` from the NameServer) turns into two queue lists:

- publish queues: ``writeQueueNums`` queues on each broker whose queue data is writable and that has
  a master, ordered by broker name then queue id (seeds-digest PR6);
- subscribe queues: ``readQueueNums`` queues on each broker whose queue data is readable.

The conversions are pure; :class:`RouteCache` holds the latest route per topic and the broker
address table merged from all routes, and says whether a new route differs from the cached one.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from ferrymq.client.allocate import MessageQueue
from ferrymq.mixall import MASTER_ID
from ferrymq.remoting.bodies import PERM_READ, PERM_WRITE, TopicRouteData


def publish_queues(topic: str, route: TopicRouteData) -> list[MessageQueue]:
    """Upstream topicRouteData2TopicPublishInfo (orderTopicConf ``broker:n;broker:n`` honoured)."""
    if route.order_topic_conf:
        out: list[MessageQueue] = []
        for item in route.order_topic_conf.split(";"):
            name, _, nums = item.partition(":")
            if name and nums.isdigit():
                out.extend(MessageQueue(topic, name, i) for i in range(int(nums)))
        return out
    masters = {bd.broker_name for bd in route.broker_datas if bd.broker_addrs.get(MASTER_ID)}
    out = []
    for qd in sorted(route.queue_datas, key=lambda q: q.broker_name):
        if qd.perm & PERM_WRITE and qd.broker_name in masters:
            out.extend(MessageQueue(topic, qd.broker_name, i) for i in range(qd.write_queue_nums))
    return out


def subscribe_queues(topic: str, route: TopicRouteData) -> list[MessageQueue]:
    """Upstream topicRouteData2TopicSubscribeInfo: every readable queue, sorted."""
    out = [
        MessageQueue(topic, qd.broker_name, i)
        for qd in route.queue_datas
        if qd.perm & PERM_READ
        for i in range(qd.read_queue_nums)
    ]
    return sorted(out)


def broker_addrs(route: TopicRouteData) -> dict[str, dict[int, str]]:
    """brokerName -> {brokerId: addr} of one route."""
    return {bd.broker_name: dict(bd.broker_addrs) for bd in route.broker_datas}


def route_signature(route: TopicRouteData) -> object:
    """What matters of a route for change detection (order-insensitive)."""
    return (
        route.order_topic_conf,
        tuple(
            sorted(
                (q.broker_name, q.read_queue_nums, q.write_queue_nums, q.perm)
                for q in route.queue_datas
            )
        ),
        tuple(
            sorted(
                (b.broker_name, tuple(sorted(b.broker_addrs.items()))) for b in route.broker_datas
            )
        ),
    )


@dataclass
class TopicPublishInfo:
    topic: str
    queues: list[MessageQueue]
    route: TopicRouteData
    # sendWhichQueue: a counter shared by every send of this topic
    _counter: itertools.count[int] = field(default_factory=itertools.count)

    def next_index(self) -> int:
        return next(self._counter)

    @property
    def ok(self) -> bool:
        return bool(self.queues)


@dataclass
class RouteCache:
    routes: dict[str, TopicRouteData] = field(default_factory=dict)
    publish: dict[str, TopicPublishInfo] = field(default_factory=dict)
    subscribe: dict[str, list[MessageQueue]] = field(default_factory=dict)
    brokers: dict[str, dict[int, str]] = field(default_factory=dict)

    def update(self, topic: str, route: TopicRouteData) -> bool:
        """Store a fresh route; True when it differs from the cached one."""
        old = self.routes.get(topic)
        changed = old is None or route_signature(old) != route_signature(route)
        self.routes[topic] = route
        self.brokers.update(broker_addrs(route))
        if changed or topic not in self.publish:
            info = self.publish.get(topic)
            queues = publish_queues(topic, route)
            if info is None:
                self.publish[topic] = TopicPublishInfo(topic, queues, route)
            else:
                # keep the round-robin counter going across route changes
                info.queues = queues
                info.route = route
            self.subscribe[topic] = subscribe_queues(topic, route)
        return changed

    def master_addr(self, broker_name: str) -> str | None:
        addrs = self.brokers.get(broker_name)  # no throwaway {} per send
        return addrs.get(MASTER_ID) if addrs is not None else None

    def any_addr(self, broker_name: str) -> str | None:
        """The master, else the lowest-id slave (for reads such as offsets and pulls)."""
        addrs = self.brokers.get(broker_name, {})
        if MASTER_ID in addrs:
            return addrs[MASTER_ID]
        return addrs[min(addrs)] if addrs else None

    def all_master_addrs(self) -> list[str]:
        return sorted({a[MASTER_ID] for a in self.brokers.values() if MASTER_ID in a})

    def all_addrs(self) -> list[str]:
        return sorted({addr for a in self.brokers.values() for addr in a.values()})

    def forget(self, topic: str) -> None:
        self.routes.pop(topic, None)
        self.publish.pop(topic, None)
        self.subscribe.pop(topic, None)
