"""QUERY_ASSIGNMENT (400) and SET_MESSAGE_REQUEST_MODE (401) (upstream ``QueryAssignmentProcessor``
and ``MessageRequestModeManager``): server-side rebalance, and the per (topic, group) choice between
PULL and POP that a Java push consumer with ``clientRebalance=false`` follows.

The modes live in ``config/messageRequestMode.json`` (``{"messageRequestModeMap": {topic: {group:
SetMessageRequestModeRequestBody}}}``), as upstream. With mode POP and ``popShareQueueNum`` <= 0
(or at least the number of clients - 1) every client gets every broker with queue id -1 ("pop from
all queues of that broker"); otherwise queues are allocated with the named strategy, each client
also taking the shares of the ``popShareQueueNum`` clients after it. The topic's queues come from
the NameServers' route (all broker groups), or this broker's own topic config when none answers.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson

from ferrymq.broker.client_registry import ConsumerManager
from ferrymq.broker.subscription_groups import SubscriptionGroupManager
from ferrymq.broker.topic_config import TopicConfigManager
from ferrymq.client.allocate import AllocateError, MessageQueue, allocate
from ferrymq.remoting.bodies import PERM_READ, TopicRouteData
from ferrymq.remoting.channel import Channel
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.server import RemotingServer
from ferrymq.store.json_file import AtomicFileWriter
from ferrymq.topic_validator import RETRY_GROUP_TOPIC_PREFIX

log = logging.getLogger(__name__)

__all__ = ["MessageRequestModeManager", "QueryAssignmentProcessor", "allocate_for_pop"]

MODES = ("PULL", "POP")


class MessageRequestModeManager:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._writer = AtomicFileWriter(path)
        self.table: dict[str, dict[str, dict[str, Any]]] = {}

    def load(self) -> None:
        if not self.path.exists():
            return
        try:
            raw = orjson.loads(self.path.read_bytes())
            table = raw.get("messageRequestModeMap", {}) if isinstance(raw, dict) else {}
            self.table = {t: dict(g) for t, g in table.items() if isinstance(g, dict)}
        except (orjson.JSONDecodeError, AttributeError) as exc:
            raise ValueError(f"{self.path} is unreadable: {exc}") from None

    async def persist(self) -> None:
        await self._writer.write(
            orjson.dumps({"messageRequestModeMap": self.table}, option=orjson.OPT_INDENT_2)
        )

    def get(self, topic: str, group: str) -> dict[str, Any] | None:
        return self.table.get(topic, {}).get(group)

    def set(self, topic: str, group: str, body: dict[str, Any]) -> None:
        self.table.setdefault(topic, {})[group] = body


def allocate_for_pop(
    strategy: str,
    group: str,
    client_id: str,
    mq_all: list[MessageQueue],
    cid_all: list[str],
    pop_share_queue_num: int,
) -> list[MessageQueue]:
    """Upstream QueryAssignmentProcessor.allocate4Pop, pure."""
    if pop_share_queue_num <= 0 or pop_share_queue_num >= len(cid_all) - 1:
        brokers = sorted({mq.broker_name for mq in mq_all})
        topic = mq_all[0].topic if mq_all else ""
        return [MessageQueue(topic, b, -1) for b in brokers]
    if client_id not in cid_all:
        return []
    if len(cid_all) <= len(mq_all):
        out = list(allocate(strategy, group, client_id, mq_all, cid_all))
        index = cid_all.index(client_id)
        for _ in range(pop_share_queue_num):
            index = (index + 1) % len(cid_all)
            out.extend(allocate(strategy, group, cid_all[index], mq_all, cid_all))
        return out
    return [mq_all[cid_all.index(client_id) % len(mq_all)]]


class QueryAssignmentProcessor:
    def __init__(
        self,
        modes: MessageRequestModeManager,
        topics: TopicConfigManager,
        groups: SubscriptionGroupManager,
        consumers: ConsumerManager,
        *,
        broker_name: str,
        route_of: Callable[[str], Awaitable[TopicRouteData | None]],
        default_mode: str = "PULL",
        default_pop_share_queue_num: int = -1,
    ) -> None:
        self.modes = modes
        self.topics = topics
        self.groups = groups
        self.consumers = consumers
        self.broker_name = broker_name
        self.route_of = route_of
        self.default_mode = default_mode
        self.default_pop_share_queue_num = default_pop_share_queue_num
        self._saving: set[asyncio.Task[None]] = set()

    def register_to(self, server: RemotingServer) -> None:
        server.register(RequestCode.QUERY_ASSIGNMENT, self.query_assignment)
        server.register(RequestCode.SET_MESSAGE_REQUEST_MODE, self.set_message_request_mode)

    async def _queues(self, topic: str) -> list[MessageQueue] | None:
        try:
            route = await self.route_of(topic)
        except Exception as exc:  # a NameServer problem: fall back to this broker's own queues
            log.warning("query assignment: no route for %s from the NameServers: %s", topic, exc)
            route = None
        if route is not None:
            return sorted(
                MessageQueue(topic, q.broker_name, i)
                for q in route.queue_datas
                if q.perm & PERM_READ
                for i in range(q.read_queue_nums)
            )
        config = self.topics.get(topic)
        if config is None:
            return None
        return [MessageQueue(topic, self.broker_name, i) for i in range(config.read_queue_nums)]

    async def query_assignment(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        try:
            body = request.body_json()
            if not isinstance(body, dict):
                raise ValueError("QueryAssignmentRequestBody is not a JSON object")
            topic = str(body["topic"])
            group = str(body["consumerGroup"])
            client_id = str(body.get("clientId") or "")
            model = str(body.get("messageModel") or "CLUSTERING")
            strategy = str(body.get("strategyName") or "AVG")
        except (KeyError, ValueError) as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, f"bad QUERY_ASSIGNMENT body: {exc}")
        mode_body = self.modes.get(topic, group)
        if mode_body is None:
            mode = "PULL" if topic.startswith(RETRY_GROUP_TOPIC_PREFIX) else self.default_mode
            share = self.default_pop_share_queue_num if mode == "POP" else 0
        else:
            mode = str(mode_body.get("mode", "PULL"))
            share = int(mode_body.get("popShareQueueNum", 0))
        queues = await self._queues(topic)
        assigned: list[MessageQueue] | None
        if queues is None:
            assigned = None
        elif model == "BROADCASTING":
            assigned = queues
        elif (info := self.consumers.get(group)) is None:
            # upstream: no consumer of the group has sent a heartbeat, no answer (null)
            log.warning("query assignment: group %s has no consumer", group)
            assigned = None
        else:
            cid_all = sorted(info.client_ids())
            try:
                if not queues or not cid_all:
                    assigned = []
                elif mode == "POP":
                    assigned = allocate_for_pop(strategy, group, client_id, queues, cid_all, share)
                else:
                    assigned = list(allocate(strategy, group, client_id, queues, cid_all))
            except AllocateError as exc:
                log.warning("query assignment of %s/%s: %s", topic, group, exc)
                assigned = None
        out = None
        if assigned is not None:
            out = [
                {
                    "messageQueue": {
                        "topic": mq.topic,
                        "brokerName": mq.broker_name,
                        "queueId": mq.queue_id,
                    },
                    "mode": mode,
                }
                for mq in assigned
            ]
        return request.response(
            ResponseCode.SUCCESS, None, None, orjson.dumps({"messageQueueAssignments": out})
        )

    async def set_message_request_mode(
        self, channel: Channel, request: RemotingCommand
    ) -> RemotingCommand:
        try:
            body = request.body_json()
            if not isinstance(body, dict):
                raise ValueError("SetMessageRequestModeRequestBody is not a JSON object")
            topic = str(body["topic"])
            group = str(body["consumerGroup"])
            mode = str(body.get("mode") or "PULL")
            share = int(body.get("popShareQueueNum") or 0)
        except (KeyError, ValueError, TypeError) as exc:
            return request.response(
                ResponseCode.SYSTEM_ERROR, f"bad SET_MESSAGE_REQUEST_MODE body: {exc}"
            )
        if mode not in MODES:
            return request.response(ResponseCode.SYSTEM_ERROR, f"unknown mode {mode!r}")
        if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            return request.response(
                ResponseCode.NO_PERMISSION, "retry topic is not allowed to set mode"
            )
        if self.topics.get(topic) is None:
            return request.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
        if self.groups.find(group) is None:
            return request.response(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, "subscription group does not exist"
            )
        self.modes.set(
            topic,
            group,
            {"topic": topic, "consumerGroup": group, "mode": mode, "popShareQueueNum": share},
        )
        # saved behind the answer: an fsync on a busy disk must not outlast mqadmin's timeout
        # (upstream answers after a write without fsync); a failure is logged
        task = asyncio.get_running_loop().create_task(self._persist())
        self._saving.add(task)
        task.add_done_callback(self._saving.discard)
        return request.response(ResponseCode.SUCCESS)

    async def flush(self) -> None:
        """Wait for the mode saves in flight (at shutdown)."""
        for task in list(self._saving):
            await task

    async def _persist(self) -> None:
        try:
            await self.modes.persist()
        except OSError as exc:
            log.error("cannot write %s: %s", self.modes.path, exc)
