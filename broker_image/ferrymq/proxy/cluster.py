"""Cluster mode: the brokers of a cluster over remoting (upstream ``ClusterServiceManager``:
``ClusterMessageService``, ``ClusterTopicRouteService``, ``ClusterMetadataService``,
``ClusterTransactionService``).

Routes come from the NameServer and are cached for ``topicRouteServiceCacheRefreshSeconds``; a
broker is addressed by name through the master address of the last route (or the cluster info)
that named it. Topic and group configs are read from a broker of the topic (GET_TOPIC_CONFIG,
GET_SUBSCRIPTIONGROUP_CONFIG; brokers without those codes answer the GET_ALL_* form). The proxy
heartbeats every master with the producer groups of transactional topics in use, so that the
brokers' CHECK_TRANSACTION_STATE requests reach it; it hands them to the listener.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Callable
from contextlib import suppress
from typing import Any

from ferrymq.client.errors import MQClientError
from ferrymq.message import MessageExt
from ferrymq.proxy import message_type as mt
from ferrymq.proxy import receipt_handle as rh
from ferrymq.proxy.backend import (
    DEFAULT_CUSTOMIZED_NEXT_MS,
    GroupConfig,
    GroupRetryPolicy,
    PopOutcome,
    PopStatus,
    SendOutcome,
    SendStatus,
    TransactionCheckListener,
)
from ferrymq.proxy.errors import Code, ProxyError, broker_error
from ferrymq.remoting import bodies, fastjson, headers
from ferrymq.remoting.channel import Channel, RpcHook
from ferrymq.remoting.client import RemotingClient
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.errors import RemotingError
from ferrymq.remoting.processor import ProcessorTable
from ferrymq.store.record import decode_messages
from ferrymq.tasks import Periodic, cancel_all_and_wait

log = logging.getLogger(__name__)

# broker name, the broker's CHECK_TRANSACTION_STATE request, its half message -> relayed?
RawCheckRelay = Callable[[str, RemotingCommand, MessageExt], bool]

CALL_TIMEOUT_S = 3.0
MASTER_ID = 0
_SEND_STATUS: dict[int, SendStatus] = {
    ResponseCode.SUCCESS: SendStatus.SEND_OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE,
}


FAQ_URL = "https://rocketmq.apache.org/docs/bestPractice/06FAQ"


def topic_not_found_message(topic: str) -> str:
    return (
        f"CODE: {ResponseCode.TOPIC_NOT_EXIST}  DESC: No topic route info in name server for the "
        f"topic: {topic}\nFor more information, please visit the url, {FAQ_URL}"
    )


def _retry_policy(raw: Any) -> GroupRetryPolicy:
    """A group config's ``groupRetryPolicy`` JSON (upstream GroupRetryPolicy); CUSTOMIZED with
    the delay levels when absent or unreadable."""
    if isinstance(raw, dict) and str(raw.get("type", "")).upper() == "EXPONENTIAL":
        exp = raw.get("exponentialRetryPolicy") or {}
        return GroupRetryPolicy(
            (
                int(exp.get("initial", 5000)),
                int(exp.get("max", 7_200_000)),
                int(exp.get("multiplier", 2)),
            ),
            DEFAULT_CUSTOMIZED_NEXT_MS,
        )
    custom = raw.get("customizedRetryPolicy") if isinstance(raw, dict) else None
    nxt = custom.get("next") if isinstance(custom, dict) else None
    if isinstance(nxt, list) and nxt:
        return GroupRetryPolicy(None, tuple(int(x) for x in nxt))
    return GroupRetryPolicy(None, DEFAULT_CUSTOMIZED_NEXT_MS)


def group_config_of(obj: Any) -> GroupConfig:
    """A SubscriptionGroupConfig JSON object as the proxy's GroupConfig."""
    return GroupConfig(
        group=str(obj.get("groupName", "")),
        retry_max_times=int(obj.get("retryMaxTimes", 16)),
        consume_message_orderly=bool(obj.get("consumeMessageOrderly", False)),
        retry_policy=_retry_policy(obj.get("groupRetryPolicy")),
    )


