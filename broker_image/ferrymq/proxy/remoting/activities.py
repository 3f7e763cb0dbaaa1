"""The remoting port's handlers (upstream ``proxy/remoting/activity``): each request is checked
or completed from what the proxy knows, then passed on as it is to the broker group the client
named (``bname``; ``n`` on V2 sends), and the broker's answer goes back unchanged. Routes are
rewritten to the proxy's address, clients' heartbeats stay with the proxy (which answers the
rebalance questions), and a broker's transaction check goes to a producer connected here."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from ferrymq.message import MessageConst, MessageExt, decode_message_id, decode_properties
from ferrymq.proxy import message_type as mt
from ferrymq.proxy.cluster import ClusterBackend
from ferrymq.proxy.config import ProxyConfig
from ferrymq.proxy.errors import ProxyError
from ferrymq.proxy.remoting import dispatch
from ferrymq.proxy.remoting.clients import RemotingClients
from ferrymq.proxy.remoting.route import proxied_route
from ferrymq.remoting import bodies, headers
from ferrymq.remoting.channel import Channel
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.processor import ProcessorTable
from ferrymq.topic_validator import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX

log = logging.getLogger(__name__)

CALL_TIMEOUT_S = 3.0  # upstream: Duration.ofSeconds(3) for sends, offsets, locks
LONG_POLL_EXTRA_S = 10.0  # upstream: a pull or pop waits its suspend/poll time plus 10 s

Activity = Callable[[Channel, RemotingCommand], Awaitable[RemotingCommand | None]]

# codes passed on as they are, with the time the broker gets to answer
_FORWARDED: dict[int, float] = {
    RequestCode.CONSUMER_SEND_MSG_BACK: CALL_TIMEOUT_S,
    RequestCode.RECALL_MESSAGE: CALL_TIMEOUT_S,
    RequestCode.ACK_MESSAGE: CALL_TIMEOUT_S,
    RequestCode.CHANGE_MESSAGE_INVISIBLETIME: CALL_TIMEOUT_S,
    RequestCode.UPDATE_CONSUMER_OFFSET: CALL_TIMEOUT_S,
    RequestCode.QUERY_CONSUMER_OFFSET: CALL_TIMEOUT_S,
    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: CALL_TIMEOUT_S,
    RequestCode.GET_MIN_OFFSET: CALL_TIMEOUT_S,
    RequestCode.GET_MAX_OFFSET: CALL_TIMEOUT_S,
    RequestCode.GET_EARLIEST_MSG_STORETIME: CALL_TIMEOUT_S,
}


def _int(ext: dict[str, str], key: str) -> int:
    try:
        return int(ext.get(key) or 0)
    except ValueError:
        return 0


class RemotingActivities:
    def __init__(
        self, config: ProxyConfig, backend: ClusterBackend, proxy_addr: Callable[[], str]
    ) -> None:
        self.config = config
        self.backend = backend
        self.clients = RemotingClients()
        self._proxy_addr = proxy_addr
        self._transactional_groups: set[str] = set()
        self._stamp = dispatch.Stamp(config.region_id, config.trace_on)
        backend.set_raw_check_relay(self.relay_check)

    def register(self, table: ProcessorTable) -> None:
        table.register(RequestCode.GET_ROUTEINFO_BY_TOPIC, self._served(self.route))
        code: int
        for code in (
            RequestCode.SEND_MESSAGE,
            RequestCode.SEND_MESSAGE_V2,
            RequestCode.SEND_BATCH_MESSAGE,
        ):
            table.register(code, self._served(self.send))
        for code in _FORWARDED:
            table.register(code, self._served(self.forward))
        table.register(RequestCode.PULL_MESSAGE, self._served(self.pull))
        table.register(RequestCode.LITE_PULL_MESSAGE, self._served(self.pull))
        table.register(RequestCode.POP_MESSAGE, self._served(self.pop))
        table.register(RequestCode.END_TRANSACTION, self._served(self.end_transaction))
        table.register(RequestCode.HEART_BEAT, self._served(self.heartbeat))
        table.register(RequestCode.UNREGISTER_CLIENT, self._served(self.unregister))
        table.register(RequestCode.CHECK_CLIENT_CONFIG, self._served(self.check_client_config))
        table.register(RequestCode.GET_CONSUMER_LIST_BY_GROUP, self._served(self.consumer_list))
        table.register(
            RequestCode.GET_CONSUMER_CONNECTION_LIST, self._served(self.consumer_connections)
        )
        table.register(RequestCode.LOCK_BATCH_MQ, self._served(self.lock))
        table.register(RequestCode.UNLOCK_BATCH_MQ, self._served(self.lock))

    def _served(self, activity: Activity) -> Activity:
        """A proxy error answered as upstream's writeErrResponse does; every answer stamped."""

        async def run(channel: Channel, request: RemotingCommand) -> RemotingCommand | None:
            try:
                response = await activity(channel, request)
            except ProxyError as exc:
                response = dispatch.error_answer(request, exc)
            if response is None or request.is_oneway:
                return None
            return dispatch.stamped(response, self._stamp)

        run.__name__ = activity.__name__
        return run

    # --- passing on ----------------------------------------------------------------------------
    async def _to_broker(
        self,
        request: RemotingCommand,
        timeout_s: float,
        outgoing: RemotingCommand | None = None,
        broker_name: str | None = None,
    ) -> RemotingCommand | None:
        name = broker_name or dispatch.broker_name_of(request)
        if name is None:
            return None if request.is_oneway else dispatch.missing_broker_name(request)
        command = outgoing or dispatch.forwarded(request)
        if request.is_oneway:
            await self.backend.forward_oneway(name, command)
            return None
        return dispatch.answer(request, await self.backend.forward(name, command, timeout_s))

    async def forward(self, channel: Channel, request: RemotingCommand) -> RemotingCommand | None:
        return await self._to_broker(request, _FORWARDED[request.code])

    # --- routes ----------------------------------------------------------------------------------
    async def route(self, channel: Channel, request: RemotingCommand) -> RemotingCommand | None:
        header = headers.GetRouteInfoRequestHeader.from_ext(request.ext_fields)
        route = await self.backend.topic_route(header.topic)
        body = proxied_route(route, self._proxy_addr()).encode()
        return dispatch.answer(request, request.response(ResponseCode.SUCCESS, None, body=body))

    # --- producers -------------------------------------------------------------------------------
    async def send(self, channel: Channel, request: RemotingCommand) -> RemotingCommand | None:
        header = headers.SendMessageRequestHeader.from_ext(request.ext_fields)
        topic = header.topic
        properties = decode_properties(header.properties or "")
        actual = mt.of_properties(properties)
        internal = topic.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX))
        if (
            self.config.enable_topic_message_type_check
            and MessageConst.PROPERTY_TRANSFER_FLAG not in properties
            and not internal
        ):
            mt.validate(await self.backend.topic_message_type(topic), actual)
        if actual is mt.TopicMessageType.TRANSACTION and not internal:
            self._add_transactional_group(header.producer_group)
        return await self._to_broker(request, CALL_TIMEOUT_S)

    def _add_transactional_group(self, group: str) -> None:
        """The brokers send their checks of ``group``'s half messages to whoever heartbeats the
        group: the proxy does, for its producers (upstream addTransactionSubscription)."""
        if group not in self._transactional_groups:
            self._transactional_groups.add(group)
            self.backend.set_producer_groups(set(self._transactional_groups), source="remoting")

    async def end_transaction(
        self, channel: Channel, request: RemotingCommand
    ) -> RemotingCommand | None:
        """To the broker the client names, else the one that stored the half message (its
        offset message id holds the broker's address: 4.x clients name none)."""
        name = dispatch.broker_name_of(request)
        if name is None:
            header = headers.EndTransactionRequestHeader.from_ext(request.ext_fields)
            try:
                host, port, _ = decode_message_id(header.msg_id)
                name = self.backend.broker_name_of_addr(f"{host}:{port}")
            except ValueError:
                name = None
        if name is None:
            # upstream: TRANSACTION_DATA_NOT_FOUND is answered SUCCESS; the broker checks back
            log.warning("END_TRANSACTION for an unknown broker from %s", channel.remote_addr)
            return None if request.is_oneway else request.response(ResponseCode.SUCCESS)
        return await self._to_broker(request, CALL_TIMEOUT_S, broker_name=name)

    def relay_check(self, broker_name: str, request: RemotingCommand, msg: MessageExt) -> bool:
        """A broker's CHECK_TRANSACTION_STATE to a producer of the group connected here, which
        answers with END_TRANSACTION (from the check) through this port."""
        group = msg.properties.get(MessageConst.PROPERTY_PRODUCER_GROUP, "")
        producer = self.clients.next_producer(group)
        if producer is None:
            return False
        ext = dict(request.ext_fields)
        if broker_name:
            ext.setdefault(dispatch.BROKER_NAME_FIELD, broker_name)
        check = RemotingCommand.request(
            RequestCode.CHECK_TRANSACTION_STATE, ext, request.body, oneway=True
        )
        return producer.channel.send(check)

    # --- consumers -------------------------------------------------------------------------------
    async def pull(self, channel: Channel, request: RemotingCommand) -> RemotingCommand | None:
        header = headers.PullMessageRequestHeader.from_ext(request.ext_fields)
        outgoing = None
        if dispatch.needs_subscription(request):
            if not self.clients.consumers(header.consumer_group):
                return request.response(
                    ResponseCode.SUBSCRIPTION_NOT_LATEST, "the consumer's subscription not latest"
                )
            sub = self.clients.subscription(header.consumer_group, header.topic)
            if sub is None:
                return request.response(
                    ResponseCode.SUBSCRIPTION_NOT_EXIST, "the consumer's subscription not exist"
                )
            outgoing = dispatch.with_subscription(request, sub)
        timeout = header.suspend_timeout_millis / 1000 + LONG_POLL_EXTRA_S
        return await self._to_broker(request, timeout, outgoing)

    async def pop(self, channel: Channel, request: RemotingCommand) -> RemotingCommand | None:
        poll_ms = _int(request.ext_fields, "pollTime")
        return await self._to_broker(request, poll_ms / 1000 + LONG_POLL_EXTRA_S)

    async def lock(self, channel: Channel, request: RemotingCommand) -> RemotingCommand | None:
        """LOCK_BATCH_MQ / UNLOCK_BATCH_MQ to the broker of the first queue of the set."""
        try:
            body = bodies.LockBatchRequestBody.decode(request.body_bytes())
        except ValueError as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, f"unreadable lock request: {exc}")
        if not body.mq_set:
            return request.response(
                ResponseCode.SYSTEM_ERROR, "MessageQueue set is empty", body=request.body_bytes()
            )
        return await self._to_broker(
            request, CALL_TIMEOUT_S, broker_name=body.mq_set[0].broker_name
        )

    # --- clients (answered by the proxy) ----------------------------------------------------------
    async def heartbeat(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        try:
            data = bodies.HeartbeatData.decode(request.body_bytes())
        except ValueError as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, f"unreadable heartbeat: {exc}")
        self.clients.heartbeat(channel, data, request.language, request.version)
        return request.response(ResponseCode.SUCCESS, "")

    async def unregister(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        header = headers.UnregisterClientRequestHeader.from_ext(request.ext_fields)
        self.clients.unregister(channel, header.producer_group, header.consumer_group)
        return request.response(ResponseCode.SUCCESS, "")

    async def check_client_config(
        self, channel: Channel, request: RemotingCommand
    ) -> RemotingCommand:
        return request.response(ResponseCode.SUCCESS, "")

    async def consumer_list(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        header = headers.GetConsumerListByGroupRequestHeader.from_ext(request.ext_fields)
        ids = self.clients.consumer_ids(header.consumer_group)
        body = bodies.ConsumerListBody(consumer_id_list=ids).encode()
        return request.response(ResponseCode.SUCCESS, None, body=body)

    async def consumer_connections(
        self, channel: Channel, request: RemotingCommand
    ) -> RemotingCommand:
        header = headers.GetConsumerConnectionListRequestHeader.from_ext(request.ext_fields)
        found = self.clients.connection(header.consumer_group)
        if found is None:
            return request.response(
                ResponseCode.CONSUMER_NOT_ONLINE,
                f"the consumer group[{header.consumer_group}] not online",
            )
        return request.response(ResponseCode.SUCCESS, None, body=found.encode())
