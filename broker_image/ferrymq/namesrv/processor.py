"""NameServer request handlers (upstream DefaultRequestProcessor): translate wire <-> RouteTable calls.

Handlers are synchronous (the route table never waits), so requests are answered inline, except
KV config changes, answered once they are on disk. Bad
headers or bodies get SYSTEM_ERROR with a remark naming the field, never an exception in the server.
"""

from __future__ import annotations

import asyncio
import logging
import time
import zlib
from collections.abc import Callable

from ferrymq.namesrv.kv_config import ORDER_TOPIC_CONFIG, KVConfigManager
from ferrymq.namesrv.route_table import RouteTable
from ferrymq.remoting.bodies import BodyError, KVTable, RegisterBrokerBody
from ferrymq.remoting.channel import Channel
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.headers import (
    AddWritePermOfBrokerRequestHeader,
    AddWritePermOfBrokerResponseHeader,
    DeleteTopicFromNamesrvRequestHeader,
    GetKVConfigRequestHeader,
    GetKVConfigResponseHeader,
    GetKVListByNamespaceRequestHeader,
    GetRouteInfoRequestHeader,
    GetTopicsByClusterRequestHeader,
    HeaderError,
    PutKVConfigRequestHeader,
    RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader,
    UnRegisterBrokerRequestHeader,
    WipeWritePermOfBrokerRequestHeader,
    WipeWritePermOfBrokerResponseHeader,
)
from ferrymq.remoting.processor import Handler, HandlerResult
from ferrymq.remoting.server import RemotingServer

log = logging.getLogger(__name__)


def guarded(handler: Handler) -> Handler:
    """Turn a bad header/body into SYSTEM_ERROR with the reason as remark (no traceback spam)."""

    def run(channel: Channel, request: RemotingCommand) -> HandlerResult:
        try:
            return handler(channel, request)
        except (HeaderError, BodyError) as exc:
            log.warning("bad request code %d from %s: %s", request.code, channel.remote_addr, exc)
            return request.response(ResponseCode.SYSTEM_ERROR, str(exc))

    return run


def java_crc32(data: bytes) -> int:
    # upstream UtilAll.crc32 masks the sign bit
    return zlib.crc32(data) & 0x7FFFFFFF


