"""The remoting clients of the proxy (upstream ``RemotingChannelManager`` with the proxy's
ConsumerManager/ProducerManager): who heartbeat which group over which connection. The brokers
never see these clients, so the proxy answers for them: a group's consumer ids (rebalance), its
subscriptions (pulls without one), its connections, and the producer a transaction check goes to.
A connection that closed drops out the next time it is looked at."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from ferrymq.remoting import bodies
from ferrymq.remoting.channel import Channel


@dataclass(slots=True)
class ConsumerClient:
    channel: Channel
    client_id: str
    language: str
    version: int
    data: bodies.ConsumerData


@dataclass(slots=True)
class ProducerClient:
    channel: Channel
    client_id: str


class RemotingClients:
    def __init__(self) -> None:
        self._consumers: dict[str, dict[Channel, ConsumerClient]] = {}
        self._producers: dict[str, dict[Channel, ProducerClient]] = {}
        self._turn = itertools.count()

    def heartbeat(
        self, channel: Channel, data: bodies.HeartbeatData, language: str, version: int
    ) -> None:
        for producer in data.producer_data_set:
            group = self._producers.setdefault(producer.group_name, {})
            group[channel] = ProducerClient(channel, data.client_id)
        for consumer in data.consumer_data_set:
            members = self._consumers.setdefault(consumer.group_name, {})
            members[channel] = ConsumerClient(channel, data.client_id, language, version, consumer)

    def unregister(
        self, channel: Channel, producer_group: str | None, consumer_group: str | None
    ) -> None:
        if producer_group:
            self._producers.get(producer_group, {}).pop(channel, None)
        if consumer_group:
            self._consumers.get(consumer_group, {}).pop(channel, None)

    def consumers(self, group: str) -> list[ConsumerClient]:
        members = self._consumers.get(group, {})
        for channel in [c for c in members if not c.is_open]:
            del members[channel]
        return list(members.values())

    def producers(self, group: str) -> list[ProducerClient]:
        members = self._producers.get(group, {})
        for channel in [c for c in members if not c.is_open]:
            del members[channel]
        return list(members.values())

    def producer_groups(self) -> set[str]:
        return {g for g in self._producers if self.producers(g)}

    def consumer_ids(self, group: str) -> list[str]:
        """Each live client id of ``group`` once, in a stable order (the rebalance input)."""
        return sorted({c.client_id for c in self.consumers(group)})

    def subscription(self, group: str, topic: str) -> bodies.SubscriptionData | None:
        """The subscription of ``topic`` the group's newest heartbeat holds."""
        for client in reversed(self.consumers(group)):
            for sub in client.data.subscription_data_set:
                if sub.topic == topic:
                    return sub
        return None

    def connection(self, group: str) -> bodies.ConsumerConnection | None:
        """GET_CONSUMER_CONNECTION_LIST's answer for ``group``; None when none is online."""
        members = self.consumers(group)
        if not members:
            return None
        last = members[-1].data
        table: dict[str, bodies.SubscriptionData] = {}
        for client in members:
            for sub in client.data.subscription_data_set:
                table[sub.topic] = sub
        return bodies.ConsumerConnection(
            connection_set=[
                bodies.Connection(
                    client_id=c.client_id,
                    client_addr=c.channel.remote_addr,
                    language=c.language,
                    version=c.version,
                )
                for c in members
            ],
            subscription_table=table,
            consume_type=last.consume_type,
            message_model=last.message_model,
            consume_from_where=last.consume_from_where,
        )

    def next_producer(self, group: str) -> ProducerClient | None:
        """One live producer of ``group`` (round robin), for a broker's transaction check."""
        members = self.producers(group)
        if not members:
            return None
        return members[next(self._turn) % len(members)]
