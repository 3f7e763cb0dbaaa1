"""Consumer and producer managers (upstream ConsumerManager, ConsumerGroupInfo, ProducerManager).

Clients announce themselves with HEART_BEAT on a connection; a connection silent for
channelExpiredTimeout (120 s) or closed is dropped. When the set of consumers in a group changes, every
member gets NOTIFY_CONSUMER_IDS_CHANGED (oneway) so it rebalances at once instead of within 20 s.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ferrymq.remoting.bodies import (
    ConsumeFromWhere,
    ConsumeType,
    MessageModel,
    SubscriptionData,
)
from ferrymq.remoting.codes import RequestCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.headers import NotifyConsumerIdsChangedRequestHeader

log = logging.getLogger(__name__)


@dataclass(slots=True)
class ClientChannelInfo:
    channel: Any  # ferrymq.remoting.channel.Channel (Any keeps the tables testable with stand-ins)
    client_id: str
    language: str
    version: int
    last_update_timestamp: int

    @property
    def client_addr(self) -> str:
        return str(getattr(self.channel, "remote_addr", "?"))


@dataclass(slots=True)
class ConsumerGroupInfo:
    group_name: str
    consume_type: ConsumeType
    message_model: MessageModel
    consume_from_where: ConsumeFromWhere
    channels: dict[int, ClientChannelInfo] = field(default_factory=dict)
    subscription_table: dict[str, SubscriptionData] = field(default_factory=dict)
    last_update_timestamp: int = 0

    def client_ids(self) -> list[str]:
        return sorted(info.client_id for info in self.channels.values())

    def find_subscription(self, topic: str) -> SubscriptionData | None:
        return self.subscription_table.get(topic)

    def update_channel(
        self,
        info: ClientChannelInfo,
        consume_type: ConsumeType,
        message_model: MessageModel,
        consume_from_where: ConsumeFromWhere,
    ) -> bool:
        """Record a heartbeat; True when this is a new consumer of the group."""
        self.consume_type = consume_type
        self.message_model = message_model
        self.consume_from_where = consume_from_where
        key = id(info.channel)
        old = self.channels.get(key)
        self.channels[key] = info
        self.last_update_timestamp = info.last_update_timestamp
        return old is None or old.client_id != info.client_id

    def update_subscriptions(self, subs: Iterable[SubscriptionData], now_ms: int) -> bool:
        """Replace the subscription set; True when topics were added or removed."""
        new = {s.topic: s for s in subs}
        changed = set(new) != set(self.subscription_table)
        for topic, sub in new.items():
            old = self.subscription_table.get(topic)
            # keep the stored one if the client re-sent an older version
            if old is None or sub.sub_version >= old.sub_version:
                self.subscription_table[topic] = sub
        for topic in list(self.subscription_table):
            if topic not in new:
                del self.subscription_table[topic]
        self.last_update_timestamp = now_ms
        return changed


class ConsumerManager:
    def __init__(self, *, channel_expired_ms: int, notify_enabled: bool = True) -> None:
        self.table: dict[str, ConsumerGroupInfo] = {}
        self.channel_expired_ms = channel_expired_ms
        self.notify_enabled = notify_enabled
        # observers of group membership changes (e.g. metrics); called with the group name
        self.listeners: list[Callable[[str], None]] = []

    def get(self, group: str) -> ConsumerGroupInfo | None:
        return self.table.get(group)

    def register_consumer(
        self,
        group: str,
        info: ClientChannelInfo,
        consume_type: ConsumeType,
        message_model: MessageModel,
        consume_from_where: ConsumeFromWhere,
        subscriptions: Iterable[SubscriptionData],
        *,
        notify: bool,
    ) -> bool:
        """Record a consumer heartbeat; returns True when the group's membership changed."""
        group_info = self.table.get(group)
        if group_info is None:
            group_info = ConsumerGroupInfo(group, consume_type, message_model, consume_from_where)
            self.table[group] = group_info
        changed = group_info.update_channel(info, consume_type, message_model, consume_from_where)
        group_info.update_subscriptions(subscriptions, info.last_update_timestamp)
        if changed:
            log.info("consumer %s joined group %s from %s", info.client_id, group, info.client_addr)
            self._changed(group, notify)
        return changed

    def unregister_consumer(self, group: str, channel: Any, *, notify: bool) -> bool:
        group_info = self.table.get(group)
        if group_info is None:
            return False
        removed = group_info.channels.pop(id(channel), None)
        if removed is None:
            return False
        log.info("consumer %s left group %s", removed.client_id, group)
        if not group_info.channels:
            del self.table[group]
        self._changed(group, notify)
        return True

    def on_channel_closed(self, channel: Any) -> list[str]:
        """Drop a closed connection from every group; returns the groups that changed."""
        changed = []
        for group in list(self.table):
            if self.unregister_consumer(group, channel, notify=self.notify_enabled):
                changed.append(group)
        return changed

    def scan_not_active(self, now_ms: int) -> list[str]:
        """Drop consumers silent for longer than the expiry; close their connections."""
        expired: list[str] = []
        for group, group_info in list(self.table.items()):
            group_changed = False
            for key, info in list(group_info.channels.items()):
                if now_ms - info.last_update_timestamp > self.channel_expired_ms:
                    log.warning("consumer %s of %s expired; closing", info.client_id, group)
                    del group_info.channels[key]
                    close = getattr(info.channel, "close", None)
                    if close is not None:
                        close()
                    expired.append(info.client_id)
                    group_changed = True
            if not group_info.channels:
                del self.table[group]
            if group_changed:
                self._changed(group, self.notify_enabled)
        return expired

    def groups_of_topic(self, topic: str) -> list[str]:
        return sorted(g for g, info in self.table.items() if topic in info.subscription_table)

    def _changed(self, group: str, notify: bool) -> None:
        for listener in self.listeners:
            listener(group)
        if not (notify and self.notify_enabled):
            return
        group_info = self.table.get(group)
        if group_info is None:
            return
        header = NotifyConsumerIdsChangedRequestHeader(consumer_group=group).to_ext()
        for info in group_info.channels.values():
            request = RemotingCommand.request(
                RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, header, oneway=True
            )
            send = getattr(info.channel, "send", None)
            if send is not None:
                send(request)


