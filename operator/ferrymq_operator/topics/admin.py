"""Broker admin calls for Topic and ConsumerGroup resources, over the remoting protocol.

Upstream codes: GET_ALL_TOPIC_CONFIG (21), UPDATE_AND_CREATE_TOPIC (17, with the RocketMQ 5
``attributes`` field), DELETE_TOPIC_IN_BROKER (215), DELETE_TOPIC_IN_NAMESRV (216),
GET_ALL_CONSUMER_OFFSET (43), GET_MAX_OFFSET (30), GET_MIN_OFFSET (31), GET_CONSUME_STATS (208),
GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201), UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200),
DELETE_SUBSCRIPTIONGROUP (207).

:class:`ObjectAdmin` is what the reconciler needs; :class:`RemotingObjectAdmin` implements it with
one short-lived connection set per call (no connection outlives the reconcile that needed it).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol, TypeVar

from ferrymq.broker.topic_attributes import operations_text
from ferrymq.client.allocate import MessageQueue
from ferrymq.client.broker_api import BrokerApi
from ferrymq.client.errors import BrokerUnreachableError, MQClientError, MQResponseError
from ferrymq.client.namesrv_api import NamesrvApi
from ferrymq.remoting import bodies
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.headers import CreateTopicRequestHeader
from ferrymq.remoting.processor import ProcessorTable

from ferrymq_operator import timeouts
from ferrymq_operator.broker_admin import AdminUnavailable
from ferrymq_operator.security import session
from ferrymq_operator.topics.plan import GROUP_FIELDS, QueueBacklog, TopicState
from ferrymq_operator.topics.unmanaged import Inventory

_T = TypeVar("_T")


class AdminRefused(RuntimeError):
    """A broker answered an admin request with an error (the remark says why)."""


class ObjectAdmin(Protocol):
    async def topics(self, addr: str) -> dict[str, TopicState]:
        """Every topic a broker holds."""

    async def put_topic(
        self, addr: str, topic: str, state: TopicState, current: TopicState | None
    ) -> None:
        """Create or update a topic to ``state`` (attributes made exactly ``state``'s)."""

    async def delete_topic(self, addr: str, topic: str) -> None:
        """Remove a topic from one broker (its queues' messages become unreachable)."""

    async def delete_route(self, namesrv_addr: str, topic: str, cluster: str) -> None:
        """Remove a topic's route of one cluster from every NameServer."""

    async def backlogs(
        self, addr: str, broker_name: str, topic: str, queues: range
    ) -> list[QueueBacklog]:
        """Offsets of the given queues and of every consumer group committed on the topic."""

    async def groups(self, addr: str) -> dict[str, dict[str, Any]]:
        """Every subscription group a broker holds, fields as in ``plan.GROUP_FIELDS``."""

    async def put_group(self, addr: str, group: str, config: Mapping[str, Any]) -> None:
        """Create or update a subscription group."""

    async def delete_group(self, addr: str, group: str) -> None:
        """Remove a subscription group (committed offsets are kept)."""

    async def group_lag(self, addr: str, group: str) -> dict[str, int]:
        """Topic -> unconsumed messages of the group on one broker."""

    async def inventory(self, addr: str) -> Inventory:
        """Every topic and subscription group of one master, with its broker and cluster name."""


class RemotingObjectAdmin:
    """ObjectAdmin with ferrymq's own client (BrokerApi, NamesrvApi)."""

    def __init__(self, timeout_seconds: float) -> None:
        self.timeout_seconds = timeout_seconds

    async def _call(self, action: Callable[[RemotingClient], Awaitable[_T]]) -> _T:
        remoting = RemotingClient(
            ProcessorTable(),
            name="ferrymq-operator topics",
            rpc_hook=session.rpc_hook(),
            ssl_context=session.ssl_context(),
        )
        try:
            return await timeouts.within(self.timeout_seconds * 4, action(remoting))
        except (OSError, TimeoutError, BrokerUnreachableError) as error:
            raise AdminUnavailable(f"unreachable: {error}") from error
        except MQResponseError as error:
            raise AdminRefused(str(error)) from error
        except MQClientError as error:
            raise AdminUnavailable(str(error)) from error
        finally:
            await remoting.close()

    def _broker(self, remoting: RemotingClient) -> BrokerApi:
        return BrokerApi(remoting, self.timeout_seconds)

    async def topics(self, addr: str) -> dict[str, TopicState]:
        async def run(remoting: RemotingClient) -> bodies.TopicConfigSerializeWrapper:
            return await self._broker(remoting).get_all_topic_config(addr)

        wrapper = await self._call(run)
        return {
            name: TopicState(
                tc.read_queue_nums, tc.write_queue_nums, tc.perm, tc.order, dict(tc.attributes)
            )
            for name, tc in wrapper.topic_config_table.items()
        }

    async def put_topic(
        self, addr: str, topic: str, state: TopicState, current: TopicState | None
    ) -> None:
        header = CreateTopicRequestHeader(
            topic=topic,
            read_queue_nums=state.read_queue_nums,
            write_queue_nums=state.write_queue_nums,
            perm=state.perm,
            order=state.order,
            attributes=operations_text(current.attributes if current else {}, state.attributes)
            or None,
        )

        async def run(remoting: RemotingClient) -> None:
            await self._broker(remoting).create_topic(addr, header)

        await self._call(run)

    async def delete_topic(self, addr: str, topic: str) -> None:
        async def run(remoting: RemotingClient) -> None:
            await self._broker(remoting).delete_topic(addr, topic)

        await self._call(run)

    async def delete_route(self, namesrv_addr: str, topic: str, cluster: str) -> None:
        addrs = [a for a in namesrv_addr.split(";") if a]

        async def run(remoting: RemotingClient) -> None:
            await NamesrvApi(remoting, addrs, self.timeout_seconds).delete_topic(topic, cluster)

        await self._call(run)

    async def backlogs(
        self, addr: str, broker_name: str, topic: str, queues: range
    ) -> list[QueueBacklog]:
        async def run(remoting: RemotingClient) -> list[QueueBacklog]:
            api = self._broker(remoting)
            offsets = await api.get_all_consumer_offset(addr)
            groups = sorted(
                key.split("@", 1)[1] for key in offsets.offset_table if key.startswith(f"{topic}@")
            )
            committed: dict[int, dict[str, int]] = {q: {} for q in queues}
            for group in groups:
                table = offsets.offset_table.get(f"{topic}@{group}", {})
                for q in queues:
                    committed[q][group] = max(0, table.get(q, 0))
            out = []
            for q in queues:
                mq = MessageQueue(topic, broker_name, q)
                out.append(
                    QueueBacklog(
                        queue_id=q,
                        max_offset=max(0, await api.get_max_offset(addr, mq)),
                        min_offset=max(0, await api.get_min_offset(addr, mq)),
                        committed=committed[q],
                    )
                )
            return out

        return await self._call(run)

    async def groups(self, addr: str) -> dict[str, dict[str, Any]]:
        async def run(remoting: RemotingClient) -> bodies.SubscriptionGroupWrapper:
            return await self._broker(remoting).get_all_subscription_group_config(addr)

        wrapper = await self._call(run)
        return {
            name: {f: getattr(config, f) for f in GROUP_FIELDS}
            for name, config in wrapper.subscription_group_table.items()
        }

    async def put_group(self, addr: str, group: str, config: Mapping[str, Any]) -> None:
        body = bodies.SubscriptionGroupConfig(group_name=group, **config)

        async def run(remoting: RemotingClient) -> None:
            await self._broker(remoting).create_subscription_group(addr, body)

        await self._call(run)

    async def delete_group(self, addr: str, group: str) -> None:
        async def run(remoting: RemotingClient) -> None:
            await self._broker(remoting).delete_subscription_group(addr, group)

        await self._call(run)

    async def group_lag(self, addr: str, group: str) -> dict[str, int]:
        async def run(remoting: RemotingClient) -> bodies.ConsumeStats:
            return await self._broker(remoting).get_consume_stats(addr, group)

        stats = await self._call(run)
        out: dict[str, int] = {}
        for mq, wrapper in stats.offset_table.items():
            lag = max(0, wrapper.broker_offset - wrapper.consumer_offset)
            out[mq.topic] = out.get(mq.topic, 0) + lag
        return out

    async def inventory(self, addr: str) -> Inventory:
        async def run(remoting: RemotingClient) -> Inventory:
            api = self._broker(remoting)
            config = await api.get_broker_config(addr)
            topics = await api.get_all_topic_config(addr)
            groups = await api.get_all_subscription_group_config(addr)
            return Inventory(
                broker_name=config.get("brokerName", ""),
                cluster_name=config.get("brokerClusterName", ""),
                topics=frozenset(topics.topic_config_table),
                groups=frozenset(groups.subscription_group_table),
            )

        return await self._call(run)