class NamesrvProcessor:
    def __init__(
        self,
        routes: RouteTable,
        kv: KVConfigManager,
        *,
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self.routes = routes
        self.kv = kv
        self.clock_ms = clock_ms
        # watchers that drop a broker's routes when its connection closes (upstream
        # BrokerHousekeepingService.onChannelClose)
        self._watched: dict[int, asyncio.Task[None]] = {}

    def register_to(self, server: RemotingServer) -> None:
        table: dict[int, Handler] = {
            RequestCode.REGISTER_BROKER: self.register_broker,
            RequestCode.UNREGISTER_BROKER: self.unregister_broker,
            RequestCode.GET_ROUTEINFO_BY_TOPIC: self.get_route_info,
            RequestCode.GET_BROKER_CLUSTER_INFO: self.get_cluster_info,
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self.get_all_topics,
            RequestCode.GET_TOPICS_BY_CLUSTER: self.get_topics_by_cluster,
            RequestCode.DELETE_TOPIC_IN_NAMESRV: self.delete_topic,
            RequestCode.WIPE_WRITE_PERM_OF_BROKER: self.wipe_write_perm,
            RequestCode.ADD_WRITE_PERM_OF_BROKER: self.add_write_perm,
            RequestCode.PUT_KV_CONFIG: self.put_kv_config,
            RequestCode.GET_KV_CONFIG: self.get_kv_config,
            RequestCode.DELETE_KV_CONFIG: self.delete_kv_config,
            RequestCode.GET_KVLIST_BY_NAMESPACE: self.get_kv_list,
        }
        for code, handler in table.items():
            server.register(code, guarded(handler))

    # --- brokers ------------------------------------------------------------------------------
    def register_broker(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        header = RegisterBrokerRequestHeader.from_ext(request.ext_fields)
        raw = request.body_bytes()
        if header.compressed:
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                "compressed REGISTER_BROKER bodies are not supported; set compressedRegister=false",
            )
        if header.body_crc32 != 0 and java_crc32(raw) != header.body_crc32:
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                f"register body CRC mismatch from {header.broker_addr}: body corrupted in transit",
            )
        refusal = self.routes.registration_refusal(
            broker_name=header.broker_name,
            broker_addr=header.broker_addr,
            broker_id=header.broker_id,
            broker_role=header.broker_role,
        )
        if refusal is not None:
            log.error("REGISTER_BROKER from %s: %s", channel.remote_addr, refusal)
            return request.response(ResponseCode.NO_PERMISSION, refusal)
        body = RegisterBrokerBody.decode(raw) if raw else RegisterBrokerBody()
        result = self.routes.register_broker(
            cluster_name=header.cluster_name,
            broker_addr=header.broker_addr,
            broker_name=header.broker_name,
            broker_id=header.broker_id,
            ha_server_addr=header.ha_server_addr,
            topic_config_wrapper=body.topic_config_serialize_wrapper,
            filter_server_list=body.filter_server_list,
            now_ms=self.clock_ms(),
            channel=channel,
        )
        if result.conflict is not None:
            # upstream answers SUCCESS with an empty result and logs the conflict
            log.warning("REGISTER_BROKER from %s: %s", channel.remote_addr, result.conflict)
        self._watch(channel)
        reply = RegisterBrokerResponseHeader(
            ha_server_addr=result.ha_server_addr, master_addr=result.master_addr
        )
        order_conf = KVTable(table=self.kv.namespace(ORDER_TOPIC_CONFIG))
        return request.response(ResponseCode.SUCCESS, None, reply.to_ext(), order_conf.encode())

    def _watch(self, channel: Channel) -> None:
        key = id(channel)
        if key in self._watched:
            return
        task = asyncio.get_running_loop().create_task(self._on_close(channel))
        self._watched[key] = task

    async def _on_close(self, channel: Channel) -> None:
        try:
            await channel.wait_closed()
        finally:
            self._watched.pop(id(channel), None)
        addr = self.routes.broker_addr_of_channel(channel)
        if addr is not None:
            removed = self.routes.remove_broker_addr(addr)
            log.info("broker %s connection closed; routes removed: %s", addr, removed)

    def stop_watching(self) -> None:
        for task in self._watched.values():
            task.cancel()
        self._watched.clear()

    def unregister_broker(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        header = UnRegisterBrokerRequestHeader.from_ext(request.ext_fields)
        removed = self.routes.unregister_broker(
            cluster_name=header.cluster_name,
            broker_addr=header.broker_addr,
            broker_name=header.broker_name,
            broker_id=header.broker_id,
        )
        log.info("broker unregistered: %s", removed)
        return request.response(ResponseCode.SUCCESS)

    # --- routes -------------------------------------------------------------------------------
    def get_route_info(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        header = GetRouteInfoRequestHeader.from_ext(request.ext_fields)
        route = self.routes.pickup_topic_route_data(header.topic)
        if route is None:
            return request.response(
                ResponseCode.TOPIC_NOT_EXIST,
                f"No topic route info in name server for the topic: {header.topic}"
                # upstream appends FAQUrl.suggestTodo(APPLY_TOPIC_URL); clients show it as is
                "\nSee https://rocketmq.apache.org/docs/bestPractice/06FAQ for further details.",
            )
        order_conf = self.kv.get(ORDER_TOPIC_CONFIG, header.topic)
        if order_conf is not None:
            route.order_topic_conf = order_conf
        return request.response(ResponseCode.SUCCESS, None, None, route.encode())

    def get_cluster_info(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        return request.response(
            ResponseCode.SUCCESS, None, None, self.routes.cluster_info().encode()
        )

    def get_all_topics(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        return request.response(ResponseCode.SUCCESS, None, None, self.routes.all_topics().encode())

    def get_topics_by_cluster(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        header = GetTopicsByClusterRequestHeader.from_ext(request.ext_fields)
        body = self.routes.topics_by_cluster(header.cluster).encode()
        return request.response(ResponseCode.SUCCESS, None, None, body)

    def delete_topic(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        header = DeleteTopicFromNamesrvRequestHeader.from_ext(request.ext_fields)
        self.routes.delete_topic(header.topic, header.cluster_name)
        return request.response(ResponseCode.SUCCESS)

    def wipe_write_perm(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        header = WipeWritePermOfBrokerRequestHeader.from_ext(request.ext_fields)
        count = self.routes.wipe_write_perm_of_broker(header.broker_name)
        log.info("write permission of broker %s wiped on %d topics", header.broker_name, count)
        reply = WipeWritePermOfBrokerResponseHeader(wipe_topic_count=count)
        return request.response(ResponseCode.SUCCESS, None, reply.to_ext())

    def add_write_perm(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        header = AddWritePermOfBrokerRequestHeader.from_ext(request.ext_fields)
        count = self.routes.add_write_perm_of_broker(header.broker_name)
        reply = AddWritePermOfBrokerResponseHeader(add_topic_count=count)
        return request.response(ResponseCode.SUCCESS, None, reply.to_ext())

    # --- kv config ----------------------------------------------------------------------------
    async def _saved(self, request: RemotingCommand) -> RemotingCommand:
        """SUCCESS once the KV table with this change is on disk (upstream persists before it
        answers); SYSTEM_ERROR naming the reason when the write failed."""
        try:
            await self.kv.save()
        except OSError as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, f"kv config not persisted: {exc}")
        return request.response(ResponseCode.SUCCESS)

    def put_kv_config(self, channel: Channel, request: RemotingCommand) -> HandlerResult:
        header = PutKVConfigRequestHeader.from_ext(request.ext_fields)
        self.kv.put(header.namespace, header.key, header.value)
        return self._saved(request)

    def get_kv_config(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        header = GetKVConfigRequestHeader.from_ext(request.ext_fields)
        value = self.kv.get(header.namespace, header.key)
        if value is None:
            return request.response(
                ResponseCode.QUERY_NOT_FOUND,
                f"No config item, Namespace: {header.namespace} Key: {header.key}",
            )
        return request.response(
            ResponseCode.SUCCESS, None, GetKVConfigResponseHeader(value=value).to_ext()
        )

    def delete_kv_config(self, channel: Channel, request: RemotingCommand) -> HandlerResult:
        header = GetKVConfigRequestHeader.from_ext(request.ext_fields)
        if self.kv.delete(header.namespace, header.key):
            return self._saved(request)
        return request.response(ResponseCode.SUCCESS)

    def get_kv_list(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        header = GetKVListByNamespaceRequestHeader.from_ext(request.ext_fields)
        table = self.kv.namespace(header.namespace)
        if not table:
            return request.response(
                ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {header.namespace}"
            )
        return request.response(ResponseCode.SUCCESS, None, None, KVTable(table=table).encode())