class ProducerManager:
    def __init__(self, *, channel_expired_ms: int) -> None:
        self.table: dict[str, dict[int, ClientChannelInfo]] = {}
        self.channel_expired_ms = channel_expired_ms

    def register_producer(self, group: str, info: ClientChannelInfo) -> None:
        self.table.setdefault(group, {})[id(info.channel)] = info

    def unregister_producer(self, group: str, channel: Any) -> None:
        channels = self.table.get(group)
        if channels is None:
            return
        channels.pop(id(channel), None)
        if not channels:
            del self.table[group]

    def on_channel_closed(self, channel: Any) -> None:
        for group in list(self.table):
            self.unregister_producer(group, channel)

    def scan_not_active(self, now_ms: int) -> list[str]:
        expired: list[str] = []
        for group, channels in list(self.table.items()):
            for key, info in list(channels.items()):
                if now_ms - info.last_update_timestamp > self.channel_expired_ms:
                    del channels[key]
                    close = getattr(info.channel, "close", None)
                    if close is not None:
                        close()
                    expired.append(info.client_id)
            if not channels:
                del self.table[group]
        return expired

    def channels_of(self, group: str) -> list[ClientChannelInfo]:
        return list(self.table.get(group, {}).values())


def find_producer_channel(producers: ProducerManager, client_id: str) -> Any | None:
    """The connection of the producer client ``client_id`` in any group (upstream
    ProducerManager.findChannel), for pushing a reply to a requester; None if not connected."""
    for channels in producers.table.values():
        for info in channels.values():
            if info.client_id == client_id:
                return info.channel
    return None