class ClusterBackend:
    def __init__(
        self,
        namesrv_addrs: list[str],
        cluster_name: str,
        *,
        route_ttl_s: float = 20.0,
        heartbeat_period_s: float = 20.0,
        rpc_hook: RpcHook | None = None,
    ) -> None:
        self.namesrv_addrs = namesrv_addrs
        self.cluster_name = cluster_name
        self.route_ttl_s = route_ttl_s
        self.heartbeat_period_s = heartbeat_period_s
        processors = ProcessorTable()
        processors.register(RequestCode.CHECK_TRANSACTION_STATE, self._on_check)
        self.remoting = RemotingClient(processors, name="proxy", rpc_hook=rpc_hook)
        self.client_id = f"{socket.gethostname()}@proxy@{os.getpid()}"
        self._routes: dict[str, tuple[float, bodies.TopicRouteData]] = {}
        # upstream's metadata caches (topicConfigCacheRefreshSeconds etc., 20 s): every
        # QueryRoute, Settings and ReceiveMessage needs these, the brokers change them rarely
        self._topic_types: dict[str, tuple[float, mt.TopicMessageType]] = {}
        self._groups: dict[str, tuple[float, GroupConfig | None]] = {}
        self._broker_addrs: dict[str, str] = {}
        # producer groups to heartbeat, per source (the gRPC port's transactional topics, the
        # remoting port's transactional producers): the brokers check with the union
        self._producer_groups_of: dict[str, set[str]] = {}
        self._producer_groups: set[str] = set()
        self._listener: TransactionCheckListener | None = None
        self._raw_check_relay: RawCheckRelay | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._heartbeat = Periodic(
            "proxy-heartbeat", self._heartbeat_all, lambda: self.heartbeat_period_s
        )
        self._ns_index = 0

    # --- lifecycle -----------------------------------------------------------------------------
    async def start(self) -> None:
        self._heartbeat.start()

    async def shutdown(self) -> None:
        await self._heartbeat.stop()
        await cancel_all_and_wait(list(self._tasks))
        await self.remoting.close()

    # --- plumbing ------------------------------------------------------------------------------
    async def _invoke(
        self,
        addr: str,
        code: int,
        header: headers.Header | None,
        body: bytes | None = None,
        timeout: float = CALL_TIMEOUT_S,
    ) -> RemotingCommand:
        ext = header.to_ext() if header is not None else None
        try:
            return await self.remoting.invoke(
                addr, RemotingCommand.request(code, ext, body), timeout
            )
        except TimeoutError:
            raise ProxyError(Code.PROXY_TIMEOUT, f"broker {addr} did not answer in time") from None
        except (RemotingError, OSError, ValueError) as exc:
            raise ProxyError(Code.INTERNAL_SERVER_ERROR, f"broker {addr}: {exc}") from None

    async def _call(
        self,
        addr: str,
        code: int,
        header: headers.Header | None,
        body: bytes | None = None,
        timeout: float = CALL_TIMEOUT_S,
    ) -> RemotingCommand:
        response = await self._invoke(addr, code, header, body, timeout)
        if response.code != ResponseCode.SUCCESS:
            raise broker_error(response.code, response.remark)
        return response

    async def _namesrv(self, code: int, header: headers.Header | None) -> RemotingCommand:
        errors: list[str] = []
        for i in range(len(self.namesrv_addrs)):
            idx = (self._ns_index + i) % len(self.namesrv_addrs)
            addr = self.namesrv_addrs[idx]
            try:
                response = await self.remoting.invoke(
                    addr,
                    RemotingCommand.request(code, header.to_ext() if header else None),
                    CALL_TIMEOUT_S,
                )
            except (RemotingError, OSError, ValueError) as exc:
                errors.append(f"{addr}: {exc}")
                continue
            self._ns_index = idx
            return response
        raise ProxyError(Code.INTERNAL_SERVER_ERROR, "no NameServer answered: " + "; ".join(errors))

    async def broker_addr(self, broker_name: str) -> str:
        addr = self._broker_addrs.get(broker_name)
        if addr is not None:
            return addr
        await self._refresh_brokers()
        addr = self._broker_addrs.get(broker_name)
        if addr is None:
            raise ProxyError(Code.BAD_REQUEST, f"the broker {broker_name} does not exist")
        return addr

    async def _refresh_brokers(self) -> None:
        """The master of every broker group, from the NameServer's cluster info."""
        response = await self._namesrv(RequestCode.GET_BROKER_CLUSTER_INFO, None)
        if response.code == ResponseCode.SUCCESS:
            info = bodies.ClusterInfo.decode(response.body_bytes())
            for data in info.broker_addr_table.values():
                master = data.broker_addrs.get(MASTER_ID)
                if master:
                    self._broker_addrs[data.broker_name] = master

    # --- routes and metadata --------------------------------------------------------------------
    async def topic_route(self, topic: str) -> bodies.TopicRouteData:
        cached = self._routes.get(topic)
        now = time.monotonic()
        if cached is not None and now - cached[0] < self.route_ttl_s:
            return cached[1]
        response = await self._namesrv(
            RequestCode.GET_ROUTEINFO_BY_TOPIC, headers.GetRouteInfoRequestHeader(topic=topic)
        )
        if response.code == ResponseCode.TOPIC_NOT_EXIST:
            self._routes.pop(topic, None)
            # upstream's proxy answers its own text (TopicRouteService, MQClientException with
            # FAQUrl.attachDefaultURL), not the NameServer's remark; over remoting too
            message = topic_not_found_message(topic)
            raise ProxyError(
                Code.TOPIC_NOT_FOUND,
                message,
                remote_code=ResponseCode.TOPIC_NOT_EXIST,
                remote_remark=message,
            )
        if response.code != ResponseCode.SUCCESS:
            raise broker_error(response.code, response.remark)
        route = bodies.TopicRouteData.decode(response.body_bytes())
        for data in route.broker_datas:
            master = data.broker_addrs.get(MASTER_ID)
            if master:
                self._broker_addrs[data.broker_name] = master
        self._routes[topic] = (now, route)
        return route

    async def _any_master(self, topic: str) -> str | None:
        try:
            route = await self.topic_route(topic)
        except ProxyError:
            return None
        for data in route.broker_datas:
            master = data.broker_addrs.get(MASTER_ID)
            if master:
                return master
        return None

    async def topic_message_type(self, topic: str) -> mt.TopicMessageType:
        cached = self._topic_types.get(topic)
        now = time.monotonic()
        if cached is not None and now - cached[0] < self.route_ttl_s:
            return cached[1]
        found = await self._topic_message_type(topic)
        if found is not mt.TopicMessageType.UNSPECIFIED:
            self._topic_types[topic] = (now, found)
        return found

    async def _topic_message_type(self, topic: str) -> mt.TopicMessageType:
        addr = await self._any_master(topic)
        if addr is None:
            return mt.TopicMessageType.UNSPECIFIED
        response = await self._invoke(
            addr, RequestCode.GET_TOPIC_CONFIG, headers.GetTopicConfigRequestHeader(topic=topic)
        )
        if response.code == ResponseCode.SUCCESS:
            obj = fastjson.loads(response.body_bytes())
            config = obj.get("topicConfig", obj) if isinstance(obj, dict) else {}
            return mt.of_attributes(config.get("attributes"))
        if response.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
            wrapper = bodies.TopicConfigSerializeWrapper.decode(
                (await self._call(addr, RequestCode.GET_ALL_TOPIC_CONFIG, None)).body_bytes()
            )
            found = wrapper.topic_config_table.get(topic)
            return mt.of_attributes(found.attributes) if found else mt.TopicMessageType.UNSPECIFIED
        return mt.TopicMessageType.UNSPECIFIED

    async def group_config(self, group: str) -> GroupConfig | None:
        cached = self._groups.get(group)
        now = time.monotonic()
        if cached is not None and now - cached[0] < self.route_ttl_s:
            return cached[1]
        found = await self._group_config(group)
        self._groups[group] = (now, found)
        return found

    async def _group_config(self, group: str) -> GroupConfig | None:
        # upstream reads it from a broker of the cluster (the cluster name is a topic too)
        addr = await self._any_master(self.cluster_name)
        if addr is None and self._broker_addrs:
            addr = next(iter(self._broker_addrs.values()))
        if addr is None:
            return None
        response = await self._invoke(
            addr,
            RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG,
            headers.GetSubscriptionGroupConfigRequestHeader(group=group),
        )
        if response.code == ResponseCode.SUCCESS:
            obj = fastjson.loads(response.body_bytes())
            return group_config_of(obj) if isinstance(obj, dict) else None
        if response.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
            raw = (
                await self._call(addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, None)
            ).body_bytes()
            obj = fastjson.loads(raw)
            table = obj.get("subscriptionGroupTable") if isinstance(obj, dict) else None
            found = table.get(group) if isinstance(table, dict) else None
            return group_config_of(found) if isinstance(found, dict) else None
        return None

    # --- messages ------------------------------------------------------------------------------
    async def send(
        self, broker_name: str, header: headers.SendMessageRequestHeader, body: bytes
    ) -> SendOutcome:
        addr = await self.broker_addr(broker_name)
        response = await self._invoke(addr, RequestCode.SEND_MESSAGE, header, body)
        status = _SEND_STATUS.get(response.code)
        if status is None:
            raise broker_error(response.code, response.remark)
        get = response.ext_fields.get
        return SendOutcome(
            status=status,
            msg_id=get("msgId", ""),
            queue_id=int(get("queueId") or header.queue_id),
            queue_offset=int(get("queueOffset") or -1),
            transaction_id=get("transactionId"),
            recall_handle=get("recallHandle"),
        )

    async def pop(
        self, broker_name: str, header: headers.PopMessageRequestHeader, timeout_s: float
    ) -> PopOutcome:
        addr = await self.broker_addr(broker_name)
        response = await self._invoke(addr, RequestCode.POP_MESSAGE, header, timeout=timeout_s)
        if response.code in (ResponseCode.POLLING_TIMEOUT, ResponseCode.PULL_NOT_FOUND):
            return PopOutcome(PopStatus.NO_NEW_MSG)
        if response.code == ResponseCode.POLLING_FULL:
            return PopOutcome(PopStatus.POLLING_FULL)
        if response.code != ResponseCode.SUCCESS:
            raise broker_error(response.code, response.remark)
        try:
            info = headers.PopMessageResponseHeader.from_ext(response.ext_fields)
            # bodies stay as stored: a GZIP body goes to the client flagged, as upstream's
            messages = decode_messages(response.body_bytes(), decompress_body=False)
            rh.assign_handles(
                messages,
                rh.PopInfo(
                    info.pop_time,
                    info.invisible_time,
                    info.revive_qid,
                    info.start_offset_info,
                    info.msg_offset_info,
                    info.order_count_info,
                ),
                broker_name,
                header.topic,
                header.order,
            )
        except (headers.HeaderError, ValueError) as exc:
            raise ProxyError(
                Code.INTERNAL_SERVER_ERROR, f"unreadable POP answer from {broker_name}: {exc}"
            ) from None
        return PopOutcome(PopStatus.FOUND, messages, info.rest_num)

    async def ack(self, broker_name: str, header: headers.AckMessageRequestHeader) -> None:
        addr = await self.broker_addr(broker_name)
        await self._call(addr, RequestCode.ACK_MESSAGE, header)

    async def change_invisible_time(
        self, broker_name: str, header: headers.ChangeInvisibleTimeRequestHeader
    ) -> headers.ChangeInvisibleTimeResponseHeader:
        addr = await self.broker_addr(broker_name)
        response = await self._call(addr, RequestCode.CHANGE_MESSAGE_INVISIBLETIME, header)
        try:
            return headers.ChangeInvisibleTimeResponseHeader.from_ext(response.ext_fields)
        except headers.HeaderError as exc:
            raise ProxyError(Code.INTERNAL_SERVER_ERROR, str(exc)) from None

    async def send_back(
        self, broker_name: str, header: headers.ConsumerSendMsgBackRequestHeader
    ) -> None:
        addr = await self.broker_addr(broker_name)
        await self._call(addr, RequestCode.CONSUMER_SEND_MSG_BACK, header)

    async def end_transaction(
        self, broker_name: str, header: headers.EndTransactionRequestHeader
    ) -> None:
        addr = await self.broker_addr(broker_name)
        try:
            await self.remoting.invoke_oneway(
                addr,
                RemotingCommand.request(RequestCode.END_TRANSACTION, header.to_ext(), oneway=True),
            )
        except (RemotingError, OSError, ValueError) as exc:
            raise ProxyError(Code.INTERNAL_SERVER_ERROR, f"broker {addr}: {exc}") from None

    async def recall(self, broker_name: str, header: headers.RecallMessageRequestHeader) -> str:
        addr = await self.broker_addr(broker_name)
        response = await self._call(addr, RequestCode.RECALL_MESSAGE, header)
        return response.ext_fields.get("msgId", "")

    # --- a client's remoting request, passed on (the remoting port) ------------------------------
    async def forward(
        self, broker_name: str, request: RemotingCommand, timeout_s: float
    ) -> RemotingCommand:
        """``request`` sent as it is to the master of ``broker_name``; its answer, whatever the
        code (upstream ``MessagingProcessor.request``)."""
        addr = await self.broker_addr(broker_name)
        return await self._invoke_command(addr, request, timeout_s)

    async def forward_oneway(self, broker_name: str, request: RemotingCommand) -> None:
        addr = await self.broker_addr(broker_name)
        try:
            await self.remoting.invoke_oneway(addr, request)
        except (RemotingError, OSError, ValueError) as exc:
            raise ProxyError(Code.INTERNAL_SERVER_ERROR, f"broker {addr}: {exc}") from None

    def broker_name_of_addr(self, addr: str) -> str | None:
        """The broker group whose master is ``addr`` (upstream getBrokerNameByAddr)."""
        return next((n for n, a in self._broker_addrs.items() if a == addr), None)

    async def _invoke_command(
        self, addr: str, request: RemotingCommand, timeout_s: float
    ) -> RemotingCommand:
        try:
            return await self.remoting.invoke(addr, request, timeout_s)
        except TimeoutError:
            raise ProxyError(Code.PROXY_TIMEOUT, f"broker {addr} did not answer in time") from None
        except (RemotingError, OSError, ValueError) as exc:
            raise ProxyError(Code.INTERNAL_SERVER_ERROR, f"broker {addr}: {exc}") from None

    # --- transaction checks ---------------------------------------------------------------------
    def set_producer_groups(self, groups: set[str], source: str = "grpc") -> None:
        self._producer_groups_of[source] = set(groups)
        union = set().union(*self._producer_groups_of.values())
        if union - self._producer_groups:
            self._producer_groups = union
            self._spawn(self._heartbeat_all())
        else:
            self._producer_groups = union

    def set_raw_check_relay(self, relay: RawCheckRelay) -> None:
        """Checks for producers of the remoting port: ``relay`` takes the broker's request as
        it came and answers whether one of its producers got it (else the gRPC listener's)."""
        self._raw_check_relay = relay

    def set_transaction_check_listener(self, listener: TransactionCheckListener) -> None:
        self._listener = listener

    def _spawn(self, coro: Any) -> None:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _heartbeat_all(self) -> None:
        groups = sorted(self._producer_groups)
        if not groups:
            return
        data = bodies.HeartbeatData(
            client_id=self.client_id,
            producer_data_set=[bodies.ProducerData(group_name=g) for g in groups],
        )
        body = data.encode()
        with suppress(ProxyError):
            await self._refresh_brokers()
        for name, addr in list(self._broker_addrs.items()):
            try:
                await self._call(addr, RequestCode.HEART_BEAT, None, body)
            except ProxyError as exc:
                log.warning("heartbeat to broker %s (%s) failed: %s", name, addr, exc)

    def _on_check(self, channel: Channel, request: RemotingCommand) -> None:
        listener = self._listener
        if listener is None:
            return None
        try:
            header = headers.CheckTransactionStateRequestHeader.from_ext(request.ext_fields)
            (msg,) = decode_messages(request.body_bytes(), decompress_body=False)
        except (headers.HeaderError, ValueError) as exc:
            log.warning("unusable CHECK_TRANSACTION_STATE from %s: %s", channel.remote_addr, exc)
            return None
        addr = channel.attrs.get("addr")
        broker_name = next((n for n, a in self._broker_addrs.items() if a == addr), "")
        relay = self._raw_check_relay
        if relay is not None and relay(broker_name, request, msg):
            return None
        self._spawn(self._relay(listener, broker_name, header, msg))
        return None

    async def _relay(
        self,
        listener: TransactionCheckListener,
        broker_name: str,
        header: headers.CheckTransactionStateRequestHeader,
        msg: MessageExt,
    ) -> None:
        try:
            await listener(broker_name, header, msg)
        except (ProxyError, MQClientError) as exc:
            log.warning("transaction check of %s not relayed: %s", header.msg_id, exc)
